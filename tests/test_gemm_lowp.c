/* test_gemm_lowp.c — the bf16/f16 GEMM (backends/cpu/gemm_lowp.c): every
 * path the machine has (AMX tiles, AVX512-BF16, the portable path with
 * AVX2 converters and fully scalar) against a double reference computed
 * from the already-rounded operands, so only the f32 accumulation order
 * (and the final rounding to bf16/f16) may differ; odd sizes, all
 * transposes, strided operands, 1 and 2 threads. Then end to end:
 * kiln_matmul on bf16/f16 tensors, and bf16 mixed-precision training
 * (kiln_set_matmul_precision) against f32. */
#include "kt.h"

#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/gemm.h"
#include "../backends/cpu/gemm_kernels.h" /* kiln__cpu_caches_set */
#include "../backends/cpu/scratch.h"

#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *name;
    kiln_cpu_caps caps;
    bool packed; /* bf16 operands packed for AMX / vdpbf16ps */
} lowp_path;

/* The paths this machine can run, best first. */
static int lowp_paths(lowp_path *out) {
    const kiln_cpu_caps *d = kiln__cpu_caps_detected();
    int n = 0;
    if (d->amx_bf16) out[n++] = (lowp_path){"amx", *d, true};
    if (d->avx512bf16) {
        out[n] = (lowp_path){"avx512bf16", *d, true};
        out[n].caps.amx_tile = out[n].caps.amx_bf16 = out[n].caps.amx_int8 = false;
        n++;
    }
    if (d->avx2 && d->f16c) {
        out[n] = (lowp_path){"avx2-convert", *d, false};
        kiln__cpu_caps_limit(&out[n++].caps, KILN_SIMD_AVX2);
    }
    out[n] = (lowp_path){"scalar", *d, false};
    kiln__cpu_caps_limit(&out[n++].caps, KILN_SIMD_SCALAR);
    return n;
}

static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* A rows x cols operand with row stride ld in dtype dt (uniform in [-2, 2],
 * some exact small integers), and its values as the GEMM sees them. */
static void *make_operand(kiln_dtype dt, int64_t rows, int64_t cols, int64_t ld, uint64_t seed, double *seen) {
    size_t es = kiln_dtype_size(dt);
    char *x = malloc((size_t)(rows * ld) * es + 1);
    uint64_t s = seed;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < ld; j++) {
            float v = (float)((double)lcg(&s) / (double)(1ull << 31) * 4.0 - 2.0);
            if (lcg(&s) % 7 == 0) v = (float)(int)(v * 3);
            if (j >= cols) v = 1e30f; /* padding: must never be read into the product */
            void *p = x + (size_t)(i * ld + j) * es;
            double got;
            if (dt == KILN_BF16) {
                uint16_t h = kiln__f32_to_bf16(v);
                memcpy(p, &h, 2);
                got = kiln__bf16_to_f32(h);
            } else if (dt == KILN_F16) {
                uint16_t h = kiln__f32_to_f16(v);
                memcpy(p, &h, 2);
                got = kiln__f16_to_f32(h);
            } else {
                memcpy(p, &v, 4);
                got = kiln__bf16_to_f32(kiln__f32_to_bf16(v)); /* f32 operands are rounded to bf16 */
            }
            if (j < cols) seen[i * cols + j] = got;
        }
    return x;
}

static double c_value(kiln_dtype dt, const void *c, int64_t i) {
    if (dt == KILN_F32) return ((const float *)c)[i];
    uint16_t h = ((const uint16_t *)c)[i];
    return dt == KILN_BF16 ? kiln__bf16_to_f32(h) : kiln__f16_to_f32(h);
}

typedef struct {
    int64_t m, n, k;
} mnk;

/* Run one GEMM on the path in force and compare with the reference; returns
 * the result (caller frees) so runs can be compared bit for bit. */
