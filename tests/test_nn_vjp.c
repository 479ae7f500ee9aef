/* test_nn_vjp.c — nn backward rules called through kiln__vjp, as the
 * backward driver calls them. The rules are built from ops, so their
 * gradients can be differentiated again: each second-order case makes the
 * gradient of an nn op a function of the op's input and of the upstream
 * gradient, and gradient-checks it. Also: an upstream gradient that no
 * finite loss produces (nonzero at masked -inf outputs), which passes. */
#include "internal.h"
#include "test_nn_util.h"

typedef enum { SO_SOFTMAX, SO_LOG_SOFTMAX, SO_CROSS_ENTROPY, SO_LAYER_NORM, SO_RMS_NORM, SO_ROPE, SO_ATTENTION } so_op;

/* in[0] = x (q for attention), then the op's other inputs, then gy last. */
static kiln_tensor *build_second_order(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    so_op op = *(const so_op *)arg;
    kiln_tensor *y = NULL, *gy = NULL;
    switch (op) {
    case SO_SOFTMAX: y = kiln_softmax(ctx, in[0], true), gy = in[1]; break;
    case SO_LOG_SOFTMAX: y = kiln_log_softmax(ctx, in[0], true), gy = in[1]; break;
    case SO_CROSS_ENTROPY: y = kiln_cross_entropy(ctx, in[0], in[1], -100), gy = in[2]; break;
    case SO_LAYER_NORM: y = kiln_layer_norm(ctx, in[0], in[1], in[2], 1e-5), gy = in[3]; break;
    case SO_RMS_NORM: y = kiln_rms_norm(ctx, in[0], in[1], 1e-5), gy = in[2]; break;
    case SO_ROPE: y = kiln_rope(ctx, in[0], in[1], 100.0, KILN_ROPE_INTERLEAVED), gy = in[2]; break;
    case SO_ATTENTION: y = kiln_attention(ctx, in[0], in[1], in[2], true, 0), gy = in[3]; break;
    }
    kiln_tensor *g = NULL;
    if (!y || kiln__vjp(ctx, y, gy, 1, &in[0], &g)) return NULL;
    return g;
}

KT_TEST(nn_second_order_grad) {
    static const int32_t labels[4] = {2, -100, 0, 3}, pos[3] = {5, 1, 2};
    so_op ops[] = {SO_SOFTMAX, SO_LOG_SOFTMAX, SO_CROSS_ENTROPY, SO_LAYER_NORM, SO_RMS_NORM, SO_ROPE, SO_ATTENTION};
    gc_input label_in = GC_IN(1, 4), pos_in = GC_IN(1, 3);
    label_in.is_index = true, label_in.ivalues = labels;
    pos_in.is_index = true, pos_in.ivalues = pos;
    const struct {
        int n;
        gc_input in[4];
        const char *what;
    } cases[] = {
        {2, {GC_IN(3, 2, 3, 4), GC_IN(3, 2, 3, 4)}, "softmax (causal)"},
        {2, {GC_IN(3, 2, 3, 4), GC_IN(3, 2, 3, 4)}, "log_softmax (causal)"},
        {3, {GC_IN(2, 4, 5), label_in, GC_IN(1, 1)}, "cross_entropy"},
        {4, {GC_IN(2, 3, 5), GC_IN(1, 5), GC_IN(1, 5), GC_IN(2, 3, 5)}, "layer_norm"},
        {3, {GC_IN(2, 3, 5), GC_IN(1, 5), GC_IN(2, 3, 5)}, "rms_norm"},
        {3, {GC_IN(3, 2, 3, 4), pos_in, GC_IN(3, 2, 3, 4)}, "rope"},
        {4, {GC_IN(4, 1, 2, 3, 4), GC_IN(4, 1, 1, 4, 4), GC_IN(4, 1, 1, 4, 3), GC_IN(4, 1, 2, 3, 3)}, "attention"},
    };
    for (int i = 0; i < 7; i++) {
        char what[64];
        snprintf(what, sizeof what, "gradient of %s", cases[i].what);
        gc_check(what, build_second_order, &ops[i], cases[i].n, cases[i].in, (uint64_t)(71 + i));
    }
}

/* As torch's log_softmax at an input of -inf (the masked_fill'ed input):
 * gy nonzero at the -inf outputs passes through there and counts in the
 * row's sum, dx = gy - p * sum(gy). */
KT_TEST(nn_log_softmax_masked_grad_keeps_gy) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F64, 3, 4), *gy = kiln_new_2d(ctx, KILN_F64, 3, 4);
    KT_OK(kiln_tensor_fill_uniform(x, 5, -2, 2));
    KT_OK(kiln_tensor_fill_uniform(gy, 6, 0.5, 1.5));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    kiln_tensor *y = kiln_log_softmax(ctx, x, true), *p = kiln_softmax(ctx, x, true), *gx = NULL;
    KT_NOTNULL(y);
    KT_OK(kiln__vjp(ctx, y, gy, 1, &x, &gx));
    KT_NOTNULL(gx);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, gx));
    KT_OK(kiln_graph_add(g, p));
    KT_OK(kiln_graph_compute(g));
    const double *vg = kiln_tensor_data(gy), *vp = kiln_tensor_data(p);
    double got[12], want[12];
    KT_OK(kiln_tensor_get_f64(gx, got, 12));
    for (int i = 0; i < 3; i++) {
        double s = 0;
        for (int j = 0; j < 4; j++) s += vg[i * 4 + j];
        for (int j = 0; j < 4; j++) want[i * 4 + j] = j <= i + 1 ? vg[i * 4 + j] - vp[i * 4 + j] * s : vg[i * 4 + j];
    }
    nnt_close("causal log_softmax gradient", got, want, 12, 1e-12, 1e-12);
    kiln_ctx_free(ctx);
}
