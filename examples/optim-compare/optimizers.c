/* optimizers.c — the ten optimizers of the comparison and their settings.
 *
 * Each uses its reference implementation's defaults (torch.optim,
 * bitsandbytes, lion-pytorch, galore_torch, apollo_torch) except for:
 *   - the learning rate, swept around the method's usual value;
 *   - weight decay 0.01 (decoupled) for AdamW and the methods built on it,
 *     0.1 for Lion (its lr is ~10x smaller, so lr * decay is alike), none
 *     for SGD and Adam;
 *   - GaLore's and APOLLO's rank: a quarter of the smaller side of the
 *     model's hidden matrices (task.rank), and their update_gap scaled to
 *     the run (optim_update_gap), since the defaults (rank 128/256, gap
 *     200) are sized for LLaMA-scale matrices and thousands of steps.
 */
#include "compare.h"

static const char *const names[OPT_COUNT] = {
    "SGD-momentum", "Adam", "AdamW", "AdamW-8bit", "Lion", "Lion-8bit",
    "GaLore", "GaLore-8bit", "APOLLO", "APOLLO-Mini",
};

const char *optim_name(optim_id id) { return id < OPT_COUNT ? names[id] : "?"; }

int optim_twin(optim_id id) {
    switch (id) {
    case OPT_ADAMW8: return OPT_ADAMW;
    case OPT_LION8: return OPT_LION;
    case OPT_GALORE8: return OPT_GALORE;
    default: return -1;
    }
}

/* Adam's usual 1e-3 (2e-3 for the small GPT); SGD with momentum 0.9 about
 * 50x that; Lion 3x smaller than Adam (Chen et al.: 3-10x); GaLore and
 * APOLLO 3x larger (their papers train with 10x AdamW's rate: GaLore's
 * scale 0.25 and APOLLO's gradient scaling shrink each update). */
double optim_center_lr(optim_id id, task_kind kind) {
    double adam = kind == TASK_CNN ? 1e-3 : 2e-3;
    switch (id) {
    case OPT_SGD: return kind == TASK_CNN ? 0.05 : 0.1;
    case OPT_LION:
    case OPT_LION8: return adam / 3;
    case OPT_GALORE:
    case OPT_GALORE8:
    case OPT_APOLLO:
    case OPT_APOLLO_MINI: return adam * 3;
    default: return adam;
    }
}

/* Refresh the projections about 5 times a run, between every 20 and 200
 * steps (galore_torch's and apollo_torch's default is 200). */
int optim_update_gap(int64_t steps) {
    int64_t g = steps / 5;
    return (int)(g < 20 ? 20 : g > 200 ? 200 : g);
}

kiln_optim *optim_make(kiln_ctx *ctx, optim_id id, double lr, const task *t, int64_t steps) {
    float flr = (float)lr;
    kiln_adam_config adam = kiln_adam_defaults(), adamw = kiln_adamw_defaults();
    adam.lr = adamw.lr = flr;
    kiln_lion_config lion = kiln_lion_defaults();
    lion.lr = flr;
    lion.weight_decay = 0.1f;
    switch (id) {
    case OPT_SGD: return kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = flr, .momentum = 0.9f});
    case OPT_ADAM: return kiln_adam_new(ctx, &adam);
    case OPT_ADAMW: return kiln_adamw_new(ctx, &adamw);
    case OPT_ADAMW8: return kiln_adamw8bit_new(ctx, &adamw);
    case OPT_LION: return kiln_lion_new(ctx, &lion);
    case OPT_LION8: return kiln_lion8bit_new(ctx, &lion);
    case OPT_GALORE:
    case OPT_GALORE8: {
        kiln_galore_config g = id == OPT_GALORE ? kiln_galore_defaults() : kiln_galore8bit_defaults();
        g.adamw.lr = flr;
        g.adamw.weight_decay = 0.01f;
        g.rank = t->rank;
        g.update_gap = optim_update_gap(steps);
        return id == OPT_GALORE ? kiln_galore_adamw_new(ctx, &g) : kiln_galore_adamw8bit_new(ctx, &g);
    }
    case OPT_APOLLO:
    case OPT_APOLLO_MINI: {
        kiln_apollo_config a = id == OPT_APOLLO ? kiln_apollo_defaults() : kiln_apollo_mini_defaults();
        a.adamw.lr = flr;
        a.adamw.weight_decay = 0.01f;
        if (id == OPT_APOLLO) a.rank = t->rank; /* APOLLO-Mini stays rank 1 */
        a.update_gap = optim_update_gap(steps);
        return kiln_apollo_new(ctx, &a);
    }
    default: return NULL;
    }
}
