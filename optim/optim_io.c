/* optim_io.c — an optimizer's state to and from a safetensors file
 * (kiln_optim_save/load), alone or with the context's parameters
 * (kiln_checkpoint_save/load).
 *
 * Tensors: every state leaf of opt->state as "state.<parameter index>.
 * <suffix>" (optim_impl.h). Metadata ("kiln.*" strings): the optimizer's
 * kind, its parameters' names, and the counters and settings a step reads
 * besides the state: the step count (Adam's bias correction, GaLore's
 * refresh, APOLLO's projector seeds and refreshes, SGD's first step all
 * derive from it), the base lr, the schedule, the clipping norm, the
 * skipped steps and the last gradient norm. Floats are written as "%a" so
 * they come back bit for bit. A load checks all of it and every tensor
 * before it writes anything. */
#include "optim_impl.h"
#include "safetensors.h"

#include <errno.h>
#include <stdio.h>

#define FORMAT "kiln optimizer state 1"

/* Tensors and metadata of one save, all malloc'd. */
typedef struct io_list {
    kiln_tensor **t;
    char **names;
    int n, cap;
    char **meta; /* key, value, key, value, ... */
    int n_meta, cap_meta;
    bool oom;
} io_list;

static char *dup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *dup_printf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    if (vasprintf(&s, fmt, ap) < 0) s = NULL;
    va_end(ap);
    return s;
}

static void add_tensor(io_list *l, kiln_tensor *t, char *name) {
    if (!name || l->oom) goto fail;
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        kiln_tensor **t2 = kiln__realloc(l->t, (size_t)cap * sizeof *t2);
        if (t2) l->t = t2;
        char **n2 = kiln__realloc(l->names, (size_t)cap * sizeof *n2);
        if (n2) l->names = n2;
        if (!t2 || !n2) goto fail;
        l->cap = cap;
    }
    l->t[l->n] = t;
    l->names[l->n++] = name;
    return;
fail:
    free(name);
    l->oom = true;
}

static void add_meta(io_list *l, const char *key, char *value) {
    char *k = kiln__strdup(key);
    if (!k || !value || l->oom) goto fail;
    if (l->n_meta == l->cap_meta) {
        int cap = l->cap_meta ? 2 * l->cap_meta : 16;
        char **m2 = kiln__realloc(l->meta, (size_t)cap * 2 * sizeof *m2);
        if (!m2) goto fail;
        l->meta = m2;
        l->cap_meta = cap;
    }
    l->meta[2 * l->n_meta] = k;
    l->meta[2 * l->n_meta + 1] = value;
    l->n_meta++;
    return;
fail:
    free(k);
    free(value);
    l->oom = true;
}

static void free_list(io_list *l) {
    for (int i = 0; i < l->n; i++) free(l->names[i]);
    for (int i = 0; i < 2 * l->n_meta; i++) free(l->meta[i]);
    free(l->t);
    free(l->names);
    free(l->meta);
}

static int param_index(const kiln_optim *opt, const kiln_tensor *p) {
    for (int i = 0; i < opt->n_params; i++)
        if (opt->params[i] == p) return i;
    return -1;
}

static char *state_name(const kiln_optim *opt, const kiln__optim_state_entry *e) {
    return dup_printf("state.%d.%s", param_index(opt, e->param), e->suffix);
}

static void list_optim(const kiln_optim *opt, io_list *l) {
    for (const kiln__optim_state_entry *e = opt->state; e; e = e->next) add_tensor(l, e->t, state_name(opt, e));
    add_meta(l, "kiln.format", kiln__strdup(FORMAT));
    add_meta(l, "kiln.optimizer", kiln__strdup(opt->impl->name));
    add_meta(l, "kiln.n_params", dup_printf("%d", opt->n_params));
    for (int i = 0; i < opt->n_params; i++) {
        char key[32];
        snprintf(key, sizeof key, "kiln.param.%d", i);
        add_meta(l, key, kiln__strdup(opt->params[i]->name));
    }
    add_meta(l, "kiln.steps", dup_printf("%lld", (long long)opt->steps));
    add_meta(l, "kiln.skipped_steps", dup_printf("%lld", (long long)opt->skipped_steps));
    add_meta(l, "kiln.lr", dup_printf("%a", (double)opt->lr));
    add_meta(l, "kiln.last_grad_norm", dup_printf("%a", (double)opt->last_grad_norm));
    add_meta(l, "kiln.clip_max_norm", dup_printf("%a", (double)opt->clip_max_norm));
    const kiln_schedule *sc = &opt->sched;
    add_meta(l, "kiln.schedule", dup_printf("%d %lld %lld %a", (int)sc->kind, (long long)sc->warmup_steps,
                                            (long long)sc->total_steps, (double)sc->min_lr_ratio));
}

