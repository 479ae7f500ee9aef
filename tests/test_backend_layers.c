/* test_backend_layers.c — the vision and audio layers on every device
 * backend against the CPU (harness: backend_ops_util.h): batch_norm in
 * training mode (a kernel of each backend) and in eval mode, group_norm,
 * conv1d, adaptive average pooling and upsampling (compositions of ops
 * the backends run), forward and backward; and batch norm's running
 * statistics, which a training compute updates in place wherever it runs
 * and an eval graph then reads. */
#include "backend_ops_util.h"

#define CTX (io->ctx)
#define F32 KILN_F32
#define F64 KILN_F64

typedef struct bn_arg {
    bool training, affine, running;
    int ndim;
} bn_arg;
static const bn_arg BN_TRAIN = {true, true, true, 4}, BN_TRAIN_PLAIN = {true, false, false, 4},
                    BN_TRAIN_2D = {true, true, true, 2}, BN_EVAL = {false, true, true, 4};

static kiln_tensor *b_batch_norm(bo_io *io) {
    const bn_arg *a = io->arg;
    kiln_tensor *x = a->ndim == 4 ? bo_in_range(io, -2, 3, BO_SHAPE(3, 5, 4, 7)) : bo_in_range(io, -2, 3, BO_SHAPE(9, 5));
    kiln_tensor *w = a->affine ? bo_in_range(io, 0.5, 1.5, BO_SHAPE(5)) : NULL, *b = a->affine ? bo_in(io, BO_SHAPE(5)) : NULL;
    kiln_tensor *rm = a->running ? bo_const(io, io->dt, -1, 1, BO_SHAPE(5)) : NULL;
    kiln_tensor *rv = a->running ? bo_const(io, io->dt, 0.5, 2, BO_SHAPE(5)) : NULL;
    return kiln_batch_norm(CTX, x, rm, rv, w, b, a->training, 0.1, 1e-5);
}

/* a training norm and the ReLU that alone reads it: the CPU runs them as
 * one fused step (KILN_FUSE_NORM_RELU), the devices as two nodes */
static kiln_tensor *b_batch_norm_relu(bo_io *io) { return kiln_relu(CTX, b_batch_norm(io)); }

static kiln_tensor *b_group_norm(bo_io *io) {
    return kiln_group_norm(CTX, bo_in_range(io, -2, 3, BO_SHAPE(2, 6, 3, 5)), 3, bo_in(io, BO_SHAPE(6)),
                           bo_in(io, BO_SHAPE(6)), 1e-5);
}

static kiln_tensor *b_conv1d(bo_io *io) {
    kiln_conv1d_params p = {.causal = true, .dilation = 2, .groups = 2};
    return kiln_conv1d(CTX, bo_in(io, BO_SHAPE(2, 4, 13)), bo_in(io, BO_SHAPE(6, 2, 3)), bo_in(io, BO_SHAPE(6)), &p);
}

static kiln_tensor *b_adaptive_pool(bo_io *io) { return kiln_adaptive_avg_pool2d(CTX, bo_in(io, BO_SHAPE(2, 3, 7, 9)), 3, 4); }
static kiln_tensor *b_global_pool(bo_io *io) { return kiln_adaptive_avg_pool2d(CTX, bo_in(io, BO_SHAPE(2, 3, 7, 9)), 1, 1); }

static const kiln_upsample_params UP_NEAREST = {.scale = {2, 2}},
                                  UP_BILINEAR = {.size = {9, 7}, .mode = KILN_UPSAMPLE_BILINEAR, .align_corners = true};
static kiln_tensor *b_upsample(bo_io *io) { return kiln_upsample(CTX, bo_in(io, BO_SHAPE(2, 3, 4, 5)), io->arg); }

static const bo_case layer_cases[] = {
    {"batch_norm_train", b_batch_norm, F32, BO_TRANS, 0, &BN_TRAIN},
    {"batch_norm_train_plain", b_batch_norm, F32, BO_TRANS, 0, &BN_TRAIN_PLAIN},
    {"batch_norm_train_2d", b_batch_norm, F32, BO_TRANS, 0, &BN_TRAIN_2D},
    {"batch_norm_eval", b_batch_norm, F32, BO_TRANS, 0, &BN_EVAL},
    {"batch_norm_relu", b_batch_norm_relu, F32, BO_TRANS, 0, &BN_TRAIN},
    {"group_norm", b_group_norm, F32, BO_TRANS, 0, NULL},
    {"conv1d_causal_grouped", b_conv1d, F32, BO_TRANS, 0, NULL},
    {"adaptive_avg_pool2d", b_adaptive_pool, F32, BO_TRANS, 0, NULL},
    {"adaptive_avg_pool2d_global", b_global_pool, F32, BO_TRANS, 0, NULL},
    {"upsample_nearest", b_upsample, F32, BO_TRANS, 0, &UP_NEAREST},
    {"upsample_bilinear", b_upsample, F32, BO_TRANS, 0, &UP_BILINEAR},
    {"batch_norm_train", b_batch_norm, F64, BO_TRANS, BO_MAY_FALL_BACK, &BN_TRAIN},
};
KT_TEST(backend_ops_layers) { bo_run_cases("layers", layer_cases, BO_COUNT(layer_cases)); }

