/* optimizers.c — kiln's ten optimizers by name (optimizers.h). */
#include "optimizers.h"

#include <stdio.h>
#include <string.h>

static const struct {
    const char *name, *title;
    int twin;
} table[OPT_COUNT] = {
    [OPT_SGD] = {"sgd", "SGD-momentum", -1},
    [OPT_ADAM] = {"adam", "Adam", -1},
    [OPT_ADAMW] = {"adamw", "AdamW", -1},
    [OPT_ADAMW8] = {"adamw8bit", "AdamW-8bit", OPT_ADAMW},
    [OPT_LION] = {"lion", "Lion", -1},
    [OPT_LION8] = {"lion8bit", "Lion-8bit", OPT_LION},
    [OPT_GALORE] = {"galore", "GaLore", -1},
    [OPT_GALORE8] = {"galore8bit", "GaLore-8bit", OPT_GALORE},
    [OPT_APOLLO] = {"apollo", "APOLLO", -1},
    [OPT_APOLLO_MINI] = {"apollo-mini", "APOLLO-Mini", -1},
};

static bool valid(optimizer_id id) { return (unsigned)id < OPT_COUNT; }

const char *optimizer_name(optimizer_id id) { return valid(id) ? table[id].name : "?"; }
const char *optimizer_title(optimizer_id id) { return valid(id) ? table[id].title : "?"; }
int optimizer_twin(optimizer_id id) { return valid(id) ? table[id].twin : -1; }

int optimizer_parse(const char *name) {
    for (int i = 0; name && i < OPT_COUNT; i++)
        if (!strcmp(name, table[i].name)) return i;
    return -1;
}

const char *optimizer_choices(void) {
    static char buf[128];
    if (!buf[0]) {
        size_t n = 0;
        for (int i = 0; i < OPT_COUNT; i++) {
            size_t k = strlen(table[i].name);
            if (n + k + 2 > sizeof buf) break;
            if (i) buf[n++] = '|';
            memcpy(buf + n, table[i].name, k);
            n += k;
        }
        buf[n] = '\0';
    }
    return buf;
}

/* The Adam-family settings shared by every method but SGD and Lion: d is
 * the method's defaults; decay applies when the method takes it. */
static kiln_adam_config adam_config(kiln_adam_config d, const optimizer_settings *s, bool decay) {
    d.lr = s->lr;
    if (s->beta1 > 0) d.beta1 = s->beta1;
    if (s->beta2 > 0) d.beta2 = s->beta2;
    if (s->eps > 0) d.eps = s->eps;
    if (decay) d.weight_decay = s->weight_decay;
    return d;
}

kiln_optim *optimizer_new(kiln_ctx *ctx, optimizer_id id, const optimizer_settings *s) {
    return optimizer_new_for(ctx, id, NULL, 0, 0, s);
}

kiln_optim *optimizer_new_for(kiln_ctx *ctx, optimizer_id id, kiln_tensor *const *params, int n, int first_index,
                              const optimizer_settings *s) {
    switch (id) {
    case OPT_SGD:
        return kiln_sgd_new_for(ctx, params, n, &(kiln_sgd_config){.lr = s->lr, .momentum = 0.9f,
                                                    .weight_decay = s->l2 ? s->weight_decay : 0});
    case OPT_ADAM: {
        kiln_adam_config c = adam_config(kiln_adam_defaults(), s, s->l2);
        return kiln_adam_new_for(ctx, params, n, &c);
    }
    case OPT_ADAMW:
    case OPT_ADAMW8: {
        kiln_adam_config c = adam_config(kiln_adamw_defaults(), s, true);
        return id == OPT_ADAMW ? kiln_adamw_new_for(ctx, params, n, &c) : kiln_adamw8bit_new_for(ctx, params, n, &c);
    }
    case OPT_LION:
    case OPT_LION8: {
        kiln_lion_config c = kiln_lion_defaults();
        c.lr = s->lr;
        if (s->beta1 > 0) c.beta1 = s->beta1;
        if (s->beta2 > 0) c.beta2 = s->beta2;
        c.weight_decay = s->weight_decay;
        return id == OPT_LION ? kiln_lion_new_for(ctx, params, n, &c) : kiln_lion8bit_new_for(ctx, params, n, &c);
    }
    case OPT_GALORE:
    case OPT_GALORE8: {
        kiln_galore_config c = id == OPT_GALORE ? kiln_galore_defaults() : kiln_galore8bit_defaults();
        c.adamw = adam_config(c.adamw, s, true);
        if (s->rank > 0) c.rank = s->rank;
        if (s->update_gap > 0) c.update_gap = s->update_gap;
        return id == OPT_GALORE ? kiln_galore_adamw_new_for(ctx, params, n, &c)
                                 : kiln_galore_adamw8bit_new_for(ctx, params, n, &c);
    }
    case OPT_APOLLO:
    case OPT_APOLLO_MINI: {
        kiln_apollo_config c = id == OPT_APOLLO ? kiln_apollo_defaults() : kiln_apollo_mini_defaults();
        c.adamw = adam_config(c.adamw, s, true);
        if (s->rank > 0 && id == OPT_APOLLO) c.rank = s->rank; /* APOLLO-Mini stays rank 1 */
        if (s->update_gap > 0) c.update_gap = s->update_gap;
        c.seed = s->seed;
        c.first_index = first_index;
        return kiln_apollo_new_for(ctx, params, n, &c);
    }
    default:
        kiln_set_error(KILN_ERR_ARG, "optimizer_new: no optimizer %d", (int)id);
        return NULL;
    }
}

kiln_status optimizer_guard(kiln_optim *opt, kiln_tensor *loss) { return kiln_optim_set_skip_nonfinite(opt, true, loss); }

kiln_status optimizer_step(kiln_optim *opt) {
    kiln_status s = kiln_optim_step(opt);
    if (s != KILN_ERR_NUMERIC) return s;
    fprintf(stderr, "\n%s\n", kiln_last_error()); /* on its own line, below a progress bar */
    return KILN_OK;
}

void optimizer_print_skips(const kiln_optim *opt) {
    long long n = (long long)kiln_optim_skipped_steps(opt);
    printf("non-finite guard: %lld step%s skipped\n", n, n == 1 ? "" : "s");
}