static kiln_status save(const kiln_optim *opt, const char *path, bool with_params, const char *who) {
    if (!opt || !path) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    io_list l = {0};
    for (int i = 0; with_params && i < kiln__n_saved(opt->ctx); i++) {
        kiln_tensor *t = kiln__saved_at(opt->ctx, i);
        add_tensor(&l, t, kiln__strdup(t->name));
    }
    list_optim(opt, &l);
    kiln_status s = l.oom ? kiln__errs(KILN_ERR_OOM, "%s: out of memory", who)
                          : kiln__safetensors_save(path, l.t, (const char *const *)l.names, l.n,
                                                   (const char *const *)l.meta, l.n_meta, who);
    free_list(&l);
    return s;
}

kiln_status kiln_optim_save(const kiln_optim *opt, const char *path) { return save(opt, path, false, "kiln_optim_save"); }
kiln_status kiln_checkpoint_save(const kiln_optim *opt, const char *path) {
    return save(opt, path, true, "kiln_checkpoint_save");
}

/* ---- loading ---- */

/* What the metadata says, parsed and checked, before anything is set. */
typedef struct saved {
    int64_t steps, skipped;
    float lr, last_norm, clip;
    kiln_schedule sched;
} saved;

static kiln_status meta_get(const kiln_safetensors *st, const char *path, const char *key, const char **out,
                            const char *who) {
    if (!(*out = kiln_safetensors_metadata(st, key)))
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s has no metadata '%s' (not an optimizer state file?)", who, path, key);
    return KILN_OK;
}

static kiln_status meta_i64(const kiln_safetensors *st, const char *path, const char *key, int64_t *out,
                            const char *who) {
    const char *v;
    kiln_status s = meta_get(st, path, key, &v, who);
    if (s) return s;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (errno || end == v || *end || x < 0)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: metadata '%s' = \"%s\" is not a count", who, path, key, v);
    *out = x;
    return KILN_OK;
}

static kiln_status meta_float(const kiln_safetensors *st, const char *path, const char *key, float *out,
                              const char *who) {
    const char *v;
    kiln_status s = meta_get(st, path, key, &v, who);
    if (s) return s;
    char *end;
    double x = strtod(v, &end);
    if (end == v || *end)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: metadata '%s' = \"%s\" is not a number", who, path, key, v);
    *out = (float)x; /* written from a float: exact */
    return KILN_OK;
}

