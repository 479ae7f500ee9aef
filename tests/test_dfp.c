/* test_dfp.c — the dynamic fixed point format (quant/dfp.h) and the DFP16
 * dtype: the exponent on known tensors, every SIMD path equal to the
 * scalar reference bit for bit (round to nearest and stochastic), the
 * rounding error bound, stochastic rounding unbiased in the mean, and
 * kiln_quantize / kiln_dequantize of a DFP16 tensor. */
#include "kt.h"
#include "kt_simd.h"

#include "../backends/cpu/coders.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Reproducible values with a heavy tail and a few specials mixed in. */
static float *values(int64_t n, uint64_t seed, bool specials) {
    float *x = malloc((size_t)n * sizeof *x);
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        double u = (double)(s >> 11) / 9007199254740992.0 - 0.5;
        x[i] = (float)(u * pow(2.0, (double)((s >> 3) % 24) - 12.0));
    }
    if (specials && n >= 200) {
        x[5] = 0.0f, x[6] = -0.0f, x[70] = 1e-40f, x[71] = -3e-39f, x[140] = NAN, x[141] = INFINITY;
        x[150] = -INFINITY;
        for (int j = 192; j < 200 && j < n; j++) x[j] = 0.0f; /* part of a zero block: below */
    }
    return x;
}

static void quant_block(const float *x, kiln_block_dfp16 *b) { kiln__quantize_dfp16_ref(x, b, KILN_QKDFP16); }

KT_TEST(dfp_exponent_known_tensors) {
    float x[64];
    kiln_block_dfp16 b;
    for (int i = 0; i < 64; i++) x[i] = 1.0f;
    quant_block(x, &b); /* amax 1 = 2^0: e = 0 - 14, q = 2^14 */
    KT_CHECK(b.e == -14 && b.q[0] == 16384, "ones: e %d q %d", b.e, b.q[0]);
    x[3] = -3.0f; /* 2^1 <= 3 < 2^2: e = -13, 3 * 2^13 = 24576 */
    quant_block(x, &b);
    KT_CHECK(b.e == -13 && b.q[3] == -24576 && b.q[0] == 8192, "e %d q %d %d", b.e, b.q[3], b.q[0]);
    for (int i = 0; i < 64; i++) x[i] = 0.75f * (i % 2 ? 1 : -1); /* e = -1 - 14 */
    quant_block(x, &b);
    KT_CHECK(b.e == -15 && b.q[0] == -24576 && b.q[1] == 24576, "0.75: e %d q %d", b.e, b.q[1]);
    x[0] = nextafterf(2.0f, 0.0f); /* rounds to 2^15: takes the largest code */
    quant_block(x, &b);
    KT_CHECK(b.e == -14 && b.q[0] == 32767, "just below 2: e %d q %d", b.e, b.q[0]);
    memset(x, 0, sizeof x);
    quant_block(x, &b);
    KT_CHECK(b.e == -127 && b.q[0] == 0, "zeros: e %d", b.e);
    x[9] = 0x1p100f; /* large */
    quant_block(x, &b);
    KT_CHECK(b.e == 86 && b.q[9] == 16384, "2^100: e %d q %d", b.e, b.q[9]);
    x[9] = NAN, x[10] = -INFINITY, x[11] = 5.0f;
    quant_block(x, &b);
    KT_CHECK(b.q[9] == 0 && b.q[10] == -32767 && b.e == 114, "nan/inf: q %d %d e %d", b.q[9], b.q[10], b.e);
    /* per-tensor, 14 bits: amax 6 (2^2 <= 6 < 2^3): e = 2 - 12, q = 6 * 2^10 */
    float y[5] = {1, -6, 0.5f, 2, 0}, ys = 0;
    int16_t q[5];
    int e, qm;
    kiln__dfp_quantize(y, 5, 14, q, &e, &qm, false, 0);
    KT_CHECK(e == -10 && q[1] == -6144 && q[2] == 512 && qm == 6144, "14 bits: e %d q %d qmax %d", e, q[1], qm);
    for (int i = 0; i < 5; i++) ys += (float)q[i] * ldexpf(1, e) - y[i];
    KT_CHECK(ys == 0.0f, "exact values stay exact");
}

/* Round to nearest: |x - q 2^e| <= 2^(e-1), the block's largest value uses
 * the top bit; and the traits table's read-back equals it. */
