/* qmatmul_ggml_neon.h — the batch-1 and few-row products of ggml's block
 * types (qmatmul_ggml.h) on ARM64, shared by qmatmul_ggml_neon.c and
 * _neondot.c, which define GGML_DOT16(acc, a, b) (int32x4 acc plus the
 * products of two int8x16, any lanes: only their total counts) and
 * GGML_NAME(x), the function suffix.
 *
 * Each sub-block's codes are decoded into int8x16 registers (16 elements
 * in order) and dotted with x's codes into int32 lanes, which take the
 * integer sub-block scale and are summed across once per block: the
 * block's isum, exact; the K types with mins take summs from Q8_K's
 * bsums. The f32 side is the
 * reference's own (kiln__qmm_dot_ggml_ref): the same operations in the
 * same order, one block at a time, so every result is the reference's bit
 * for bit. The rows kernels (a few rows of x against one row of W) are
 * the same body with each block decoded once for all the rows, each row's
 * sums its own; the one-row kernel is that body with one row. */
#include "qmatmul_ggml.h"

#include "../../quant/quant.h"
#include "qmatmul.h"

#include <arm_neon.h>

#define GGML_RMAX KILN_QMM_ROWS_MAX
/* the loops over rows unrolled: the rows' accumulators registers */
#define GGML_UNROLL _Pragma("GCC unroll 4")
/* row q's block i of activation type X */
#define GGML_X(X, xa, xrow, q, i) ((const X *)((const char *)(xa) + (size_t)(q) * (xrow)) + (i))

static inline __attribute__((always_inline)) float GGML_NAME(f16)(uint16_t h) {
    return vgetq_lane_f32(vcvt_f32_f16(vreinterpret_f16_u16(vdup_n_u16(h))), 0);
}

/* the products of q[0..15] and x[0..15] (then q1 and x[16..31]) in
 * int32 lanes; sub-block scales multiply the lanes, one sum across them
 * per block */
static inline __attribute__((always_inline)) int32x4_t GGML_NAME(dot16)(int8x16_t q, const int8_t *x) {
    int32x4_t acc = vdupq_n_s32(0);
    GGML_DOT16(acc, q, vld1q_s8(x));
    return acc;
}
static inline __attribute__((always_inline)) int32x4_t GGML_NAME(dot32)(int8x16_t q0, int8x16_t q1, const int8_t *x) {
    int32x4_t acc = vdupq_n_s32(0);
    GGML_DOT16(acc, q0, vld1q_s8(x));
    GGML_DOT16(acc, q1, vld1q_s8(x + 16));
    return acc;
}

/* bit b of bytes h[0..15] as 0x10 in each byte */
static inline __attribute__((always_inline)) uint8x16_t GGML_NAME(bit_to_16)(uint8x16_t h, int b) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << b))), vdupq_n_u8(0x10));
}

/* elements 16 j .. 16 j + 15 (j < 2) of a block of 32's fifth bits at qh
 * (bit e of the little-endian u32) as 0x10 */
static inline __attribute__((always_inline)) uint8x16_t GGML_NAME(fifth)(const uint8_t *qh, int j) {
    static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
    const uint8x16_t h = vcombine_u8(vdup_n_u8(qh[2 * j]), vdup_n_u8(qh[2 * j + 1]));
    return vandq_u8(vtstq_u8(h, vld1q_u8(bits)), vdupq_n_u8(0x10));
}

/* the codes of one block of 32, elements 0-15 in *q0 and 16-31 in *q1
 * (the low nibbles of qs, their high ones; fifth bits where qh; minus
 * off; through the IQ4 values where iq4) */
static inline __attribute__((always_inline)) void GGML_NAME(codes32)(const uint8_t *qs, const uint8_t *qh, int off,
                                                                     bool iq4, int8x16_t *q0, int8x16_t *q1) {
    const uint8x16_t b = vld1q_u8(qs);
    uint8x16_t lo = vandq_u8(b, vdupq_n_u8(0x0f)), hi = vshrq_n_u8(b, 4);
    if (qh) lo = vorrq_u8(lo, GGML_NAME(fifth)(qh, 0)), hi = vorrq_u8(hi, GGML_NAME(fifth)(qh, 1));
    if (iq4) {
        const int8x16_t v = vld1q_s8(kiln__iq4nl_values);
        *q0 = vqtbl1q_s8(v, lo), *q1 = vqtbl1q_s8(v, hi);
        return;
    }
    const int8x16_t o = vdupq_n_s8((int8_t)off);
    *q0 = vsubq_s8(vreinterpretq_s8_u8(lo), o), *q1 = vsubq_s8(vreinterpretq_s8_u8(hi), o);
}

