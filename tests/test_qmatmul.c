/* test_qmatmul.c — KILN_OP_QMATMUL (backends/cpu/qmatmul.c): y = x . W^T
 * with W quantized, for every format, against the dequantized W times x in
 * double; every SIMD path against the scalar reference (bit for bit on the
 * integer paths); 1 thread against 2 (bit for bit); the refusals; the
 * gradient to x.
 *
 * Tolerance. The integer paths (Q8_0, Q4_0: fewer than
 * KILN_QMM_PANEL_MIN_M rows, or more where the block-scaled integer GEMM
 * of qmatmul_gemm.h runs) quantize x to int8 per block of 32 with
 * d = amax / 127: each x_j moves by at most d / 2 <= |x_b| / 254 (|x_b|
 * the block's norm), plus d's f16 rounding (relative 2^-11 of
 * |x_j| + d / 2). By Cauchy-Schwarz the error of one output is at most
 * |w| |x| (sqrt(32) / 254 + 2^-10) plus f32 summation; the test allows
 * 0.025 |x| |w| per output (the worst case: random data sits far below).
 * The f32 paths (NF4, NF4_DQ, and the panel path of Q8_0 / Q4_0 on CPUs
 * without AVX2 or NEON's dot product) allow 1e-4 |x| |w|. */
#include "kt.h"
#include "kt_simd.h"
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/qmatmul.h"
#include "../backends/cpu/qmatmul_gemm.h"
#include "../quant/quant.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

static const kiln_dtype fmts[4] = {KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};

/* a shape per format: k a multiple of the block, not of 256; NF4_DQ's n k
 * a multiple of 16384 with rows straddling super-blocks */
static void shape_of(kiln_dtype t, int64_t *n, int64_t *k) {
    *k = t == KILN_Q8_0 || t == KILN_Q4_0 ? 160 : 320;
    *n = t == KILN_NF4_DQ ? 256 : 40;
}

/* W quantized [n, k] and its dequantized values */
static kiln_tensor *make_w(kiln_ctx *ctx, kiln_dtype t, int64_t n, int64_t k, float *wd) {
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, n, k);
    kiln_tensor_fill_randn(w, 7 + (uint64_t)t, 0.0, 0.05);
    kiln_tensor *q = kiln_quantize(ctx, w, t), *f = kiln_dequantize(ctx, q);
    if (!f || compute(ctx, f) || kiln_tensor_get_f32(f, wd, n * k)) return NULL;
    return q;
}

KT_TEST(qmatmul_matches_dequantized) {
    KT_FOR_EACH_SIMD(v)
    for (int fi = 0; fi < 4; fi++) {
        const kiln_dtype t = fmts[fi];
        const bool i8 = t == KILN_Q8_0 || t == KILN_Q4_0;
        int64_t n, k;
        shape_of(t, &n, &k);
        const int64_t ms[3] = {1, 3, 64};
        for (int mi = 0; mi < 3; mi++) {
            const int64_t m = ms[mi];
            kiln_ctx *ctx = kiln_ctx_new();
            float *wd = malloc((size_t)(n * k) * 4), *xv = malloc((size_t)(m * k) * 4), *yv = malloc((size_t)(m * n) * 4);
            kiln_tensor *wq = make_w(ctx, t, n, k, wd);
            KT_NOTNULL(wq);
            kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, m, k);
            KT_OK(kiln_tensor_fill_randn(x, 3 + (uint64_t)m, 0.0, 1.0));
            KT_OK(kiln_tensor_get_f32(x, xv, m * k));
            kiln_tensor *y = kiln_linear(ctx, x, wq, NULL);
            KT_NOTNULL(y);
            KT_CHECK(y->op == KILN_OP_QMATMUL, "%s: kiln_linear gives a qmatmul node", kiln_dtype_name(t));
            KT_OK(compute(ctx, y));
            KT_OK(kiln_tensor_get_f32(y, yv, m * n));
            const bool int_path = i8 && (m < kiln__qmm_batched_min(t) || kiln__qmm_gemm_available(t));
            const double rel = int_path ? 0.025 : 1e-4;
            double worst = 0;
            for (int64_t i = 0; i < m; i++) {
                double nx = 0;
                for (int64_t j = 0; j < k; j++) nx += (double)xv[i * k + j] * xv[i * k + j];
                for (int64_t r = 0; r < n; r++) {
                    double s = 0, nw = 0;
                    for (int64_t j = 0; j < k; j++) {
                        s += (double)xv[i * k + j] * wd[r * k + j];
                        nw += (double)wd[r * k + j] * wd[r * k + j];
                    }
                    const double e = fabs(yv[i * n + r] - s) / (sqrt(nx * nw) + 1e-30);
                    worst = e > worst ? e : worst;
                }
            }
            if (getenv("KT_VERBOSE")) printf("%s m %lld worst %g\n", kiln_dtype_name(t), (long long)m, worst);
            KT_CHECK(worst <= rel, "%s m %lld: error %g |x||w| > %g", kiln_dtype_name(t), (long long)m, worst, rel);
            free(wd), free(xv), free(yv);
            kiln_ctx_free(ctx);
        }
    }
}