static void *run_one(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, mnk s, const void *a, int64_t lda,
                     const void *b, int64_t ldb, const double *ref, const double *mag, int nt, const char *path) {
    int64_t ldc = s.n + 3;
    size_t es = kiln_dtype_size(c_dt);
    char *c = malloc((size_t)(s.m * ldc) * es);
    memset(c, 0x5a, (size_t)(s.m * ldc) * es);
    kiln_status st = kiln__gemm_lowp(in_dt, c_dt, ta, tb, s.m, s.n, s.k, a, lda, b, ldb, c, ldc, nt);
    KT_CHECK(st == KILN_OK, "%s: status %s: %s", path, kiln_status_name(st), kiln_last_error());
    /* f32 accumulation: error within a few ulps of sum |a||b| per element */
    double acc_tol = 4e-7 * (double)(s.k + 4), out_tol = c_dt == KILN_F32 ? 0 : c_dt == KILN_BF16 ? 1.0 / 256 : 1.0 / 2048;
    int bad = 0;
    for (int64_t i = 0; i < s.m && bad < 3; i++) {
        for (int64_t j = 0; j < s.n && bad < 3; j++) {
            double got = c_value(c_dt, c, i * ldc + j), want = ref[i * s.n + j];
            double tol = acc_tol * mag[i * s.n + j] + out_tol * fabs(want) + 1e-30;
            if (!(fabs(got - want) <= tol)) {
                kt_fail(__FILE__, __LINE__, "%s %s->%s ta %d tb %d %lldx%lldx%lld nt %d: C[%lld,%lld] = %.9g, want %.9g",
                        path, kiln_dtype_name(in_dt), kiln_dtype_name(c_dt), ta, tb, (long long)s.m, (long long)s.n,
                        (long long)s.k, nt, (long long)i, (long long)j, got, want);
                bad++;
            }
        }
        /* the padding of each C row is left alone */
        for (int64_t j = s.n; j < ldc && bad < 3; j++) {
            unsigned char *p = (unsigned char *)c + (size_t)(i * ldc + j) * es;
            for (size_t q = 0; q < es; q++)
                if (p[q] != 0x5a) {
                    kt_fail(__FILE__, __LINE__, "%s: wrote past column n in row %lld", path, (long long)i);
                    bad++;
                    break;
                }
        }
    }
    return c;
}

static void check_sizes(kiln_dtype in_dt, const mnk *sizes, int nsizes) {
    lowp_path paths[4];
    int np = lowp_paths(paths);
    kiln_cpu_caps saved = *kiln__cpu_caps();
    for (int si = 0; si < nsizes; si++) {
        mnk s = sizes[si];
        for (int tr = 0; tr < 4; tr++) {
            bool ta = tr & 1, tb = tr & 2;
            int64_t ar = ta ? s.k : s.m, ac = ta ? s.m : s.k, br = tb ? s.n : s.k, bc = tb ? s.k : s.n;
            int64_t lda = ac + (si & 1 ? 5 : 0), ldb = bc + (si & 2 ? 3 : 0);
            double *av = malloc((size_t)(ar * ac + 1) * sizeof(double)), *bv = malloc((size_t)(br * bc + 1) * sizeof(double));
            double *ref = malloc((size_t)(s.m * s.n) * sizeof(double)), *mag = malloc((size_t)(s.m * s.n) * sizeof(double));
            void *a = make_operand(in_dt, ar, ac, lda, 11 + (uint64_t)si, av);
            void *b = make_operand(in_dt, br, bc, ldb, 97 + (uint64_t)tr, bv);
            for (int64_t i = 0; i < s.m; i++)
                for (int64_t j = 0; j < s.n; j++) {
                    double r = 0, g = 0;
                    for (int64_t p = 0; p < s.k; p++) {
                        double x = ta ? av[p * ac + i] : av[i * ac + p], y = tb ? bv[j * bc + p] : bv[p * bc + j];
                        r += x * y;
                        g += fabs(x * y);
                    }
                    ref[i * s.n + j] = r;
                    mag[i * s.n + j] = g;
                }
            for (int pi = 0; pi < np; pi++) {
                kiln__cpu_caps_set(&paths[pi].caps);
                static const kiln_dtype outs[3] = {KILN_F32, KILN_BF16, KILN_F16};
                for (int oi = 0; oi < 3; oi++) {
                    kiln_dtype c_dt = outs[oi];
                    void *c1 = run_one(in_dt, c_dt, ta, tb, s, a, lda, b, ldb, ref, mag, 1, paths[pi].name);
                    void *c2 = run_one(in_dt, c_dt, ta, tb, s, a, lda, b, ldb, ref, mag, 2, paths[pi].name);
                    /* the packed kernels give each block to one thread: same bits on any thread count */
                    if (paths[pi].packed && in_dt != KILN_F16)
                        KT_CHECK(!memcmp(c1, c2, (size_t)(s.m * (s.n + 3)) * kiln_dtype_size(c_dt)),
                                 "%s: 1 and 2 threads differ (%lldx%lldx%lld)", paths[pi].name, (long long)s.m,
                                 (long long)s.n, (long long)s.k);
                    free(c1);
                    free(c2);
                }
            }
            kiln__cpu_caps_set(&saved);
            free(a), free(b), free(av), free(bv), free(ref), free(mag);
        }
    }
}