static kiln_status check_meta(const kiln_optim *opt, const kiln_safetensors *st, const char *path, saved *sv,
                              const char *who) {
    const char *v;
    kiln_status s;
    if ((s = meta_get(st, path, "kiln.format", &v, who))) return s;
    if (strcmp(v, FORMAT))
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s is \"%s\", not \"%s\"", who, path, v, FORMAT);
    if ((s = meta_get(st, path, "kiln.optimizer", &v, who))) return s;
    if (strcmp(v, opt->impl->name))
        return kiln__errs(KILN_ERR_ARG, "%s: %s holds the state of a %s optimizer, not of this %s", who, path, v,
                          opt->impl->name);
    int64_t n;
    if ((s = meta_i64(st, path, "kiln.n_params", &n, who))) return s;
    if (n != opt->n_params)
        return kiln__errs(KILN_ERR_ARG, "%s: %s holds the state of %lld parameters, this optimizer has %d", who, path,
                          (long long)n, opt->n_params);
    for (int i = 0; i < opt->n_params; i++) {
        char key[32];
        snprintf(key, sizeof key, "kiln.param.%d", i);
        if ((s = meta_get(st, path, key, &v, who))) return s;
        if (strcmp(v, opt->params[i]->name))
            return kiln__errs(KILN_ERR_ARG, "%s: %s: parameter %d is '%s' there and '%s' here", who, path, i, v,
                              opt->params[i]->name);
    }
    if ((s = meta_i64(st, path, "kiln.steps", &sv->steps, who)) ||
        (s = meta_i64(st, path, "kiln.skipped_steps", &sv->skipped, who)) ||
        (s = meta_float(st, path, "kiln.lr", &sv->lr, who)) ||
        (s = meta_float(st, path, "kiln.last_grad_norm", &sv->last_norm, who)) ||
        (s = meta_float(st, path, "kiln.clip_max_norm", &sv->clip, who)) ||
        (s = meta_get(st, path, "kiln.schedule", &v, who)))
        return s;
    int kind, used = 0;
    long long w, t;
    double r;
    if (sscanf(v, "%d %lld %lld %la%n", &kind, &w, &t, &r, &used) != 4 || v[used])
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: metadata 'kiln.schedule' = \"%s\" is not a schedule", who, path, v);
    sv->sched = (kiln_schedule){.kind = (kiln_schedule_kind)kind, .warmup_steps = w, .total_steps = t,
                                .min_lr_ratio = (float)r};
    /* what the setters (and kiln_optim_step, for the counts) accept, and nothing else */
    char at[5][400];
    const char *keys[5] = {"kiln.steps", "kiln.skipped_steps", "kiln.lr", "kiln.clip_max_norm", "kiln.schedule"};
    for (int k = 0; k < 5; k++) snprintf(at[k], sizeof at[k], "%s: %s: metadata '%s'", who, path, keys[k]);
    if ((s = kiln__optim_check_steps(sv->steps, KILN_ERR_FORMAT, at[0])) ||
        (s = kiln__optim_check_steps(sv->skipped, KILN_ERR_FORMAT, at[1])) ||
        (s = kiln__optim_check_lr(sv->lr, KILN_ERR_FORMAT, at[2])) ||
        (s = kiln__optim_check_clip(sv->clip, KILN_ERR_FORMAT, at[3])))
        return s;
    return kiln__schedule_check(&sv->sched, KILN_ERR_FORMAT, at[4]);
}

static kiln_status load(kiln_optim *opt, const char *path, bool with_params, const char *who) {
    if (!opt || !path) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    kiln_safetensors *st = kiln__safetensors_open(path, who);
    if (!st) return kiln_last_status();
    saved sv;
    kiln_status s = check_meta(opt, st, path, &sv, who);
    int expect = with_params ? kiln__n_saved(opt->ctx) : 0;
    for (const kiln__optim_state_entry *e = opt->state; e && !s; e = e->next, expect++) {
        char *name = state_name(opt, e);
        s = name ? kiln__st_check(st, name, e->t, who, "the optimizer")
                 : kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
        free(name);
    }
    if (!s && with_params) s = kiln__params_check(st, opt->ctx, who);
    /* every expected name was found and names in a file are unique: equal
     * counts mean nothing else is there */
    if (!s && kiln_safetensors_count(st) != expect)
        s = kiln__errs(KILN_ERR_FORMAT, "%s: %s holds %d tensors where %d were expected (%s)", who, path,
                       kiln_safetensors_count(st), expect,
                       with_params ? "the parameters, buffers and the optimizer's state" : "the optimizer's state");
    /* all checked: now write */
    if (!s && with_params) s = kiln__params_read(st, opt->ctx);
    for (const kiln__optim_state_entry *e = opt->state; e && !s; e = e->next) {
        char *name = state_name(opt, e);
        s = name ? kiln__st_read(st, name, e->t) : kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
        free(name);
    }
    if (!s) {
        opt->steps = sv.steps;
        opt->skipped_steps = sv.skipped;
        opt->lr = sv.lr;
        opt->last_grad_norm = sv.last_norm;
        opt->clip_max_norm = sv.clip;
        opt->sched = sv.sched;
    }
    kiln_safetensors_close(st);
    return s;
}

kiln_status kiln_optim_load(kiln_optim *opt, const char *path) { return load(opt, path, false, "kiln_optim_load"); }
kiln_status kiln_checkpoint_load(kiln_optim *opt, const char *path) {
    return load(opt, path, true, "kiln_checkpoint_load");
}