KT_TEST(dfp16_rounding_bound) {
    int64_t n = 64 * 40;
    float *x = values(n, 1, false), *y = malloc((size_t)n * 4);
    kiln_block_dfp16 *b = malloc((size_t)(n / 64) * sizeof *b);
    kiln__quantize_dfp16_ref(x, b, n);
    kiln__dequantize_dfp16(b, y, n);
    for (int64_t k = 0; k < n / 64; k++) {
        float amax = 0;
        int qm = 0;
        for (int j = 0; j < 64; j++) {
            int64_t i = k * 64 + j;
            amax = fmaxf(amax, fabsf(x[i]));
            qm = abs(b[k].q[j]) > qm ? abs(b[k].q[j]) : qm;
            KT_REQUIRE(fabs((double)x[i] - y[i]) <= ldexp(1, b[k].e - 1), "block %lld elt %d: %g vs %g",
                       (long long)k, j, x[i], y[i]);
        }
        KT_CHECK(qm >= 16384 && fabs((double)x[k * 64] - y[k * 64]) <= amax * 0x1p-15, "block %lld: qmax %d",
                 (long long)k, qm);
    }
    free(x), free(y), free(b);
}

/* The coder of every SIMD variant (kt_simd.h) against the scalar one. */
KT_TEST(dfp16_simd_equals_scalar) {
    int64_t n = 64 * 37;
    float *x = values(n, 2, true);
    kiln_block_dfp16 *r = malloc((size_t)(n / 64) * sizeof *r), *s = malloc((size_t)(n / 64) * sizeof *s);
    const kiln__dfp_kernels *sc = kiln__dfp_kernels_scalar();
    KT_FOR_EACH_SIMD(v) {
        const kiln__dfp_kernels *k = kiln__dfp_kernels_best();
        for (int sr = 0; sr < 2; sr++) {
            kiln__quantize_dfp16_with(sc, x, r, n, sr, 77);
            kiln__quantize_dfp16_with(k, x, s, n, sr, 77);
            KT_CHECK(!memcmp(r, s, (size_t)(n / 64) * sizeof *r), "sr %d differs", sr);
        }
        /* odd lengths (the per-tensor loops' tails) */
        for (int64_t len = 1; len < 50; len += 7) {
            int16_t q0[64], q1[64];
            KT_CHECK(sc->amax_bits(x + 3, len) == k->amax_bits(x + 3, len), "amax len %lld", (long long)len);
            for (int sr = 0; sr < 2; sr++) {
                sc->round(x + 3, len, 1024.0f, 8191, q0, sr, 5, 9);
                k->round(x + 3, len, 1024.0f, 8191, q1, sr, 5, 9);
                KT_CHECK(!memcmp(q0, q1, (size_t)len * 2), "round len %lld sr %d", (long long)len, sr);
            }
        }
    }
    free(x), free(r), free(s);
}

/* E[q] = x 2^-e: the mean of many stochastic roundings of one value comes
 * within 4 standard errors of it; the same seed gives the same codes. */
KT_TEST(dfp16_stochastic_rounding_unbiased) {
    int64_t n = 64 * 4096;
    float *x = malloc((size_t)n * 4);
    kiln_block_dfp16 *b = malloc((size_t)(n / 64) * sizeof *b), *b2 = malloc((size_t)(n / 64) * sizeof *b2);
    const double fr[3] = {0.3, 0.5, 0.9};
    for (int t = 0; t < 3; t++) {
        for (int64_t i = 0; i < n; i++) x[i] = i % 64 ? (float)((100.0 + fr[t]) * 0x1p-14) : 1.0f; /* e = -14 */
        kiln__quantize_dfp16_with(kiln__dfp_kernels_best(), x, b, n, true, 1234 + (uint64_t)t);
        double sum = 0, cnt = 0;
        for (int64_t k = 0; k < n / 64; k++)
            for (int j = 1; j < 64; j++) {
                KT_REQUIRE(b[k].q[j] == 100 || b[k].q[j] == 101, "q %d", b[k].q[j]);
                sum += b[k].q[j], cnt++;
            }
        double mean = sum / cnt, se = sqrt(fr[t] * (1 - fr[t]) / cnt);
        KT_CHECK(fabs(mean - (100.0 + fr[t])) < 4 * se, "frac %.1f: mean %.5f (se %.5f)", fr[t], mean, se);
        kiln__quantize_dfp16_with(kiln__dfp_kernels_best(), x, b2, n, true, 1234 + (uint64_t)t);
        KT_CHECK(!memcmp(b, b2, (size_t)(n / 64) * sizeof *b), "reproducible");
    }
    /* per tensor too, on mixed values: the mean error over many seeds ~ 0 */
    float y[256];
    int16_t q[256];
    for (int i = 0; i < 256; i++) y[i] = (float)sin(i * 0.37) * 3.0f;
    double err = 0;
    int e;
    for (uint64_t seed = 0; seed < 400; seed++) {
        kiln__dfp_quantize(y, 256, 8, q, &e, NULL, true, seed);
        for (int i = 0; i < 256; i++) err += (double)q[i] * ldexp(1, e) - y[i];
    }
    err /= 400.0 * 256; /* a code step is 2^-5 here; a biased rounding would be ~1e-2 */
    KT_CHECK(fabs(err) < 2e-4, "mean error %g", err);
    free(x), free(b), free(b2);
}