/* the raw kernel on a quantized W (nq bytes) under caps c */
static void run(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y, int nt) {
    KT_OK(kiln__qmatmul_cpu(t, m, n, k, x, w, y, nt));
}

static void *quantized(kiln_dtype t, int64_t n, int64_t k, float **x, int64_t m) {
    float *w = malloc((size_t)(n * k) * 4);
    *x = malloc((size_t)(m * k) * 4);
    uint64_t s = 12345 + (uint64_t)t;
    for (int64_t i = 0; i < n * k; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        w[i] = (float)((int64_t)(s >> 40) % 2001 - 1000) / 20000.0f;
    }
    for (int64_t i = 0; i < m * k; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        (*x)[i] = (float)((int64_t)(s >> 40) % 2001 - 1000) / 500.0f;
    }
    void *q = malloc(kiln_dtype_size(t) * (size_t)(n * k / kiln_dtype_block(t)));
    kiln__types[t].from_f32(w, q, n * k);
    free(w);
    return q;
}

/* the scalar reference's y (one thread) */
static float *run_scalar(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w) {
    const kiln_cpu_caps saved = *kiln__cpu_caps();
    kiln_cpu_caps c = saved;
    kiln__cpu_caps_limit(&c, KILN_SIMD_SCALAR);
    kiln__cpu_caps_set(&c);
    float *y = malloc((size_t)(m * n) * 4);
    kiln_status s = kiln__qmatmul_cpu(t, m, n, k, x, w, y, 1);
    kiln__cpu_caps_set(&saved);
    if (s) kt_fail(__FILE__, __LINE__, "scalar %s: %s", kiln_dtype_name(t), kiln_last_error());
    return y;
}

/* every SIMD variant of the CPU against the scalar reference */
KT_TEST(qmatmul_simd_equals_scalar) {
    for (int fi = 0; fi < 4; fi++) {
        const kiln_dtype t = fmts[fi];
        int64_t n, k;
        shape_of(t, &n, &k);
        for (int64_t m = 1; m <= 3; m += 2) {
            float *x, *y = malloc((size_t)(m * n) * 4);
            void *w = quantized(t, n, k, &x, m);
            float *y0 = run_scalar(t, m, n, k, x, w);
            KT_FOR_EACH_SIMD(v) {
                run(t, m, n, k, x, w, y, 1);
                for (int64_t i = 0; i < m * n; i++) {
                    if (t == KILN_Q8_0 || t == KILN_Q4_0)
                        KT_REQUIRE(y[i] == y0[i], "%s m %lld [%lld]: %.9g != scalar %.9g", kiln_dtype_name(t),
                                   (long long)m, (long long)i, y[i], y0[i]);
                    else
                        KT_REQUIRE(fabsf(y[i] - y0[i]) <= 1e-5f * (1 + fabsf(y0[i])), "%s [%lld]: %g vs %g",
                                   kiln_dtype_name(t), (long long)i, y[i], y0[i]);
                }
            }
            free(x), free(w), free(y), free(y0);
        }
    }
}

/* Q4_0 takes rows in pairs (the two-row kernels), an odd n leaving one
 * row alone; Q4_0 on AVX512-VBMI takes four blocks per step and the last
 * nb % 4 (1, 2, 3, or all of a row of 3) from padded copies; AVX512-VNNI's
 * Q8_0 takes 16 blocks a step, then pairs, then an odd block (block counts
 * 8, 6, 64, 7, 3, 5, 13, 15, 10, 17, 35 below): still the scalar result,
 * bit for bit, in every SIMD variant (the AVX512-VNNI pair kernels
 * without VBMI, as on Cascade Lake, among them), on 2 threads. */
