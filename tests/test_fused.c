/* test_fused.c — element-wise chains run as one tiled pass
 * (core/fuse.c, backends/cpu/fused.c) give the values of running each node
 * alone ($KILN_FUSE=0), with same-shape, scalar and broadcast-row operands,
 * rows longer than a tile, several threads, and inputs whose storage the
 * planner could hand to the chain's result; and weight gradients added
 * straight into the gradient (KILN_FUSE_ACC) give those of a separate add. */
#include "test_mov_util.h"

#include "../backends/cpu/gemm_kernels.h" /* kiln__cpu_caches_set */
#include "../core/graph.h"
#include "kt_simd.h"

#include <stdlib.h>

/* Build the test graph in a fresh context, compute it with fusion on or
 * off; *fused gets the number of chain nodes other than the last and out the
 * result's values. */
static void run(bool fuse, int64_t rows, int64_t cols, double *out, int *fused) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t shape[2] = {rows, cols};
    kiln_tensor *at = mt_leaf(ctx, KILN_F32, 2, (int64_t[]){cols, rows}, 1), *b = mt_leaf(ctx, KILN_F32, 2, shape, 2);
    kiln_tensor *bias = mt_leaf(ctx, KILN_F32, 1, &cols, 3);
    /* u and v are planned intermediates (copies of a transpose, sigmoid)
     * whose last reader is inside the chain */
    kiln_tensor *u = kiln_contiguous(ctx, kiln_transpose(ctx, at, 0, 1));
    kiln_tensor *v = kiln_sigmoid(ctx, kiln_contiguous(ctx, b));
    kiln_tensor *h = kiln_mul(ctx, kiln_tanh(ctx, kiln_add(ctx, u, bias)), v); /* ROW, FULL */
    h = kiln_gelu(ctx, kiln_add_scalar(ctx, kiln_scale(ctx, h, 0.5), 0.25));
    h = kiln_div(ctx, kiln_sub(ctx, h, v), kiln_add_scalar(ctx, kiln_abs(ctx, bias), 1.0));
    kiln_tensor *loss = kiln_sum(ctx, h, -1, false); /* h is planned, not an output */
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f64(loss, out, rows));
    *fused = 0;
    for (int i = 0; i < g->n; i++) *fused += g->chain_end[i] != i;
    kiln_ctx_free(ctx);
}

KT_TEST(fused_chains_match_unfused) {
    const int64_t sizes[][2] = {{3, 5}, {37, 129}, {300, 7}, {2, 9000}};
    int threads[] = {1, 2};
    for (int t = 0; t < 2; t++) {
        kiln_set_threads(threads[t]);
        for (int s = 0; s < 4; s++) {
            int64_t r = sizes[s][0], c = sizes[s][1];
            double *f = malloc((size_t)r * sizeof *f), *u = malloc((size_t)r * sizeof *u);
            int nf, nu;
            run(true, r, c, f, &nf);
            run(false, r, c, u, &nu);
            /* add, tanh, mul, scale, add_scalar, gelu, sub: one chain of 7, 6 of them never written */
            KT_CHECK(nf >= 6 && nu == 0, "%lldx%lld: %d nodes fused (KILN_FUSE=0: %d)", (long long)r, (long long)c, nf, nu);
            for (int64_t i = 0; i < r; i++)
                KT_CHECK(fabs(f[i] - u[i]) <= 1e-5 * (1 + fabs(u[i])), "%lldx%lld threads %d row %lld: %.9g vs %.9g",
                         (long long)r, (long long)c, threads[t], (long long)i, f[i], u[i]);
            free(f);
            free(u);
        }
    }
}

/* Weight gradients of a linear layer computed twice without zeroing (so
 * they must accumulate), fused or not, in f32, f64 and f32 with the bf16
 * matmul precision, its 9 input rows as [9, 13] or [3, 3, 13]; *acc gets
 * the number of matmuls that added straight into a gradient, *sums the
 * number of sum nodes (the bias gradient's). */
static void run_linear(bool fuse, kiln_dtype dt, bool batched, double *gw, int *acc, int *sums) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = batched ? mt_leaf(ctx, dt, 3, (int64_t[]){3, 3, 13}, 1) : mt_leaf(ctx, dt, 2, (int64_t[]){9, 13}, 1);
    kiln_tensor *w = kiln_param(ctx, "w", dt, 2, (int64_t[]){5, 13});
    kiln_tensor *b = kiln_param(ctx, "b", dt, 1, (int64_t[]){5});
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 0.5));
    KT_OK(kiln_tensor_fill(b, 0.1));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_tanh(ctx, kiln_linear(ctx, x, w, b)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gw, 65));
    *acc = *sums = 0;
    for (int i = 0; i < g->n; i++) *acc += g->acc_node[i] >= 0, *sums += g->nodes[i]->op == KILN_OP_SUM;
    kiln_ctx_free(ctx);
}