/* Three training steps of a batch-norm layer in a context on dev (or the
 * CPU), each followed by an eval graph over the running statistics; the
 * values read back (loss, running statistics, eval output) must be the
 * CPU's. With split the training graph runs on the CPU and the eval graph
 * on dev: the CPU kernel's writes to the running statistics must make the
 * device's copies stale (the executor's writes_src books). (Vulkan also
 * declines f64, which then runs on the CPU throughout.) */
static int bn_scenario(kiln_backend *dev, bool split, kiln_dtype dt, double *out, int cap) {
    int n = 0;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_tensor_new(ctx, dt, 4, (int64_t[]){3, 4, 1, 5});
    kiln_tensor *w = kiln_param(ctx, "bn.weight", dt, 1, (int64_t[]){4}), *b = kiln_param(ctx, "bn.bias", dt, 1, (int64_t[]){4});
    kiln_tensor *rm = kiln_buffer(ctx, "bn.running_mean", dt, 1, (int64_t[]){4});
    kiln_tensor *rv = kiln_buffer(ctx, "bn.running_var", dt, 1, (int64_t[]){4});
    if (!rv || kiln_ctx_set_backend(ctx, dev) || kiln_tensor_fill(w, 1.0) || kiln_tensor_fill(rv, 1.0)) goto fail;
    kiln_tensor *y = kiln_batch_norm(ctx, x, rm, rv, w, b, true, 0.1, 1e-5);
    kiln_tensor *loss = kiln_mean_all(ctx, kiln_mul(ctx, y, kiln_add_scalar(ctx, x, 0.5)));
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor *ye = kiln_batch_norm(ctx, x, rm, rv, w, b, false, 0.1, 1e-5);
    kiln_graph *ge = kiln_graph_new(ctx);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.5f});
    if (!opt || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss) || kiln_graph_add(ge, ye)) goto fail;
    if (split && kiln_graph_set_backend(g, NULL)) goto fail;
    double v[64];
    for (int step = 0; step < 3; step++) {
        if (kiln_tensor_fill_uniform(x, 10 + (uint64_t)step, -1 + step, 2) || kiln_graph_compute(g)) goto fail;
        out[n++] = kiln_tensor_item(loss);
        if (kiln_tensor_get_f64(rm, v, 4) || kiln_tensor_get_f64(rv, v + 4, 4) || kiln_optim_step(opt)) goto fail;
        for (int i = 0; i < 8 && n < cap; i++) out[n++] = v[i];
        if (kiln_graph_compute(ge) || kiln_tensor_get_f64(ye, v, 60)) goto fail;
        for (int i = 0; i < 60 && n < cap; i++) out[n++] = v[i];
    }
    kiln_ctx_free(ctx);
    return n;
fail:
    kt_fail(__FILE__, __LINE__, "batch norm scenario on %s: %s", dev ? kiln_backend_name(dev) : "cpu", kiln_last_error());
    kiln_ctx_free(ctx);
    return -1;
}

KT_TEST(backend_batch_norm_running_stats) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int d = 0; d < 3; d++) {
        kiln_dtype dt = d == 1 ? KILN_F64 : KILN_F32;
        double ref[256], got[256];
        int nr = bn_scenario(NULL, false, dt, ref, 256);
        for (int i = 0; i < nb && nr > 0; i++) {
            int ng = bn_scenario(bs[i], d == 2, dt, got, 256);
            double e = ng == nr ? bo_error_values(got, ref, nr) : INFINITY;
            KT_CHECK(e <= BO_TRANS, "%s %s%s: the values differ from the CPU's (error %.3g)", kiln_backend_name(bs[i]),
                     kiln_dtype_name(dt), d == 2 ? ", training on the CPU" : "", e);
        }
    }
}
