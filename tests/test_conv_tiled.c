/* test_conv_tiled.c — kiln_conv2d's tiled host node (ops/conv_tiled.c,
 * backends/cpu/conv_tiled.c): its output and both gradients against the
 * im2col decomposition ($KILN_CONV_TILED=0) over several tiles, at 1 and
 * 2 threads; its second derivatives; and that a training graph no longer
 * keeps the layer's columns. */
#include "../backends/cpu/gemm_kernels.h" /* kiln__cpu_caches_set */
#include "gradcheck.h"
#include "internal.h" /* kiln__vjp */
#include "test_nn_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct tiled_case {
    int64_t n, c, h, w, o, kh, kw;
    kiln_conv2d_params p;
} tiled_case;

/* y, gx and gw of sum(conv2d(x, w) * r), as doubles, each malloc'd. */
typedef struct conv_run {
    double *y, *gx, *gw;
    int64_t ny, nx, nw;
} conv_run;

static void run_conv(const tiled_case *tc, kiln_dtype dt, bool tiled, int threads, conv_run *r) {
    setenv("KILN_CONV_TILED", tiled ? "1" : "0", 1);
    double *out[3];
    int64_t num[3];
    nnt_conv_grads(dt, (int64_t[]){tc->n, tc->c, tc->h, tc->w}, (int64_t[]){tc->o, tc->c, tc->kh, tc->kw}, &tc->p,
                   threads, out, num);
    unsetenv("KILN_CONV_TILED");
    r->y = out[0], r->gx = out[1], r->gw = out[2];
    r->ny = num[0], r->nx = num[1], r->nw = num[2];
}

static void run_free(conv_run *r) { free(r->y), free(r->gx), free(r->gw); }

static void compare(const char *what, const conv_run *a, const conv_run *b, double tol) {
    char buf[128];
    snprintf(buf, sizeof buf, "%s y", what);
    nnt_close(buf, a->y, b->y, a->ny, tol, tol);
    snprintf(buf, sizeof buf, "%s gx", what);
    nnt_close(buf, a->gx, b->gx, a->nx, tol, tol);
    snprintf(buf, sizeof buf, "%s gw", what);
    nnt_close(buf, a->gw, b->gw, a->nw, tol, tol);
}

/* Shapes of two tiles under tiny caches (a tile then holds 256 pixels),
 * cut mid-row and mid-image, with stride, padding and dilation; the last
 * four big enough (a million multiply-adds) for 2 threads, which must give
 * 1 thread's bits; the last two with 2048 pixels or more, whose weight
 * gradient sums parts of the pixels apart (2 and 4 parts, tiles cut
 * mid-row, a short last tile in each part). */
static const tiled_case CASES[] = {
    {3, 5, 13, 11, 6, 3, 3, {.padding = {1, 1}}},
    {2, 4, 17, 19, 3, 3, 2, {.stride = {2, 1}, .padding = {2, 0}, .dilation = {1, 2}}},
    {5, 3, 9, 9, 4, 1, 1, {.groups = 1}},
    {2, 7, 24, 20, 5, 5, 3, {.stride = {1, 3}, .padding = {0, 2}}},
    {2, 16, 12, 12, 8, 3, 3, {.padding = {1, 1}}},
    {2, 32, 16, 16, 16, 3, 3, {.padding = {1, 1}}},
    {3, 40, 11, 13, 33, 3, 3, {.padding = {1, 1}}}, /* grad w's tiles deeper than the GEMM's kc, 128 */
    {2, 8, 32, 32, 16, 3, 3, {.padding = {1, 1}}},
    {3, 6, 80, 37, 8, 3, 3, {.stride = {2, 1}, .padding = {1, 1}}},
};

KT_TEST(conv_tiled_matches_decomposition) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    for (size_t i = 0; i < sizeof CASES / sizeof *CASES; i++)
        for (int d = 0; d < 2; d++) {
            kiln_dtype dt = d ? KILN_F64 : KILN_F32;
            conv_run ref = {0}, one = {0}, two = {0};
            run_conv(&CASES[i], dt, false, 1, &ref);
            run_conv(&CASES[i], dt, true, 1, &one);
            run_conv(&CASES[i], dt, true, 2, &two);
            char what[64];
            snprintf(what, sizeof what, "case %zu %s", i, kiln_dtype_name(dt));
            compare(what, &one, &ref, dt == KILN_F64 ? 1e-12 : 2e-5);
            snprintf(what, sizeof what, "case %zu %s 2 threads against 1", i, kiln_dtype_name(dt));
            compare(what, &two, &one, 0);
            run_free(&ref), run_free(&one), run_free(&two);
        }
    kiln__cpu_caches_set(NULL);
}

