/* test_pool_layout.c — the max-pool that reads a plane-permuted x in place
 * (a convolution's [O, N, OH, OW] product seen as [N, O, OH, OW], ops/conv.c
 * ip[11] = 1): the same values and gradients, bit for bit, as the pool of a
 * row-major copy; the copy kiln_conv2d would make is skipped; gradient
 * checks of both orders through the permuted path. And the 2x2 pool's SIMD
 * planes (conv_avx512.c) against the portable loops, bit for bit. */
#include "../backends/cpu/cpu_features.h"
#include "gradcheck.h"
#include "internal.h" /* the node's op and source, kiln__vjp */

#include <stdint.h>
#include <string.h>

static const int SWAP01[4] = {1, 0, 2, 3};

typedef struct pool_case {
    int k, stride, pad;
    int64_t c, n, h, w; /* storage [C, N, H, W] */
    bool copy;          /* through kiln_contiguous (the copy the pool skips) */
} pool_case;

static float urand(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(*s >> 40) / (double)(1ull << 24)) * 2.0f - 1.0f;
}

/* Pool of permute(a) against pool of b = the same values row-major: y and
 * the gradient of <y, gy> (ties included: values on a coarse grid). */
KT_TEST(pool_cn_matches_row_major) {
    const pool_case cases[] = {
        {2, 2, 0, 3, 4, 6, 8, true},  /* the CNN's 2x2 pool, windows tile the image */
        {2, 2, 0, 2, 3, 5, 7, false}, /* odd size: an edge no window reaches */
        {3, 2, 1, 2, 3, 7, 6, true},  /* padded windows */
        {3, 1, 0, 3, 2, 5, 6, false}, /* overlapping windows */
    };
    for (int i = 0; i < 4; i++) {
        const pool_case *pc = &cases[i];
        kiln_ctx *ctx = kiln_ctx_new();
        int64_t c = pc->c, n = pc->n, h = pc->h, w = pc->w, numel = c * n * h * w;
        kiln_tensor *a = kiln_new_4d(ctx, KILN_F32, c, n, h, w), *b = kiln_new_4d(ctx, KILN_F32, n, c, h, w);
        KT_REQUIRE(a && b, "tensors");
        float *av = kiln_tensor_data(a), *bv = kiln_tensor_data(b);
        uint64_t seed = 7 + (uint64_t)i;
        for (int64_t j = 0; j < numel; j++) av[j] = (float)(int)(urand(&seed) * 4) / 4; /* ties */
        for (int64_t ci = 0; ci < c; ci++)
            for (int64_t ni = 0; ni < n; ni++)
                memcpy(bv + (ni * c + ci) * h * w, av + (ci * n + ni) * h * w, (size_t)(h * w) * sizeof *av);
        KT_OK(kiln_tensor_set_requires_grad(a, true));
        KT_OK(kiln_tensor_set_requires_grad(b, true));
        kiln_tensor *xa = kiln_permute(ctx, a, SWAP01);
        if (pc->copy) xa = kiln_contiguous(ctx, xa);
        kiln_tensor *ya = kiln_max_pool2d(ctx, xa, pc->k, pc->k, pc->stride, pc->pad);
        kiln_tensor *yb = kiln_max_pool2d(ctx, b, pc->k, pc->k, pc->stride, pc->pad);
        KT_REQUIRE(ya && yb, "pool: %s", kiln_last_error());
        KT_CHECK(ya->src[0]->op == KILN_OP_PERMUTE && ya->ip[11] == 1, "case %d: the pool reads a copy", i);
        kiln_tensor *gy = kiln_tensor_new(ctx, KILN_F32, 4, kiln_tensor_shape(yb)), *ga = NULL, *gb = NULL;
        KT_REQUIRE(gy, "gy");
        float *gv = kiln_tensor_data(gy);
        for (int64_t j = 0; j < kiln_tensor_numel(gy); j++) gv[j] = urand(&seed);
        KT_OK(kiln__vjp(ctx, ya, gy, 1, &a, &ga));
        KT_OK(kiln__vjp(ctx, yb, gy, 1, &b, &gb));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, ya));
        KT_OK(kiln_graph_add(g, yb));
        KT_OK(kiln_graph_add(g, ga));
        KT_OK(kiln_graph_add(g, gb));
        KT_OK(kiln_graph_compute(g));
        int64_t ny = kiln_tensor_numel(yb);
        float *y1 = malloc((size_t)ny * 4), *y2 = malloc((size_t)ny * 4), *g1 = malloc((size_t)numel * 4),
              *g2 = malloc((size_t)numel * 4);
        KT_REQUIRE(y1 && y2 && g1 && g2, "out of memory");
        KT_OK(kiln_tensor_get_f32(ya, y1, ny));
        KT_OK(kiln_tensor_get_f32(yb, y2, ny));
        KT_OK(kiln_tensor_get_f32(ga, g1, numel)); /* [C, N, H, W] */
        KT_OK(kiln_tensor_get_f32(gb, g2, numel)); /* [N, C, H, W] */
        KT_CHECK(!memcmp(y1, y2, (size_t)ny * 4), "case %d: pooled values differ", i);
        int64_t bad = 0;
        for (int64_t ci = 0; ci < c; ci++)
            for (int64_t ni = 0; ni < n; ni++)
                bad += memcmp(g1 + (ci * n + ni) * h * w, g2 + (ni * c + ci) * h * w, (size_t)(h * w) * 4) != 0;
        KT_CHECK(bad == 0, "case %d: %lld planes of the gradient differ", i, (long long)bad);
        free(y1), free(y2), free(g1), free(g2);
        kiln_ctx_free(ctx);
    }
}