KT_TEST(dfp16_dtype_tensors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 3, 128);
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 1.0));
    kiln_tensor *wq = kiln_quantize(ctx, w, KILN_DFP16);
    KT_NOTNULL(wq);
    KT_CHECK(kiln_tensor_dtype(wq) == KILN_DFP16 && kiln_tensor_nbytes(wq) == 6 * 130, "nbytes %zu",
             kiln_tensor_nbytes(wq));
    KT_CHECK(!strcmp(kiln_dtype_name(KILN_DFP16), "dfp16") && kiln_dtype_block(KILN_DFP16) == 64, "traits");
    float wv[384], wd[384];
    kiln_block_dfp16 ref[6];
    KT_OK(kiln_tensor_get_f32(w, wv, 384));
    KT_OK(kiln_tensor_get_f32(wq, wd, 384));
    kiln__quantize_dfp16_ref(wv, ref, 384);
    KT_CHECK(!memcmp(kiln_tensor_data(wq), ref, sizeof ref), "kiln_quantize is the reference");
    for (int i = 0; i < 384; i++)
        KT_REQUIRE(fabsf(wv[i] - wd[i]) <= ldexpf(1, ref[i / 64].e - 1), "elt %d: %g vs %g", i, wv[i], wd[i]);
    KT_EXPECT_ERR(kiln_quantize(ctx, kiln_new_2d(ctx, KILN_F32, 2, 32), KILN_DFP16), KILN_ERR_SHAPE,
                  "multiple of 64");
    kiln_ctx_free(ctx);
}

/* kiln__dfp_quantize over several 64 Ki chunks on 2 threads (one parallel
 * region: the maximum, then the codes) against the scalar loops over the
 * whole tensor: the same exponent, bound and codes, both roundings. */
KT_TEST(dfp_quantize_threaded_chunks_equal_scalar) {
    const int64_t n = 3 * 65536 + 123;
    float *x = malloc((size_t)n * 4);
    int16_t *q = malloc((size_t)n * 2), *r = malloc((size_t)n * 2);
    uint64_t st = 99;
    for (int64_t i = 0; i < n; i++) {
        st = st * 6364136223846793005ull + 1442695040888963407ull;
        x[i] = (float)((double)(st >> 40) / (double)(1ull << 24) - 0.5) * (i == 150000 ? 40.0f : 3.0f);
    }
    const kiln__dfp_kernels *sc = kiln__dfp_kernels_scalar();
    int ex_ref = kiln__dfp_exponent(sc->amax_bits(x, n), 14);
    int saved = kiln_get_threads();
    kiln_set_threads(2);
    for (int sr = 0; sr < 2; sr++) {
        int e, qm;
        kiln__dfp_quantize(x, n, 14, q, &e, &qm, sr, 7);
        sc->round(x, n, kiln__dfp_pow2(-ex_ref), 8191, r, sr, kiln__dfp_seed_mix(7), 0);
        KT_CHECK(e == ex_ref, "exponent %d, want %d", e, ex_ref);
        KT_CHECK(!memcmp(q, r, (size_t)n * 2), "stochastic %d: codes differ", sr);
        int big = 0;
        for (int64_t i = 0; i < n; i++) big = abs(q[i]) > big ? abs(q[i]) : big;
        KT_CHECK(big <= qm && qm <= 8191, "bound %d, largest code %d", qm, big);
    }
    kiln_set_threads(saved);
    free(x), free(q), free(r);
}