static const mnk odd_sizes[] = {{1, 1, 1},     {15, 17, 33},  {17, 15, 1},   {33, 100, 17}, {100, 33, 257},
                                {257, 1, 100}, {1, 257, 15},  {64, 96, 64},  {33, 257, 100}, {2, 3, 4}};
#define NODD ((int)(sizeof odd_sizes / sizeof odd_sizes[0]))

KT_TEST(gemm_lowp_bf16_every_path) { check_sizes(KILN_BF16, odd_sizes, NODD); }
KT_TEST(gemm_lowp_f32_rounded_every_path) { check_sizes(KILN_F32, odd_sizes, NODD); }
KT_TEST(gemm_lowp_f16_every_path) { check_sizes(KILN_F16, odd_sizes, NODD); }
/* big enough (over 2^25 padded multiply-adds) that the packed paths use both threads */
KT_TEST(gemm_lowp_two_threads_share_blocks) { check_sizes(KILN_BF16, (mnk[]){{300, 330, 341}}, 1); }

/* vdpbf16ps's k blocks (as deep as the L2 reported allows) resume each
 * element's sum from C: the bits of one block, whatever the caches */
KT_TEST(gemm_lowp_k_blocks_keep_bits) {
    const kiln_cpu_caps *d = kiln__cpu_caps_detected();
    if (!d->avx512bf16) kt_skip("no AVX512-BF16");
    lowp_path paths[4];
    lowp_paths(paths);
    kiln_cpu_caps saved = *kiln__cpu_caps();
    kiln__cpu_caps_set(&paths[d->amx_bf16 ? 1 : 0].caps);
    mnk s = {37, 70, 1500};
    double *seen = malloc((size_t)(s.k * (s.m + s.n)) * sizeof(double));
    float *a = make_operand(KILN_F32, s.m, s.k, s.k, 5, seen), *b = make_operand(KILN_F32, s.k, s.n, s.n, 6, seen);
    float *c[2] = {malloc((size_t)(s.m * s.n) * sizeof(float)), malloc((size_t)(s.m * s.n) * sizeof(float))};
    const kiln__cpu_caches caches[2] = {{32 << 10, 1 << 30, 0}, {32 << 10, 64 << 10, 0}}; /* one k block; six */
    for (int i = 0; i < 2; i++) {
        kiln__cpu_caches_set(&caches[i]);
        KT_OK(kiln__gemm_lowp(KILN_F32, KILN_F32, false, false, s.m, s.n, s.k, a, s.k, b, s.n, c[i], s.n, 2));
    }
    kiln__cpu_caches_set(NULL);
    kiln__cpu_caps_set(&saved);
    KT_CHECK(!memcmp(c[0], c[1], (size_t)(s.m * s.n) * sizeof(float)), "k blocks changed the bits");
    free(seen), free(a), free(b), free(c[0]), free(c[1]);
}

/* A 4096^2 product packs 64 MiB, beyond the scratch kept between calls:
 * fresh memory in 2 MiB pages (a 2 MiB boundary), not 16384 faults */
KT_TEST(gemm_lowp_big_packs_in_2mib_pages) {
    bool owned;
    char *p = kiln__scratch_get((size_t)40 << 20, &owned);
    KT_REQUIRE(p, "out of memory");
    KT_CHECK(owned, "a 40 MiB scratch kept");
    KT_CHECK((uintptr_t)p % ((uintptr_t)2 << 20) == 0, "a 40 MiB scratch at %p, not on a 2 MiB boundary", (void *)p);
    memset(p, 1, (size_t)40 << 20);
    free(p);
}