/* The K types' isum (and summs) of one super-block for R rows of x, a[q]
 * row q's Q8_K block; every sub-block's codes decoded once. */

/* Q4_K / Q5_K (sub-blocks of 32) */
static inline __attribute__((always_inline)) void GGML_NAME(isum_q45_K)(int R, const uint8_t *scales,
                                                                        const uint8_t *qs, const uint8_t *qh,
                                                                        const kiln_block_q8_K *const *a,
                                                                        int32_t *is, int32_t *summs) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0), summs[q] = 0;
    const uint8x16_t h0 = qh ? vld1q_u8(qh) : vdupq_n_u8(0), h1 = qh ? vld1q_u8(qh + 16) : vdupq_n_u8(0);
    for (int j = 0; j < 4; j++) { /* a run of 64: low nibbles (sub-block 2j), high (2j + 1) */
        const uint8x16_t b0 = vld1q_u8(qs + 32 * j), b1 = vld1q_u8(qs + 32 * j + 16);
        for (int r = 0; r < 2; r++) {
            const int s = 2 * j + r;
            uint8x16_t q0 = r ? vshrq_n_u8(b0, 4) : vandq_u8(b0, vdupq_n_u8(0x0f));
            uint8x16_t q1 = r ? vshrq_n_u8(b1, 4) : vandq_u8(b1, vdupq_n_u8(0x0f));
            if (qh) q0 = vorrq_u8(q0, GGML_NAME(bit_to_16)(h0, s)), q1 = vorrq_u8(q1, GGML_NAME(bit_to_16)(h1, s));
            int sc, m;
            kiln__scale_min_k4(s, scales, &sc, &m);
            GGML_UNROLL
            for (int q = 0; q < R; q++) {
                tot[q] = vmlaq_n_s32(
                    tot[q], GGML_NAME(dot32)(vreinterpretq_s8_u8(q0), vreinterpretq_s8_u8(q1), a[q]->qs + 32 * s), sc);
                summs[q] += m * (a[q]->bsums[2 * s] + a[q]->bsums[2 * s + 1]);
            }
        }
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

/* Q2_K / Q3_K: the low two bits of the 16 elements of sub-block s (half h
 * = s / 8, shift r = s % 8 / 2, bytes (s % 2) 16 .. + 15 of the half's 32) */
static inline __attribute__((always_inline)) uint8x16_t GGML_NAME(two_bits)(const uint8_t *qs, int s) {
    const uint8x16_t b = vld1q_u8(qs + 32 * (s / 8) + 16 * (s % 2));
    const int r = s % 8 / 2;
    return vandq_u8(r == 0 ? b : r == 1 ? vshrq_n_u8(b, 2) : r == 2 ? vshrq_n_u8(b, 4) : vshrq_n_u8(b, 6),
                    vdupq_n_u8(3));
}

static inline __attribute__((always_inline)) void GGML_NAME(isum_q2_K)(int R, const kiln_block_q2_K *w,
                                                                       const kiln_block_q8_K *const *a, int32_t *is,
                                                                       int32_t *summs) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0), summs[q] = 0;
    for (int s = 0; s < 16; s++) {
        const int8x16_t c = vreinterpretq_s8_u8(GGML_NAME(two_bits)(w->qs, s));
        GGML_UNROLL
        for (int q = 0; q < R; q++) {
            tot[q] = vmlaq_n_s32(tot[q], GGML_NAME(dot16)(c, a[q]->qs + 16 * s), w->scales[s] & 0x0f);
            summs[q] += (w->scales[s] >> 4) * a[q]->bsums[s];
        }
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

static inline __attribute__((always_inline)) void GGML_NAME(isum_q3_K)(int R, const kiln_block_q3_K *w,
                                                                       const kiln_block_q8_K *const *a, int32_t *is) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0);
    const uint8x16_t h0 = vld1q_u8(w->hmask), h1 = vld1q_u8(w->hmask + 16);
    for (int s = 0; s < 16; s++) {
        const int lo = s < 8 ? w->scales[s] & 0x0f : w->scales[s - 8] >> 4;
        const int sc = (lo | ((w->scales[8 + s % 4] >> (2 * (s / 4))) & 3) << 4) - 32;
        /* bit e / 32 = s / 2 of hmask[e % 32] clear: minus 4 */
        const uint8x16_t set = vtstq_u8(s % 2 ? h1 : h0, vdupq_n_u8((uint8_t)(1u << (s / 2))));
        const int8x16_t c = vsubq_s8(vreinterpretq_s8_u8(GGML_NAME(two_bits)(w->qs, s)),
                                     vreinterpretq_s8_u8(vbicq_u8(vdupq_n_u8(4), set)));
        GGML_UNROLL
        for (int q = 0; q < R; q++) tot[q] = vmlaq_n_s32(tot[q], GGML_NAME(dot16)(c, a[q]->qs + 16 * s), sc);
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

static inline __attribute__((always_inline)) void GGML_NAME(isum_q6_K)(int R, const kiln_block_q6_K *w,
                                                                       const kiln_block_q8_K *const *a, int32_t *is) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0);
    for (int h = 0; h < 2; h++)
        for (int j = 0; j < 2; j++) { /* bytes l = 16 j .. 16 j + 15 of the half */
            const uint8x16_t l0 = vld1q_u8(w->ql + 64 * h + 16 * j), l1 = vld1q_u8(w->ql + 64 * h + 32 + 16 * j);
            const uint8x16_t hb = vld1q_u8(w->qh + 32 * h + 16 * j);
            for (int r = 0; r < 4; r++) { /* elements 128 h + 32 r + l: sub-block 8 h + 2 r + j */
                const uint8x16_t l = r & 1 ? l1 : l0;
                const uint8x16_t lo = r / 2 ? vshrq_n_u8(l, 4) : vandq_u8(l, vdupq_n_u8(0x0f));
                const uint8x16_t hi = vandq_u8(r == 0   ? hb
                                               : r == 1 ? vshrq_n_u8(hb, 2)
                                               : r == 2 ? vshrq_n_u8(hb, 4)
                                                        : vshrq_n_u8(hb, 6),
                                               vdupq_n_u8(3));
                const int8x16_t c =
                    vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32));
                const int s = 8 * h + 2 * r + j;
                GGML_UNROLL
                for (int q = 0; q < R; q++)
                    tot[q] = vmlaq_n_s32(tot[q], GGML_NAME(dot16)(c, a[q]->qs + 16 * s), w->scales[s]);
            }
        }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

