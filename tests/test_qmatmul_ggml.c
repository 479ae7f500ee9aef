/* test_qmatmul_ggml.c — the per-ISA kernels of ggml's block types'
 * batch-1 products (backends/cpu/qmatmul_ggml.h) against the scalar
 * reference, bit for bit, on every SIMD level the CPU can emulate: rows
 * of random block bytes (every code, every scale and min) with scales
 * from zero and subnormal to 65504 of either sign, whole zero rows, and
 * block counts around the kernels' steps; their rows kernels against
 * them; the NEON quantizers of their Q8_0 / Q8_1 activations against the
 * references. */
#include "kt.h"
#include "kt_simd.h"
#include "../quant/quant.h"
#include "../backends/cpu/coders.h"
#include "../backends/cpu/qmatmul.h"
#include "../backends/cpu/qmatmul_ggml.h"

#include <math.h>
#include <stddef.h>

static uint64_t rng(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* an f16 scale: mostly a random finite value, sometimes 0, -0, the
 * smallest subnormal or +-65504 */
static uint16_t scale16(uint64_t *s) {
    static const uint16_t edge[] = {0x0000, 0x8000, 0x0001, 0x7bff, 0xfbff};
    const uint64_t r = rng(s);
    if (r % 8 == 0) return edge[(r >> 8) % 5];
    return (uint16_t)(((r >> 16) & 0x83ff) | (1 + (r >> 32) % 30) << 10);
}

static void put16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }

/* the f16 fields of one block of weight dtype t (offsets; -1 ends) */
static const int *scale_fields(kiln_dtype t) {
    static const int dm[] = {0, 2, -1}, d[] = {0, -1}, q2[] = {offsetof(kiln_block_q2_K, d), offsetof(kiln_block_q2_K, dmin), -1},
                     q3[] = {offsetof(kiln_block_q3_K, d), -1}, q6[] = {offsetof(kiln_block_q6_K, d), -1}, none[] = {-1};
    switch (t) {
    case KILN_Q4_1: case KILN_Q5_1: case KILN_Q8_1: case KILN_Q4_K: case KILN_Q5_K: return dm;
    case KILN_Q5_0: case KILN_IQ4_NL: case KILN_IQ4_XS: return d;
    case KILN_Q2_K: return q2;
    case KILN_Q3_K: return q3;
    case KILN_Q6_K: return q6;
    default: return none;
    }
}

/* nb random blocks of weight dtype t (all zero bytes when zero) */
static void weight_row(kiln_dtype t, uint8_t *w, int64_t nb, bool zero, uint64_t *s) {
    const size_t bs = kiln__types[t].size;
    for (size_t i = 0; i < nb * bs; i++) w[i] = zero ? 0 : (uint8_t)rng(s);
    for (int64_t b = 0; !zero && b < nb; b++) {
        for (const int *f = scale_fields(t); *f >= 0; f++) put16(w + b * bs + *f, scale16(s));
        if (t == KILN_Q8_K) {
            const float d = (float)((int64_t)(rng(s) % 2001) - 1000) / 997.0f;
            memcpy(w + b * bs, &d, 4);
        }
    }
}

/* nb blocks of activation dtype p as its quantizer makes them: codes in
 * [-127, 127], Q8_K's bsums their sums per 16 */
static void act_row(kiln_dtype p, uint8_t *x, int64_t nb, uint64_t *s) {
    for (int64_t b = 0; b < nb; b++) {
        int8_t *qs;
        if (p == KILN_Q8_K) {
            kiln_block_q8_K *k = (kiln_block_q8_K *)x + b;
            k->d = (float)((int64_t)(rng(s) % 2001) - 1000) / 1013.0f;
            qs = k->qs;
        } else if (p == KILN_Q8_1) {
            kiln_block_q8_1 *k = (kiln_block_q8_1 *)x + b;
            k->d = scale16(s), k->s = scale16(s);
            qs = k->qs;
        } else {
            kiln_block_q8_0 *k = (kiln_block_q8_0 *)x + b;
            k->d = scale16(s);
            qs = k->qs;
        }
        const int n = kiln__types[p].blck;
        for (int j = 0; j < n; j++) qs[j] = (int8_t)((int)(rng(s) % 255) - 127);
        if (p == KILN_Q8_K)
            for (int j = 0; j < 16; j++) {
                kiln_block_q8_K *k = (kiln_block_q8_K *)x + b;
                int sum = 0;
                for (int e = 0; e < 16; e++) sum += k->qs[16 * j + e];
                k->bsums[j] = (int16_t)sum;
            }
    }
}