/* A conv2d without bias feeding the pool: its permuting copy never runs
 * (the pool reads the product), and the result equals conv2d's own. */
KT_TEST(pool_cn_after_conv2d_skips_the_copy) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 3, 2, 6, 6), *w = kiln_new_4d(ctx, KILN_F32, 4, 2, 3, 3);
    KT_REQUIRE(x && w, "tensors");
    KT_OK(kiln_tensor_fill_randn(x, 1, 0.0, 1.0));
    KT_OK(kiln_tensor_fill_randn(w, 2, 0.0, 1.0));
    kiln_conv2d_params same = {.padding = {1, 1}};
    kiln_tensor *h = kiln_conv2d(ctx, x, w, NULL, &same);
    KT_REQUIRE(h && h->op == KILN_OP_CONTIGUOUS, "conv2d: %s", kiln_last_error());
    kiln_tensor *y = kiln_max_pool2d(ctx, h, 2, 2, 0, 0);
    KT_REQUIRE(y && y->src[0] == h->src[0] && y->ip[11] == 1, "the pool reads conv2d's copy");
    kiln_tensor *ref = kiln_max_pool2d(ctx, kiln_add(ctx, h, kiln_scalar(ctx, KILN_F32, 0.0)), 2, 2, 0, 0);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_add(g, ref));
    KT_OK(kiln_graph_compute(g));
    float a[108], b[108]; /* [3, 4, 3, 3] */
    KT_OK(kiln_tensor_get_f32(y, a, 108));
    KT_OK(kiln_tensor_get_f32(ref, b, 108));
    KT_CHECK(!memcmp(a, b, sizeof a), "pool of the product in place differs from the pool of its copy");
    kiln_ctx_free(ctx);
}

static kiln_tensor *build_pool(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    const pool_case *pc = arg;
    kiln_tensor *x = kiln_permute(ctx, in[0], SWAP01);
    if (pc->copy) x = kiln_contiguous(ctx, x);
    return kiln_max_pool2d(ctx, x, pc->k, pc->k, pc->stride, pc->pad);
}

/* d<pool(x), gy>/dx through the permuted path, differentiated again. */
static kiln_tensor *build_pool_grad(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
    kiln_tensor *y = build_pool(ctx, in, arg), *gx = NULL;
    if (!y || kiln__vjp(ctx, y, in[1], 1, &in[0], &gx)) return NULL;
    return gx;
}