KT_TEST(qmatmul_row_pairs_equal_scalar) {
    const int64_t shapes[11][2] = {{41, 256}, {40, 192}, {7, 2048}, {9, 224}, {5, 96},  {6, 160},
                                   {11, 416}, {3, 480},  {4, 320},  {5, 544}, {3, 1120}};
    for (int fi = 0; fi < 2; fi++)
        for (int si = 0; si < 11; si++)
            for (int64_t m = 1; m <= 3; m += 2) {
                const kiln_dtype t = fmts[fi];
                const int64_t n = shapes[si][0], k = shapes[si][1];
                float *x, *y1 = malloc((size_t)(m * n) * 4);
                void *w = quantized(t, n, k, &x, m);
                float *y0 = run_scalar(t, m, n, k, x, w);
                KT_FOR_EACH_SIMD(v) {
                    run(t, m, n, k, x, w, y1, 2);
                    for (int64_t i = 0; i < m * n; i++)
                        KT_REQUIRE(y1[i] == y0[i], "%s [%lld, %lld] m %lld [%lld]: %.9g != scalar %.9g",
                                   kiln_dtype_name(t), (long long)n, (long long)k, (long long)m, (long long)i, y1[i],
                                   y0[i]);
                }
                free(x), free(w), free(y0), free(y1);
            }
}

/* Q8_0 / Q4_0 blocks of random bytes with f16 scales of every finite
 * exponent (subnormals too) against x spanning 2^-26 .. 2^18 (d_x down to
 * f16 subnormals and 0): every kernel's d_w d_x (the VBMI Q4_0 kernel's
 * from two rows' scales gathered and converted at once, AVX512-VNNI's Q8_0
 * from 16 blocks' at once) and its multiply-adds must still give the
 * reference's bits. 23 blocks a row: 16, three pairs and an odd one. */
static void *extreme_scales_w(kiln_dtype t, int64_t nblocks, uint64_t *s) {
    const bool q8 = t == KILN_Q8_0;
    const size_t bb = q8 ? sizeof(kiln_block_q8_0) : sizeof(kiln_block_q4_0);
    uint8_t *w = malloc(bb * (size_t)nblocks);
    for (int64_t i = 0; i < nblocks; i++) {
        uint8_t *b = w + bb * (size_t)i;
        for (size_t j = 2; j < bb; j++) {
            *s = *s * 6364136223846793005ull + 1442695040888963407ull;
            b[j] = (uint8_t)(*s >> 56);
        }
        *s = *s * 6364136223846793005ull + 1442695040888963407ull;
        uint16_t d = (uint16_t)((*s >> 40) & 0xffff);
        if ((d & 0x7c00) == 0x7c00) d &= 0xbfff; /* exponent 31 (inf, NaN) to 15 */
        memcpy(b, &d, 2); /* d first in both blocks */
    }
    return w;
}

KT_TEST(qmatmul_extreme_scales_equal_scalar) {
    for (int fi = 0; fi < 2; fi++) {
        const kiln_dtype t = fmts[fi];
        const int64_t n = 33, k = 32 * 23, m = 1;
        uint64_t s = 99;
        void *w = extreme_scales_w(t, n * k / 32, &s);
        float *x = malloc((size_t)k * 4), y1[33];
        for (int64_t j = 0; j < k; j++) {
            s = s * 6364136223846793005ull + 1442695040888963407ull;
            x[j] = ldexpf((float)((int64_t)(s >> 40) % 2001 - 1000) / 1000.0f, (int)(j / 32) * 2 - 26);
        }
        float *y0 = run_scalar(t, m, n, k, x, w);
        KT_FOR_EACH_SIMD(v) {
            run(t, m, n, k, x, w, y1, 1);
            for (int64_t i = 0; i < n; i++)
                KT_REQUIRE(y1[i] == y0[i] && isfinite(y0[i]), "%s [%lld]: %.9g != scalar %.9g", kiln_dtype_name(t),
                           (long long)i, y1[i], y0[i]);
        }
        free(w), free(x), free(y0);
    }
}

