/* checkpoint.c — a context's parameters and buffers to and from a
 * safetensors file, each under its name (kiln_save_params,
 * kiln_load_params). A load checks every one against the file before it
 * writes any, so a file that does not fit leaves the model as it was. */
#include "safetensors.h"

kiln_status kiln__params_check(const kiln_safetensors *st, kiln_ctx *ctx, const char *who) {
    for (int i = 0; i < kiln__n_saved(ctx); i++) {
        kiln_tensor *t = kiln__saved_at(ctx, i);
        kiln_status s = kiln__st_check(st, t->name, t, who, "the model");
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln__params_read(const kiln_safetensors *st, kiln_ctx *ctx) {
    for (int i = 0; i < kiln__n_saved(ctx); i++) {
        kiln_tensor *t = kiln__saved_at(ctx, i);
        kiln_status s = kiln__st_read(st, t->name, t);
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln_save_params(kiln_ctx *ctx, const char *path) {
    const char *who = "kiln_save_params";
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "%s: ctx is NULL", who);
    int n = kiln__n_saved(ctx);
    if (n < 1) return kiln__errs(KILN_ERR_ARG, "%s: the context has no parameters", who);
    kiln_tensor **list = kiln__malloc((size_t)n * sizeof *list);
    if (!list) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    for (int i = 0; i < n; i++) list[i] = kiln__saved_at(ctx, i);
    kiln_status s = kiln__safetensors_save(path, list, NULL, n, NULL, 0, who);
    free(list);
    return s;
}

kiln_status kiln_load_params(kiln_ctx *ctx, const char *path) {
    const char *who = "kiln_load_params";
    if (!ctx || !path) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    kiln_safetensors *st = kiln__safetensors_open(path, who);
    if (!st) return kiln_last_status();
    kiln_status s = kiln__params_check(st, ctx, who);
    /* every name of the file must be a parameter or buffer: a file of another model fails */
    kiln_safetensors_info in;
    for (int i = 0; !s && i < kiln_safetensors_count(st); i++) {
        kiln_safetensors_info_at(st, i, &in);
        bool known = false;
        for (int j = 0; j < kiln__n_saved(ctx) && !known; j++) known = !strcmp(in.name, kiln__saved_at(ctx, j)->name);
        if (!known)
            s = kiln__errs(KILN_ERR_FORMAT, "%s: %s holds '%s', which is no parameter or buffer of the context", who,
                           path, in.name);
    }
    if (!s) s = kiln__params_read(st, ctx);
    kiln_safetensors_close(st);
    return s;
}
