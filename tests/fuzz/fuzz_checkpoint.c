/* fuzz_checkpoint.c — checkpoint and optimizer-state loading on the
 * bytes: kiln_load_params, kiln_optim_load and kiln_checkpoint_load into a
 * small linear model with an Adam optimizer that has taken one step (so
 * its state tensors exist). The same model writes the seed files
 * (make_seeds.c), so the corpus starts from files these loaders accept. */
#include "fuzz_util.h"

/* A linear layer w [4, 3], b [4] fit by mse with Adam, one step taken;
 * NULL on failure. Kept for the whole run: loads change only values. */
kiln_optim *kiln_fuzz_checkpoint_model(kiln_ctx **ctx_out) {
    static kiln_optim *opt;
    static kiln_ctx *keep;
    *ctx_out = keep;
    if (opt) return opt;
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return NULL;
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){4, 3});
    kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){4});
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3), *y = kiln_new_2d(ctx, KILN_F32, 2, 4);
    kiln_tensor *loss = w && b && x && y ? kiln_mse(ctx, kiln_linear(ctx, x, w, b), y) : NULL;
    kiln_graph *g = loss ? kiln_graph_new(ctx) : NULL;
    kiln_optim *o = NULL;
    if (!g || kiln_tensor_fill_uniform(w, 1, -1, 1) || kiln_tensor_fill_uniform(x, 2, -1, 1) ||
        kiln_tensor_fill_uniform(y, 3, -1, 1) || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss) ||
        !(o = kiln_adam_new(ctx, NULL)) || kiln_graph_compute(g) || kiln_optim_step(o)) {
        kiln_ctx_free(ctx); /* owns g and o */
        return NULL;
    }
    *ctx_out = keep = ctx;
    return opt = o;
}

kiln_status kiln_fuzz_checkpoint(const uint8_t *data, size_t size) {
    kiln_ctx *ctx;
    kiln_optim *opt = kiln_fuzz_checkpoint_model(&ctx);
    const char *path = kiln_fuzz_file(0, data, size);
    if (!opt || !path) return KILN_ERR_IO;
    kiln_status s = kiln_checkpoint_load(opt, path);
    kiln_optim_load(opt, path);
    kiln_load_params(ctx, path);
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_checkpoint)