/* The batch-1 products' quantizer of x at each level against the scalar
 * one, byte for byte (codes, scales, lane sums): random blocks, ties
 * (d = 1: x / d = j + 1/2 exactly, away from zero), a zero block, -0,
 * values up to FLT_MAX (d's f16 infinite), amax below 127 / FLT_MAX (id
 * infinite), and NaN and infinities (codes 0). */
KT_TEST(qmatmul_quantize_x_equals_reference) {
    enum { NB = 9, N = 32 * NB };
    float x[N];
    uint64_t s = 5;
    for (int j = 0; j < N; j++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[j] = (float)((int64_t)(s >> 40) % 2001 - 1000) / 300.0f;
    }
    x[32] = 127.0f; /* block 1: ties */
    for (int j = 1; j < 32; j++) x[32 + j] = (j % 2 ? -1.0f : 1.0f) * ((float)j + 0.5f);
    for (int j = 64; j < 96; j++) x[j] = 0.0f; /* block 2: zeros, one -0 */
    x[70] = -0.0f;
    x[96] = FLT_MAX, x[97] = -FLT_MAX, x[98] = 1e38f, x[99] = -1.0f; /* block 3: huge */
    for (int j = 128; j < 160; j++) x[j] *= 1e-40f; /* block 4: id infinite */
    x[165] = NAN, x[166] = -NAN; /* block 5: NaN among finite values */
    x[200] = INFINITY; /* block 6: +inf */
    x[230] = -INFINITY; /* block 7: -inf; block 8 random */
    int8_t q0[N], q1[N];
    float d0[NB], d1[NB];
    int32_t s0[8 * NB], s1[8 * NB];
    kiln__qmm_quantize_x(x, q0, d0, N);
    kiln__qmm_lane_sums(q0, s0, NB, 128);
    KT_FOR_EACH_SIMD(v) {
        for (int with_xs = 0; with_xs < 2; with_xs++) {
            memset(q1, 0x5a, sizeof q1), memset(d1, 0x5a, sizeof d1), memset(s1, 0x5a, sizeof s1);
            kiln__qmm_quantize_x_simd(x, q1, d1, with_xs ? s1 : NULL, N, 128);
            for (int j = 0; j < N; j++)
                KT_REQUIRE(q1[j] == q0[j], "x[%d] = %g: code %d, the reference's %d", j, x[j], q1[j], q0[j]);
            KT_REQUIRE(!memcmp(d1, d0, sizeof d0), "the scales differ from the reference's");
            KT_REQUIRE(!with_xs || !memcmp(s1, s0, sizeof s0), "the lane sums differ from the reference's");
        }
    }
    KT_CHECK(q0[33] == -2 && q0[34] == 3 && q0[35] == -4 && q0[165] == 0 && q0[200] == 0 && q0[128] == 0,
             "the reference's ties and non-numbers: %d %d %d, %d %d %d", q0[33], q0[34], q0[35], q0[165], q0[200],
             q0[128]);
}

/* Threads split output rows (or W panels): each output is computed the
 * same way whatever the team, so 2 threads equal 1 bit for bit. */
KT_TEST(qmatmul_threads_identical) {
    for (int fi = 0; fi < 4; fi++) {
        const kiln_dtype t = fmts[fi];
        const int64_t k = t == KILN_Q8_0 || t == KILN_Q4_0 ? 160 : 320, n = 2048;
        const int64_t ms[3] = {1, 3, 64};
        for (int mi = 0; mi < 3; mi++) {
            const int64_t m = ms[mi];
            float *x;
            void *w = quantized(t, n, k, &x, m);
            float *y1 = malloc((size_t)(m * n) * 4), *y2 = malloc((size_t)(m * n) * 4);
            run(t, m, n, k, x, w, y1, 1);
            run(t, m, n, k, x, w, y2, 2);
            KT_CHECK(!memcmp(y1, y2, (size_t)(m * n) * 4), "%s m %lld: 2 threads differ from 1", kiln_dtype_name(t),
                     (long long)m);
            free(x), free(w), free(y1), free(y2);
        }
    }
}

/* NEON-dotprod's Q8_0 and Q4_0 rows kernels (a few rows of x against one
 * row of W), every row count 1 .. KILN_QMM_ROWS_MAX, block counts about
 * their steps of 2 and 4, W's scales of every exponent: out[q] is the
 * one-row kernel's product with row q, bit for bit. */