KT_TEST(fused_matmul_adds_into_gradient) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F64, KILN_F32};
    for (int c = 0; c < 3; c++) {
        KT_OK(kiln_set_matmul_precision(c == 2 ? KILN_MATMUL_BF16 : KILN_MATMUL_F32));
        double f[65], u[65], bf[65];
        int nf, nu, nb, sf, su, sb;
        run_linear(true, dts[c], false, f, &nf, &sf);
        run_linear(false, dts[c], false, u, &nu, &su);
        /* a batched input: still one 2-D product into the gradient, and as many sums (one for the bias) */
        run_linear(true, dts[c], true, bf, &nb, &sb);
        KT_CHECK(nf == 1 && nu == 0, "case %d: %d matmuls add into a gradient (KILN_FUSE=0: %d)", c, nf, nu);
        KT_CHECK(nb == 1 && sb == sf, "case %d, batched input: %d matmuls add into a gradient, %d sums (2-D: %d)", c, nb,
                 sb, sf);
        for (int i = 0; i < 65; i++) {
            KT_CHECK(fabs(f[i] - u[i]) <= 1e-5 * (1 + fabs(u[i])), "case %d: dw[%d] %.9g vs %.9g", c, i, f[i], u[i]);
            KT_CHECK(fabs(bf[i] - u[i]) <= 1e-5 * (1 + fabs(u[i])), "case %d batched: dw[%d] %.9g vs %.9g", c, i, bf[i],
                     u[i]);
        }
    }
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
}

/* A convolution's weight gradient computed twice without zeroing, fused
 * or not: x [4, 16, hw, hw], w [16, 16, 3, 3], padding 1, stride s (1:
 * Winograd in f32, its sums in 2 parts of the tiles under tiny caches;
 * 2: the tiled path, as f64 is; at 2048 output pixels or more the tiled
 * path's sums in parts of the pixels); *acc gets the number of products
 * added straight into a gradient. */
static void run_conv(bool fuse, kiln_dtype dt, int64_t s, int64_t hw, int threads, double *gw, int *acc) {
    setenv("KILN_FUSE", fuse ? "1" : "0", 1);
    KT_OK(kiln_set_threads(threads));
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = mt_leaf(ctx, dt, 4, (int64_t[]){4, 16, hw, hw}, 1);
    kiln_tensor *w = kiln_param(ctx, "w", dt, 4, (int64_t[]){16, 16, 3, 3});
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 0.2));
    kiln_conv2d_params p = {.stride = {s, s}, .padding = {1, 1}};
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_tanh(ctx, kiln_conv2d(ctx, x, w, NULL, &p)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gw, 16 * 16 * 9));
    *acc = 0;
    for (int i = 0; i < g->n; i++) *acc += g->acc_node[i] >= 0 && g->nodes[i]->op == KILN_OP_CONV2D_GRAD_W;
    kiln_ctx_free(ctx);
    KT_OK(kiln_set_threads(0));
}

KT_TEST(fused_conv_grad_w_adds_into_gradient) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    enum { NW = 16 * 16 * 9 };
    const struct {
        kiln_dtype dt;
        int64_t stride, hw;
    } cases[] = {{KILN_F32, 1, 20}, {KILN_F32, 2, 20}, {KILN_F64, 1, 20}, {KILN_F32, 2, 48}, {KILN_F64, 1, 24}};
    KT_FOR_EACH_SIMD(v) {
        for (int c = 0; c < 5; c++)
            for (int threads = 1; threads <= 2; threads++) {
                static double f[NW], u[NW];
                int nf, nu;
                run_conv(true, cases[c].dt, cases[c].stride, cases[c].hw, threads, f, &nf);
                run_conv(false, cases[c].dt, cases[c].stride, cases[c].hw, threads, u, &nu);
                KT_CHECK(nf == 1 && nu == 0, "case %d, %d threads: %d products add into a gradient (KILN_FUSE=0: %d)",
                         c, threads, nf, nu);
                double big = 0;
                for (int i = 0; i < NW; i++) big = fmax(big, fabs(u[i]));
                for (int i = 0; i < NW; i++)
                    KT_CHECK(fabs(f[i] - u[i]) <= 1e-5 * big, "case %d, %d threads: dw[%d] %.9g vs %.9g", c, threads,
                             i, f[i], u[i]);
            }
    }
    unsetenv("KILN_FUSE");
    kiln__cpu_caches_set(NULL);
}