KT_TEST(gemm_lowp_edges_and_errors) {
    /* k = 0 writes zeros; m = 0 or n = 0 writes nothing */
    float c[6] = {1, 2, 3, 4, 5, 6};
    uint16_t one = kiln__f32_to_bf16(1.0f);
    KT_OK(kiln__gemm_lowp(KILN_BF16, KILN_F32, false, false, 2, 3, 0, &one, 1, &one, 3, c, 3, 2));
    for (int i = 0; i < 6; i++) KT_CHECK(c[i] == 0, "c[%d] = %g", i, c[i]);
    c[0] = 7;
    KT_OK(kiln__gemm_lowp(KILN_BF16, KILN_F32, false, false, 0, 3, 4, &one, 4, &one, 3, c, 3, 2));
    KT_CHECK(c[0] == 7, "m = 0 wrote C");
    KT_CHECK(kiln__gemm_lowp(KILN_I32, KILN_F32, false, false, 1, 1, 1, &one, 1, &one, 1, c, 1, 1) ==
                 KILN_ERR_UNSUPPORTED,
             "i32 operands rejected");
    KT_CHECK(kiln__gemm_lowp(KILN_BF16, KILN_F64, false, false, 1, 1, 1, &one, 1, &one, 1, c, 1, 1) ==
                 KILN_ERR_UNSUPPORTED,
             "f64 output rejected");
    /* inf and NaN pass through every path */
    lowp_path paths[4];
    int np = lowp_paths(paths);
    kiln_cpu_caps saved = *kiln__cpu_caps();
    for (int pi = 0; pi < np; pi++) {
        kiln__cpu_caps_set(&paths[pi].caps);
        float a[2] = {INFINITY, 1}, b[2] = {1, NAN}, r[4];
        KT_OK(kiln__gemm_lowp(KILN_F32, KILN_F32, false, false, 2, 2, 1, a, 1, b, 2, r, 2, 1));
        KT_CHECK(isinf(r[0]) && isnan(r[1]) && r[2] == 1 && isnan(r[3]), "%s: inf/nan: %g %g %g %g", paths[pi].name,
                 r[0], r[1], r[2], r[3]);
        uint16_t h[4];
        KT_OK(kiln__gemm_lowp(KILN_F32, KILN_BF16, false, false, 2, 2, 1, a, 1, b, 2, h, 2, 1));
        KT_CHECK(h[0] == 0x7f80 && h[2] == kiln__f32_to_bf16(1.0f) && isnan(kiln__bf16_to_f32(h[1])), "%s: bf16 out",
                 paths[pi].name);
    }
    kiln__cpu_caps_set(&saved);
}

/* kiln_matmul with bf16 and f16 tensors: the output keeps their dtype */
KT_TEST(gemm_lowp_kiln_matmul_half_dtypes) {
    kiln_dtype dts[2] = {KILN_BF16, KILN_F16};
    for (int d = 0; d < 2; d++) {
        kiln_ctx *ctx = kiln_ctx_new();
        int64_t B = 3, M = 19, K = 40, N = 23;
        kiln_tensor *a = kiln_new_3d(ctx, dts[d], B, M, K), *b = kiln_new_2d(ctx, dts[d], N, K);
        KT_NOTNULL(a && b);
        KT_OK(kiln_tensor_fill_uniform(a, 1, -1, 1));
        KT_OK(kiln_tensor_fill_uniform(b, 2, -1, 1));
        kiln_tensor *y = kiln_matmul(ctx, a, kiln_transpose(ctx, b, 0, 1)); /* [B, M, N] */
        KT_NOTNULL(y);
        KT_CHECK(kiln_tensor_dtype(y) == dts[d], "output dtype %s", kiln_dtype_name(kiln_tensor_dtype(y)));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        double *av = malloc(sizeof(double) * (size_t)(B * M * K)), *bv = malloc(sizeof(double) * (size_t)(N * K));
        double *yv = malloc(sizeof(double) * (size_t)(B * M * N));
        KT_OK(kiln_tensor_get_f64(a, av, B * M * K));
        KT_OK(kiln_tensor_get_f64(b, bv, N * K));
        KT_OK(kiln_tensor_get_f64(y, yv, B * M * N));
        double ulp = dts[d] == KILN_BF16 ? 1.0 / 256 : 1.0 / 2048, worst = 0;
        for (int64_t p = 0; p < B; p++)
            for (int64_t i = 0; i < M; i++)
                for (int64_t j = 0; j < N; j++) {
                    double r = 0, g2 = 0;
                    for (int64_t q = 0; q < K; q++) {
                        r += av[(p * M + i) * K + q] * bv[j * K + q];
                        g2 += fabs(av[(p * M + i) * K + q] * bv[j * K + q]);
                    }
                    double e = fabs(yv[(p * M + i) * N + j] - r) / (ulp * fabs(r) + 1e-5 * g2 + 1e-30);
                    if (e > worst) worst = e;
                }
        KT_CHECK(worst <= 1.0, "%s: error %.3g of the allowed", kiln_dtype_name(dts[d]), worst);
        free(av), free(bv), free(yv);
        kiln_ctx_free(ctx);
    }
}