KT_TEST(qmatmul_neondot_rows_equal_its_one_row_kernels) {
    const kiln_qmm_kernels *k = kiln__qmm_kernels_neondot();
    if (!k || !kiln__cpu_neondot(kiln__cpu_caps())) kt_skip("no NEON dot product");
    static const int64_t counts[] = {1, 2, 3, 4, 5, 6, 7, 9};
    enum { R = KILN_QMM_ROWS_MAX, NBMAX = 9 };
    static float x[R * 32 * NBMAX], dx[R * NBMAX];
    static int8_t xq[R * 32 * NBMAX];
    uint64_t s = 0x5851f42d4c957f2dull;
    for (int i = 0; i < R * 32 * NBMAX; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = ldexpf((float)(int32_t)(s >> 32), -31 - i / 32 % 7 * 4); /* a scale per block */
    }
    for (int fi = 0; fi < 2; fi++)
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const int64_t nb = counts[c];
            void *w = extreme_scales_w(fmts[fi], nb, &s);
            for (int q = 0; q < R; q++)
                kiln__qmm_quantize_x(x + 32 * NBMAX * q, xq + 32 * nb * q, dx + nb * q, 32 * nb);
            for (int r = 1; r <= R; r++) {
                float out[R];
                (fi ? k->q4_0sr : k->q8_0sr)(w, xq, NULL, dx, nb, r, out);
                for (int q = 0; q < r; q++) {
                    const float want = (fi ? k->q4_0 : k->q8_0)(w, xq + 32 * nb * q, dx + nb * q, nb);
                    KT_CHECK(!memcmp(&out[q], &want, 4), "%s, %lld blocks, %d rows, row %d: %.9g, one row %.9g",
                             kiln_dtype_name(fmts[fi]), (long long)nb, r, q, out[q], want);
                }
            }
            free(w);
        }
}

/* The batched integer path (qmatmul_gemm.h) against its scalar reference,
 * bit for bit: the int32 block sums are exact and each lane runs the
 * reference's f32 operations in its order. Shapes with partial groups of
 * rows, partial tiles and panels of columns, K past one chunk of blocks
 * (16) and not a multiple of it, 1 and 2 threads; Q8_0 codes of -128 and
 * 127 (AVX2's |w| times sign(x, w) takes |-128| as 128, unsigned).
 * Every x86 level from AVX2 up runs it (AVX-512 without VNNI with zmm
 * tiles of maddubs, Q8_0 as the nibbles of w + 128), and NEON with the
 * dot product. */
KT_TEST(qmatmul_gemm_equals_reference) {
    const kiln_dtype ts[2] = {KILN_Q8_0, KILN_Q4_0};
    const int64_t shapes[7][3] = {{8, 40, 160}, {33, 200, 96}, {64, 97, 320}, {17, 6, 32},
                                  {23, 13, 544}, {40, 101, 1056}, {9, 7, 512}};
    int ran = 0;
    KT_FOR_EACH_SIMD(v) {
        for (int ti = 0; ti < 2; ti++) {
            if (kiln__cpu_avx2(&v.caps) || kiln__cpu_neondot(&v.caps))
                KT_CHECK(kiln__qmm_gemm_available(ts[ti]), "%s: no integer GEMM at this level", kiln_dtype_name(ts[ti]));
            if (!kiln__qmm_gemm_available(ts[ti])) continue;
            for (int si = 0; si < 7; si++) {
                const int64_t m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
                float *x;
                void *w = quantized(ts[ti], n, k, &x, m);
                /* a block of ties (d = 1: x / d = j + 1/2 exactly), which roundf
                 * takes away from zero: the SIMD quantizers must too */
                x[0] = 127.0f;
                for (int j = 1; j < 32; j++) x[j] = (j % 2 ? -1.0f : 1.0f) * ((float)j + 0.5f);
                if (ts[ti] == KILN_Q8_0)
                    for (int64_t b = 0; b < n * k / 32; b += 3)
                        for (int e = 0; e < 32; e++) ((kiln_block_q8_0 *)w)[b].qs[e] = (int8_t)(e % 2 ? -128 : 127);
                float *yr = malloc((size_t)(m * n) * 4), *y1 = malloc((size_t)(m * n) * 4),
                      *y2 = malloc((size_t)(m * n) * 4);
                KT_OK(kiln__qmm_gemm_ref(ts[ti], m, n, k, x, w, yr));
                KT_OK(kiln__qmm_gemm(ts[ti], m, n, k, x, w, y1, 1));
                KT_OK(kiln__qmm_gemm(ts[ti], m, n, k, x, w, y2, 2));
                for (int64_t i = 0; i < m * n; i++) {
                    KT_REQUIRE(y1[i] == yr[i], "%s %lldx%lldx%lld [%lld]: %.9g != reference %.9g",
                               kiln_dtype_name(ts[ti]), (long long)m, (long long)n, (long long)k, (long long)i, y1[i],
                               yr[i]);
                    KT_REQUIRE(y2[i] == yr[i], "%s 2 threads [%lld]: %.9g != reference %.9g", kiln_dtype_name(ts[ti]),
                               (long long)i, y2[i], yr[i]);
                }
                ran++;
                free(x), free(w), free(yr), free(y1), free(y2);
            }
        }
    }
    if (!ran) kt_skip("no AVX2 or NEON dot product: the batched path dequantizes");
}