static inline __attribute__((always_inline)) void GGML_NAME(isum_iq4_xs)(int R, const kiln_block_iq4_xs *w,
                                                                         const kiln_block_q8_K *const *a,
                                                                         int32_t *is) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0);
    for (int s = 0; s < 8; s++) {
        const int ls = (((w->scales_l[s / 2] >> (4 * (s % 2))) & 0x0f) | ((w->scales_h >> (2 * s)) & 3) << 4) - 32;
        int8x16_t c0, c1;
        GGML_NAME(codes32)(w->qs + 16 * s, NULL, 0, true, &c0, &c1);
        GGML_UNROLL
        for (int q = 0; q < R; q++) tot[q] = vmlaq_n_s32(tot[q], GGML_NAME(dot32)(c0, c1, a[q]->qs + 32 * s), ls);
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

static inline __attribute__((always_inline)) void GGML_NAME(isum_q8_K)(int R, const kiln_block_q8_K *w,
                                                                       const kiln_block_q8_K *const *a, int32_t *is) {
    int32x4_t tot[GGML_RMAX];
    GGML_UNROLL
    for (int q = 0; q < R; q++) tot[q] = vdupq_n_s32(0);
    for (int s = 0; s < 16; s++) {
        const int8x16_t c = vld1q_s8(w->qs + 16 * s);
        GGML_UNROLL
        for (int q = 0; q < R; q++) GGML_DOT16(tot[q], c, vld1q_s8(a[q]->qs + 16 * s));
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) is[q] = vaddvq_s32(tot[q]);
}

/* One row of W against R (1 .. KILN_QMM_ROWS_MAX) rows of x, row q's
 * blocks at xa + q xrow: per row, blocks in order into one f32 sum, or
 * (the blocks of 32) into 8 lanes while whole groups of 8 last, as the
 * reference, so out[q] is the same whatever R. */
static inline __attribute__((always_inline)) void GGML_NAME(rows)(const int R, const kiln_dtype t, const void *w,
                                                                  const void *xa, size_t xrow, int64_t nb,
                                                                  float *out) {
    const bool lanes = t == KILN_Q4_1 || t == KILN_Q5_0 || t == KILN_Q5_1 || t == KILN_IQ4_NL;
    const int64_t grouped = lanes ? nb / 8 * 8 : 0;
    float sum[GGML_RMAX] = {0}, lane[GGML_RMAX][8] = {{0}};
    for (int64_t i = 0; i < nb; i++) {
        if (i && i == grouped) {
            GGML_UNROLL
            for (int q = 0; q < R; q++) sum[q] = kiln__qmm_ggml_lanes_sum(lane[q]);
        }
        if (t == KILN_Q2_K || t == KILN_Q3_K || t == KILN_Q4_K || t == KILN_Q5_K || t == KILN_Q6_K ||
            t == KILN_Q8_K || t == KILN_IQ4_XS) {
            const kiln_block_q8_K *a[GGML_RMAX];
            int32_t is[GGML_RMAX], summs[GGML_RMAX];
            float d, dm = 0.0f;
            const bool has_min = t == KILN_Q2_K || t == KILN_Q4_K || t == KILN_Q5_K;
            GGML_UNROLL
            for (int q = 0; q < R; q++) a[q] = GGML_X(kiln_block_q8_K, xa, xrow, q, i);
            if (t == KILN_Q2_K) {
                const kiln_block_q2_K *b = (const kiln_block_q2_K *)w + i;
                GGML_NAME(isum_q2_K)(R, b, a, is, summs);
                d = GGML_NAME(f16)(b->d), dm = -GGML_NAME(f16)(b->dmin);
            } else if (t == KILN_Q3_K) {
                const kiln_block_q3_K *b = (const kiln_block_q3_K *)w + i;
                GGML_NAME(isum_q3_K)(R, b, a, is), d = GGML_NAME(f16)(b->d);
            } else if (t == KILN_Q4_K) {
                const kiln_block_q4_K *b = (const kiln_block_q4_K *)w + i;
                GGML_NAME(isum_q45_K)(R, b->scales, b->qs, NULL, a, is, summs);
                d = GGML_NAME(f16)(b->d), dm = -GGML_NAME(f16)(b->dmin);
            } else if (t == KILN_Q5_K) {
                const kiln_block_q5_K *b = (const kiln_block_q5_K *)w + i;
                GGML_NAME(isum_q45_K)(R, b->scales, b->qs, b->qh, a, is, summs);
                d = GGML_NAME(f16)(b->d), dm = -GGML_NAME(f16)(b->dmin);
            } else if (t == KILN_Q6_K) {
                const kiln_block_q6_K *b = (const kiln_block_q6_K *)w + i;
                GGML_NAME(isum_q6_K)(R, b, a, is), d = GGML_NAME(f16)(b->d);
            } else if (t == KILN_IQ4_XS) {
                const kiln_block_iq4_xs *b = (const kiln_block_iq4_xs *)w + i;
                GGML_NAME(isum_iq4_xs)(R, b, a, is), d = GGML_NAME(f16)(b->d);
            } else {
                const kiln_block_q8_K *b = (const kiln_block_q8_K *)w + i;
                GGML_NAME(isum_q8_K)(R, b, a, is), d = b->d;
            }
            GGML_UNROLL
            for (int q = 0; q < R; q++)
                sum[q] += a[q]->d * d * (float)is[q] + (has_min ? a[q]->d * dm * (float)summs[q] : 0.0f);
        } else if (t == KILN_Q4_1 || t == KILN_Q5_1) { /* Q8_1 activations: + m s */
            int8x16_t c0, c1;
            uint16_t d, m;
            if (t == KILN_Q4_1) {
                const kiln_block_q4_1 *b = (const kiln_block_q4_1 *)w + i;
                GGML_NAME(codes32)(b->qs, NULL, 0, false, &c0, &c1), d = b->d, m = b->m;
            } else {
                const kiln_block_q5_1 *b = (const kiln_block_q5_1 *)w + i;
                GGML_NAME(codes32)(b->qs, b->qh, 0, false, &c0, &c1), d = b->d, m = b->m;
            }
            GGML_UNROLL
            for (int q = 0; q < R; q++) {
                const kiln_block_q8_1 *a = GGML_X(kiln_block_q8_1, xa, xrow, q, i);
                const int32_t is = vaddvq_s32(GGML_NAME(dot32)(c0, c1, a->qs));
                const float term =
                    GGML_NAME(f16)(d) * GGML_NAME(f16)(a->d) * (float)is + GGML_NAME(f16)(m) * GGML_NAME(f16)(a->s);
                if (i < grouped) lane[q][i % 8] += term;
                else sum[q] += term;
            }
        } else { /* Q8_0 activations */
            int8x16_t c0, c1;
            uint16_t d;
            if (t == KILN_Q5_0) {
                const kiln_block_q5_0 *b = (const kiln_block_q5_0 *)w + i;
                GGML_NAME(codes32)(b->qs, b->qh, 16, false, &c0, &c1), d = b->d;
            } else if (t == KILN_IQ4_NL) {
                const kiln_block_iq4_nl *b = (const kiln_block_iq4_nl *)w + i;
                GGML_NAME(codes32)(b->qs, NULL, 0, true, &c0, &c1), d = b->d;
            } else { /* Q8_1 as weights */
                const kiln_block_q8_1 *b = (const kiln_block_q8_1 *)w + i;
                c0 = vld1q_s8(b->qs), c1 = vld1q_s8(b->qs + 16), d = b->d;
            }
            GGML_UNROLL
            for (int q = 0; q < R; q++) {
                const kiln_block_q8_0 *a = GGML_X(kiln_block_q8_0, xa, xrow, q, i);
                const int32_t is = vaddvq_s32(GGML_NAME(dot32)(c0, c1, a->qs));
                const float term = GGML_NAME(f16)(d) * GGML_NAME(f16)(a->d) * (float)is;
                if (i < grouped) lane[q][i % 8] += term;
                else sum[q] += term;
            }
        }
    }
    GGML_UNROLL
    for (int q = 0; q < R; q++) out[q] = grouped && grouped == nb ? kiln__qmm_ggml_lanes_sum(lane[q]) : sum[q];
}

/* one copy per dtype, so that the decode is a constant, and per row
 * count, so that the rows' sums are registers */
#define GGML_NEON_KERNELS(T, t)                                                                                   \
    static float GGML_NAME(t)(const void *w, const void *xa, int64_t nb) {                                        \
        float out;                                                                                                \
        GGML_NAME(rows)(1, T, w, xa, 0, nb, &out);                                                                \
        return out;                                                                                               \
    }                                                                                                             \
    static void GGML_NAME(t##_rows)(const void *w, const void *xa, size_t xrow, int rows, int64_t nb, float *out) { \
        switch (rows) {                                                                                           \
        case 1: GGML_NAME(rows)(1, T, w, xa, xrow, nb, out); break;                                               \
        case 2: GGML_NAME(rows)(2, T, w, xa, xrow, nb, out); break;                                               \
        case 3: GGML_NAME(rows)(3, T, w, xa, xrow, nb, out); break;                                               \
        default: GGML_NAME(rows)(4, T, w, xa, xrow, nb, out); break;                                              \
        }                                                                                                         \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "GGML_NEON_KERNELS' cases");
#define GGML_NEON_DTYPES(X)                                                                                    \
    X(KILN_Q4_1, q4_1) X(KILN_Q5_0, q5_0) X(KILN_Q5_1, q5_1) X(KILN_Q8_1, q8_1) X(KILN_Q2_K, q2_K) X(KILN_Q3_K, q3_K) \
    X(KILN_Q4_K, q4_K) X(KILN_Q5_K, q5_K) X(KILN_Q6_K, q6_K) X(KILN_Q8_K, q8_K) X(KILN_IQ4_NL, iq4_nl)               \
    X(KILN_IQ4_XS, iq4_xs)
GGML_NEON_DTYPES(GGML_NEON_KERNELS)
#undef GGML_NEON_KERNELS

static kiln_qmm_dot_ggml *GGML_NAME(kernel)(kiln_dtype t) {
    switch (t) {
#define GGML_CASE(T, t) \
    case T: return GGML_NAME(t);
        GGML_NEON_DTYPES(GGML_CASE)
#undef GGML_CASE
    default: return NULL;
    }
}

static kiln_qmm_dot_ggml_rows *GGML_NAME(rows_kernel)(kiln_dtype t) {
    switch (t) {
#define GGML_CASE(T, t) \
    case T: return GGML_NAME(t##_rows);
        GGML_NEON_DTYPES(GGML_CASE)
#undef GGML_CASE
    default: return NULL;
    }
}