/* With KILN_MATMUL_BF16, f32 matmuls round their operands to bf16; KILN_MATMUL_TF32 is exact on the CPU */
KT_TEST(gemm_lowp_precision_setting_rounds_f32) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 1, 2), *b = kiln_new_2d(ctx, KILN_F32, 2, 1);
    KT_OK(kiln_tensor_set_f32(a, (float[]){1.0f + 1.0f / 1024, 2.0f}, 2));
    KT_OK(kiln_tensor_set_f32(b, (float[]){1.0f, 0.5f}, 2));
    kiln_tensor *y = kiln_matmul(ctx, a, b);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_item(y) == 2.0 + 1.0 / 1024, "f32: %.10g", kiln_tensor_item(y));
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_BF16));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_item(y) == 2.0, "bf16: %.10g", kiln_tensor_item(y));
    /* TF32 permits TF32 units; the CPU has none and stays exact */
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_TF32));
    KT_CHECK(kiln_get_matmul_precision() == KILN_MATMUL_TF32, "the setting is kept");
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_item(y) == 2.0 + 1.0 / 1024, "tf32 on the CPU: %.10g", kiln_tensor_item(y));
    KT_CHECK(kiln_set_matmul_precision((kiln_matmul_precision)3) == KILN_ERR_ARG, "an unknown precision is refused");
    KT_CHECK(kiln_get_matmul_precision() == KILN_MATMUL_TF32, "a refused setting changes nothing");
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_F32));
    kiln_ctx_free(ctx);
}

/* Losses of a 2-layer MLP regression (x W1 -> relu -> W2, mse) over its SGD steps. */
static int train_mlp(kiln_matmul_precision prec, float *losses, int steps) {
    if (kiln_set_matmul_precision(prec)) return 1;
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t N = 128, D = 24, H = 64;
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, N, D), *y = kiln_new_2d(ctx, KILN_F32, N, 1);
    kiln_tensor_fill_uniform(x, 5, -1, 1);
    float *xv = kiln_tensor_data(x), *yv = kiln_tensor_data(y);
    for (int64_t i = 0; i < N; i++) {
        double t = 0;
        for (int64_t j = 0; j < D; j++) t += sin(1.3 * (double)j + 0.7) * xv[i * D + j];
        yv[i] = (float)tanh(t);
    }
    kiln_tensor *w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){D, H});
    kiln_tensor *w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){H, 1});
    kiln_tensor_init_linear(w1, 1, D);
    kiln_tensor_init_linear(w2, 2, H);
    kiln_tensor *h = kiln_relu(ctx, kiln_matmul(ctx, x, w1));
    kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, h, w2), y);
    kiln_graph *g = kiln_graph_new(ctx);
    int rc = 1;
    if (!loss || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) goto out;
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
    for (int s = 0; s < steps; s++) {
        if (kiln_graph_compute(g) || kiln_optim_step(opt)) goto out;
        losses[s] = (float)kiln_tensor_item(loss);
    }
    rc = 0;
out:
    kiln_ctx_free(ctx);
    kiln_set_matmul_precision(KILN_MATMUL_F32);
    return rc;
}

KT_TEST(gemm_lowp_bf16_mixed_precision_trains) {
    enum { STEPS = 150 };
    float l32[STEPS], l16[STEPS];
    KT_REQUIRE(!train_mlp(KILN_MATMUL_F32, l32, STEPS), "f32 run: %s", kiln_last_error());
    KT_REQUIRE(!train_mlp(KILN_MATMUL_BF16, l16, STEPS), "bf16 run: %s", kiln_last_error());
    KT_CHECK(l16[STEPS - 1] < 0.01 * l16[0], "bf16 loss %g -> %g does not fall", l16[0], l16[STEPS - 1]);
    KT_CHECK(l32[STEPS - 1] < 0.01 * l32[0], "f32 loss %g -> %g does not fall", l32[0], l32[STEPS - 1]);
    bool differs = false;
    for (int s = 0; s < STEPS; s++) {
        if (l16[s] != l32[s]) differs = true;
        /* within 5% of each other (about 1% seen), or 0.02% of the start
         * loss once it has fallen over 1000x */
        bool close = fabs(l16[s] - l32[s]) <= 0.05 * l32[s] + 2e-4 * l32[0];
        KT_CHECK(close, "step %d: bf16 loss %g vs f32 %g", s, l16[s], l32[s]);
        if (!close) break;
    }
    KT_CHECK(differs, "bf16 precision changed nothing: the setting is not applied");
}