KT_TEST(qmatmul_refuses_bad_shapes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 64, 128);
    KT_OK(kiln_tensor_fill_randn(w, 1, 0.0, 1.0));
    kiln_tensor *wq = kiln_quantize(ctx, w, KILN_Q4_0), *x = kiln_new_2d(ctx, KILN_F32, 2, 96);
    KT_NOTNULL(wq);
    KT_EXPECT_ERR(kiln__qmatmul(ctx, "kiln_linear", x, wq), KILN_ERR_SHAPE, "features");
    KT_EXPECT_ERR(kiln_linear(ctx, x, wq, NULL), KILN_ERR_SHAPE, "features");
    KT_EXPECT_ERR(kiln__qmatmul(ctx, "kiln_linear", kiln_new_2d(ctx, KILN_F32, 2, 128), w), KILN_ERR_DTYPE, "not quantized");
    KT_EXPECT_ERR(kiln__qmatmul(ctx, "kiln_linear", kiln_new_2d(ctx, KILN_F16, 2, 128), wq), KILN_ERR_DTYPE, "f32");
    kiln_tensor *w3 = kiln_tensor_new(ctx, KILN_Q8_0, 3, (int64_t[]){2, 4, 64});
    KT_EXPECT_ERR(kiln__qmatmul(ctx, "kiln_linear", kiln_new_2d(ctx, KILN_F32, 2, 64), w3), KILN_ERR_SHAPE, "2-D");
    /* a 3-D input is rows: [2, 3, 128] -> [2, 3, 64] */
    kiln_tensor *x3 = kiln_tensor_new(ctx, KILN_F32, 3, (int64_t[]){2, 3, 128});
    KT_OK(kiln_tensor_fill_randn(x3, 2, 0.0, 1.0));
    kiln_tensor *y3 = kiln_linear(ctx, x3, wq, NULL);
    KT_NOTNULL(y3);
    KT_CHECK(y3->ndim == 3 && y3->shape[0] == 2 && y3->shape[1] == 3 && y3->shape[2] == 64, "3-D output");
    KT_OK(compute(ctx, y3));
    kiln_ctx_free(ctx);
}

/* The gradient reaches x: d sum(x W^T) / dx = the column sums of the
 * dequantized W, for every row of x. */
KT_TEST(qmatmul_gradient_to_x) {
    kiln_ctx *ctx = kiln_ctx_new();
    const int64_t n = 40, k = 128;
    float wd[40 * 128], gx[3 * 128];
    kiln_tensor *wq = make_w(ctx, KILN_Q4_0, n, k, wd);
    KT_NOTNULL(wq);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 3, k);
    KT_OK(kiln_tensor_fill_randn(x, 5, 0.0, 1.0));
    KT_OK(kiln_tensor_set_requires_grad(x, true));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_linear(ctx, x, wq, NULL));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(x), gx, 3 * k));
    for (int64_t i = 0; i < 3; i++)
        for (int64_t j = 0; j < k; j++) {
            double s = 0;
            for (int64_t r = 0; r < n; r++) s += wd[r * k + j];
            KT_REQUIRE(fabs(gx[i * k + j] - s) <= 1e-5 * (1 + fabs(s)), "dx[%lld, %lld] %g, want %g", (long long)i,
                       (long long)j, gx[i * k + j], s);
        }
    kiln_ctx_free(ctx);
}