/* Grad w's and grad x's threads on different tiles at once, the last one
 * shorter (7 tiles, the last of 64 pixels): each thread's rows of the
 * columns once started at k0 times the tile's length, and a thread on the
 * last tile wrote over another's rows of a full tile (found one run in a
 * few). Repeated, since it takes the threads' timing. */
KT_TEST(conv_tiled_grads_short_tile_threads) {
    const kiln__cpu_caches tiny = {4 << 10, 16 << 10, 64 << 10};
    kiln__cpu_caches_set(&tiny);
    const tiled_case tc = {4, 16, 20, 20, 16, 3, 3, {.padding = {1, 1}}};
    conv_run one = {0};
    run_conv(&tc, KILN_F64, true, 1, &one);
    for (int rep = 0; rep < 100; rep++) {
        conv_run two = {0};
        run_conv(&tc, KILN_F64, true, 2, &two);
        KT_CHECK(nnt_close("2 threads' gw against 1 thread's", two.gw, one.gw, one.nw, 0, 0), "repetition %d", rep);
        KT_CHECK(nnt_close("2 threads' gx against 1 thread's", two.gx, one.gx, one.nx, 0, 0), "repetition %d", rep);
        run_free(&two);
    }
    run_free(&one);
    kiln__cpu_caches_set(NULL);
}

/* What the tiled layer's graph plans against the columns it no longer
 * keeps: a layer of 32 channels, 3x3, batch 8 at 16x16 has 2.4 MB of
 * columns, x, y, their gradients and w together 1.1 MB (the whole-batch
 * decomposition planned 3.4 MB). */
KT_TEST(conv_tiled_keeps_no_columns) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t n = 8, c = 32, hw = 16;
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, n, c, hw, hw), *w = kiln_new_4d(ctx, KILN_F32, c, c, 3, 3);
    KT_NOTNULL(x && w);
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    KT_OK(kiln_tensor_set_requires_grad(w, true));
    kiln_conv2d_params p = {.padding = {1, 1}};
    kiln_tensor *y = kiln_conv2d(ctx, x, w, NULL, &p);
    int64_t ny = n * c * hw * hw;
    kiln_tensor *loss = kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, y, y), 1, &ny), 0, false);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_NOTNULL(loss && g);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    size_t cols = (size_t)(c * 9 * n * hw * hw) * 4, planned = kiln_graph_planned_bytes(g);
    KT_CHECK(planned < cols, "planned %zu bytes, the columns alone are %zu", planned, cols);
    KT_OK(kiln_graph_compute(g));
    kiln_ctx_free(ctx);
}

/* The gradients' own gradients (a gradient penalty's), against finite
 * differences: in[2] is the upstream gradient. */
static kiln_tensor *build_grad(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const tiled_case *tc = arg;
    kiln_tensor *y = kiln_conv2d(ctx, in[0], in[1], NULL, &tc->p), *g[2] = {NULL, NULL};
    if (!y || kiln__vjp(ctx, y, in[2], 2, in, g)) return NULL;
    int64_t nx = kiln_tensor_numel(g[0]), nw = kiln_tensor_numel(g[1]);
    return kiln_concat(ctx, (kiln_tensor *[]){kiln_reshape(ctx, g[0], 1, &nx), kiln_reshape(ctx, g[1], 1, &nw)}, 2, 0);
}

KT_TEST(conv_tiled_second_order) {
    tiled_case tc = {.p = {.stride = {2, 1}, .padding = {1, 1}, .dilation = {1, 2}}};
    gc_input in[3] = {GC_IN(4, 2, 3, 6, 7), GC_IN(4, 2, 3, 3, 2), GC_IN(4, 2, 2, 3, 7)};
    gc_check("conv2d gradients", build_grad, &tc, 3, in, 7);
}