KT_TEST(qmatmul_ggml_kernels_match_reference) {
    static const int64_t counts[] = {1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 33, 64};
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        if (!kiln__qmm_ggml_handles((kiln_dtype)t)) continue;
        const kiln_dtype p = kiln__types[t].dot_type;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++)
            for (int zero = 0; zero < 2; zero++) {
                const int64_t nb = counts[c];
                uint8_t *w = malloc(nb * kiln__types[t].size), *x = malloc(nb * kiln__types[p].size);
                weight_row((kiln_dtype)t, w, nb, zero && c % 2, &seed);
                act_row(p, x, nb, &seed);
                const float want = kiln__qmm_dot_ggml_ref((kiln_dtype)t, w, x, nb);
                KT_FOR_EACH_SIMD(v) {
                    const float got = kiln__qmm_ggml_kernel((kiln_dtype)t)(w, x, nb);
                    KT_CHECK(!memcmp(&got, &want, 4), "%s, %lld blocks%s: %.9g, the reference %.9g",
                             kiln__types[t].name, (long long)nb, zero && c % 2 ? " of zeros" : "", got, want);
                }
                free(w), free(x);
            }
    }
}

/* Where a level has kernels of its own, the dispatch chooses them: the
 * blocks of 32 of qmatmul_q32_*.c on every x86 level from AVX2 up, every
 * type on NEON and NEON-dotprod (the latter's batch-1 and rows kernels
 * not NEON's). */
KT_TEST(qmatmul_ggml_levels_choose_their_kernels) {
    kiln_qmm_dot_ggml *scalar[KILN_DTYPE_COUNT] = {0}, *neon[KILN_DTYPE_COUNT] = {0};
    kiln_qmm_dot_ggml_rows *neon_rows[KILN_DTYPE_COUNT] = {0};
    KT_FOR_EACH_SIMD(v) {
        for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
            if (!kiln__qmm_ggml_handles((kiln_dtype)t)) continue;
            kiln_qmm_dot_ggml *k = kiln__qmm_ggml_kernel((kiln_dtype)t);
            kiln_qmm_dot_ggml_rows *r = kiln__qmm_ggml_rows_kernel((kiln_dtype)t);
            const bool q32 = t == KILN_Q4_1 || t == KILN_Q5_0 || t == KILN_Q5_1 || t == KILN_IQ4_NL;
            if (!strcmp(v.name, "scalar")) scalar[t] = k;
            else if ((q32 && kiln__cpu_avx2(&v.caps)) || kiln__cpu_neon(&v.caps))
                KT_CHECK(k && k != scalar[t], "%s: the reference, not a kernel of its own", kiln__types[t].name);
            if (!strcmp(v.name, "neon")) neon[t] = k, neon_rows[t] = r;
            if (!strcmp(v.name, "neondot"))
                KT_CHECK(k != neon[t] && r && r != neon_rows[t], "%s: NEON's kernels at neondot", kiln__types[t].name);
        }
    }
}

/* The rows kernels (a few rows of x against one row of W) at every level
 * that has them, every row count 1 .. KILN_QMM_ROWS_MAX: out[q] is the
 * one-row kernel's product with row q, bit for bit (block counts about the
 * lanes' groups of 8; rows of x apart by more than their size). NEON and
 * NEON-dotprod have one for every type. */
KT_TEST(qmatmul_ggml_rows_kernels_equal_the_one_row_kernels) {
    static const int64_t counts[] = {1, 3, 8, 9, 17};
    enum { R = KILN_QMM_ROWS_MAX };
    uint64_t seed = 0x2545f4914f6cdd1dull;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        if (!kiln__qmm_ggml_handles((kiln_dtype)t)) continue;
        const kiln_dtype p = kiln__types[t].dot_type;
        for (size_t c = 0; c < sizeof counts / sizeof counts[0]; c++) {
            const int64_t nb = counts[c];
            const size_t xrow = (size_t)(nb + 1) * kiln__types[p].size;
            uint8_t *w = malloc(nb * kiln__types[t].size), *x = malloc(R * xrow);
            weight_row((kiln_dtype)t, w, nb, false, &seed);
            for (int q = 0; q < R; q++) act_row(p, x + q * xrow, nb, &seed);
            KT_FOR_EACH_SIMD(v) {
                kiln_qmm_dot_ggml_rows *rows = kiln__qmm_ggml_rows_kernel((kiln_dtype)t);
                KT_CHECK(rows || !kiln__cpu_neon(&v.caps), "%s: no rows kernel", kiln__types[t].name);
                for (int r = 1; rows && r <= R; r++) {
                    float out[R];
                    rows(w, x, xrow, r, nb, out);
                    for (int q = 0; q < r; q++) {
                        const float want = kiln__qmm_ggml_kernel((kiln_dtype)t)(w, x + q * xrow, nb);
                        KT_CHECK(!memcmp(&out[q], &want, 4), "%s, %lld blocks, %d rows, row %d: %.9g, one row %.9g",
                                 kiln__types[t].name, (long long)nb, r, q, out[q], want);
                    }
                }
            }
            free(w), free(x);
        }
    }
}