KT_TEST(pool_cn_grad) {
    const pool_case cases[] = {{.k = 2, .stride = 2, .copy = true}, {.k = 3, .stride = 2, .pad = 1}, {.k = 3, .stride = 1, .copy = true}};
    for (int i = 0; i < 3; i++) {
        char what[64];
        snprintf(what, sizeof what, "max_pool2d of a permuted x, case %d", i);
        gc_input in[2] = {GC_IN(4, 3, 2, 5, 6), GC_IN(4, 2, 3, 0, 0)};
        gc_check(what, build_pool, (void *)&cases[i], 1, in, 40 + (uint64_t)i);
        const pool_case *pc = &cases[i];
        in[1].shape[2] = (5 + 2 * pc->pad - pc->k) / pc->stride + 1;
        in[1].shape[3] = (6 + 2 * pc->pad - pc->k) / pc->stride + 1;
        snprintf(what, sizeof what, "max_pool2d backward of a permuted x, case %d", i);
        gc_check(what, build_pool_grad, (void *)&cases[i], 2, in, 50 + (uint64_t)i);
    }
}

/* y = pool(x) and gx for gy, at the SIMD level in force. */
static void pool_2x2_run(const float *xv, const float *gv, int64_t p, int64_t h, int64_t w, float *y, float *gx) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 1, p, h, w), *gxt = NULL;
    KT_REQUIRE(x, "x");
    memcpy(kiln_tensor_data(x), xv, (size_t)(p * h * w) * sizeof *xv);
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    kiln_tensor *yt = kiln_max_pool2d(ctx, x, 2, 2, 0, 0);
    kiln_tensor *gy = kiln_tensor_new(ctx, KILN_F32, 4, kiln_tensor_shape(yt));
    KT_REQUIRE(gy, "gy");
    memcpy(kiln_tensor_data(gy), gv, (size_t)kiln_tensor_numel(gy) * sizeof *gv);
    KT_OK(kiln__vjp(ctx, yt, gy, 1, &x, &gxt));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, yt));
    KT_OK(kiln_graph_add(g, gxt));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(yt, y, kiln_tensor_numel(yt)));
    KT_OK(kiln_tensor_get_f32(gxt, gx, p * h * w));
    kiln_ctx_free(ctx);
}

/* Widths across the 16-window blocks and their tails, odd sizes, ties,
 * NaNs: the best SIMD level and the scalar loops give the same bytes. */
KT_TEST(pool_2x2_simd_matches_scalar) {
    kiln_cpu_caps saved = *kiln__cpu_caps(), scalar = *kiln__cpu_caps_detected();
    kiln__cpu_caps_limit(&scalar, KILN_SIMD_SCALAR);
    const int64_t p = 3, hs[] = {2, 5, 6};
    uint64_t seed = 99;
    for (int hi = 0; hi < 3; hi++)
        for (int64_t w = 2; w <= 37; w++) {
            int64_t h = hs[hi], n = p * h * w, ny = p * (h / 2) * (w / 2);
            float *xv = malloc((size_t)n * 4), *gv = malloc((size_t)ny * 4), *out[2][2];
            KT_REQUIRE(xv && gv, "out of memory");
            for (int64_t j = 0; j < n; j++) xv[j] = (float)(int)(urand(&seed) * 3) / 2; /* ties */
            if (w % 5 == 0) xv[(w * 7) % n] = NAN;
            for (int64_t j = 0; j < ny; j++) gv[j] = urand(&seed);
            for (int v = 0; v < 2; v++) {
                out[v][0] = malloc((size_t)ny * 4), out[v][1] = malloc((size_t)n * 4);
                KT_REQUIRE(out[v][0] && out[v][1], "out of memory");
                kiln__cpu_caps_set(v ? &saved : &scalar);
                pool_2x2_run(xv, gv, p, h, w, out[v][0], out[v][1]);
            }
            kiln__cpu_caps_set(&saved);
            KT_CHECK(!memcmp(out[0][0], out[1][0], (size_t)ny * 4), "%lldx%lld: pooled values differ", (long long)h,
                     (long long)w);
            KT_CHECK(!memcmp(out[0][1], out[1][1], (size_t)n * 4), "%lldx%lld: gradients differ", (long long)h,
                     (long long)w);
            for (int v = 0; v < 2; v++) free(out[v][0]), free(out[v][1]);
            free(xv), free(gv);
        }
}
