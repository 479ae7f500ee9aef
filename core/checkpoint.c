/* checkpoint.c — a context's parameters to and from a safetensors file,
 * each under its name (kiln_save_params, kiln_load_params). A load checks
 * every parameter against the file before it writes any, so a file that
 * does not fit leaves the model as it was. */
#include "safetensors.h"

kiln_status kiln__params_check(const kiln_safetensors *st, kiln_ctx *ctx, const char *who) {
    for (int i = 0; i < ctx->n_params; i++) {
        kiln_status s = kiln__st_check(st, ctx->params[i]->name, ctx->params[i], who, "the model");
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln__params_read(const kiln_safetensors *st, kiln_ctx *ctx) {
    for (int i = 0; i < ctx->n_params; i++) {
        kiln_status s = kiln__st_read(st, ctx->params[i]->name, ctx->params[i]);
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status kiln_save_params(kiln_ctx *ctx, const char *path) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_save_params: ctx is NULL");
    if (ctx->n_params < 1) return kiln__errs(KILN_ERR_ARG, "kiln_save_params: the context has no parameters");
    return kiln__safetensors_save(path, ctx->params, NULL, ctx->n_params, NULL, 0, "kiln_save_params");
}

kiln_status kiln_load_params(kiln_ctx *ctx, const char *path) {
    const char *who = "kiln_load_params";
    if (!ctx || !path) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    kiln_safetensors *st = kiln__safetensors_open(path, who);
    if (!st) return kiln_last_status();
    kiln_status s = kiln__params_check(st, ctx, who);
    /* every name of the file must be a parameter: a file of another model fails */
    kiln_safetensors_info in;
    for (int i = 0; !s && i < kiln_safetensors_count(st); i++) {
        kiln_safetensors_info_at(st, i, &in);
        bool known = false;
        for (int j = 0; j < ctx->n_params && !known; j++) known = !strcmp(in.name, ctx->params[j]->name);
        if (!known) s = kiln__errs(KILN_ERR_FORMAT, "%s: %s holds '%s', which is no parameter of the context", who, path, in.name);
    }
    if (!s) s = kiln__params_read(st, ctx);
    kiln_safetensors_close(st);
    return s;
}