/* 32 values of one kind for the Q8_0 / Q8_1 quantizers */
static void q8_block(int kind, float *x, uint64_t *s) {
    for (int e = 0; e < 32; e++) x[e] = (float)((int64_t)(rng(s) % 20001) - 10000) / 1237.0f;
    switch (kind) {
    case 1: memset(x, 0, 32 * sizeof *x); break;
    case 2: /* amax 127: d 1, so every x + 0.5 is a tie (away from zero) */
        for (int e = 0; e < 32; e++) x[e] = (float)(e - 16) + 0.5f;
        x[7] = -127.0f;
        break;
    case 3:
        for (int e = 0; e < 32; e++) x[e] = e % 2 ? -0.0f : 0.0f;
        break;
    case 4: x[11] = NAN; break;
    case 5: x[0] = NAN, x[31] = -NAN; break;
    case 6: x[20] = -INFINITY; break;
    case 7: x[3] = 3e38f, x[4] = -3e38f; break; /* d past f16's range */
    case 8: /* subnormal: 1 / d past f32's range */
        for (int e = 0; e < 32; e++) x[e] *= 1e-43f;
        break;
    case 9:
        for (int e = 0; e < 32; e++) x[e] *= 1e-39f;
        break;
    }
}

/* x to Q8_0 and Q8_1 (the blocks of 32's activations) through the
 * registered coders, and to qmatmul.h's codes and scales through
 * NEON-dotprod's set, the references' bytes at every level: random
 * values, ties, zeros of both signs, NaN, inf, values past f16's range,
 * subnormals; on ARM NEON's quantizers are the coders. */
KT_TEST(qmatmul_ggml_quantize_q8_0_q8_1_match_the_references) {
    enum { KINDS = 10, NB = 2 * KINDS + 1 };
    static float x[NB * 32], dx_want[NB], dx_got[NB];
    static kiln_block_q8_0 want0[NB], got0[NB];
    static kiln_block_q8_1 want1[NB], got1[NB];
    static int8_t xq_want[NB * 32], xq_got[NB * 32];
    uint64_t seed = 0x853c49e6748fea9bull;
    for (int b = 0; b < NB; b++) q8_block(b % KINDS, x + 32 * b, &seed);
    kiln__quantize_q8_0_ref(x, want0, NB * 32);
    kiln__quantize_q8_1_ref(x, want1, NB * 32);
    kiln__qmm_quantize_x(x, xq_want, dx_want, NB * 32);
    KT_CHECK(!kiln__quantize_q8_0_neon() || (kiln__types[KILN_Q8_0].from_f32 != kiln__quantize_q8_0_ref &&
                                             kiln__types[KILN_Q8_1].from_f32 != kiln__quantize_q8_1_ref),
             "NEON's quantizers are not Q8_0's and Q8_1's coders");
    KT_FOR_EACH_SIMD(v) {
        KT_CHECK(!kiln__cpu_neon(&v.caps) || (kiln__quantize_q8_0_neon() && kiln__quantize_q8_1_neon()),
                 "no NEON quantizers");
        memset(got0, 0xa5, sizeof got0), memset(got1, 0xa5, sizeof got1);
        kiln__types[KILN_Q8_0].from_f32(x, got0, NB * 32);
        kiln__types[KILN_Q8_1].from_f32(x, got1, NB * 32);
        for (int b = 0; b < NB; b++) {
            KT_CHECK(!memcmp(&got0[b], &want0[b], sizeof got0[b]), "q8_0 block %d (kind %d) differs", b, b % KINDS);
            KT_CHECK(!memcmp(&got1[b], &want1[b], sizeof got1[b]), "q8_1 block %d (kind %d) differs", b, b % KINDS);
        }
        const kiln_qmm_kernels *k = kiln__qmm_kernels_neondot();
        if (!k || !kiln__cpu_neondot(&v.caps)) continue;
        memset(xq_got, 0xa5, sizeof xq_got), memset(dx_got, 0xa5, sizeof dx_got);
        k->quantize_x(x, xq_got, dx_got, NULL, NB * 32, 128);
        for (int b = 0; b < NB; b++)
            KT_CHECK(!memcmp(xq_got + 32 * b, xq_want + 32 * b, 32) && !memcmp(&dx_got[b], &dx_want[b], 4),
                     "qmatmul's block %d (kind %d) differs", b, b % KINDS);
    }
}
