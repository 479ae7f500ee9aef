/* qmatmul_q32_x86.h — the batch-1 products of ggml's blocks of 32 (Q4_1,
 * Q5_0, Q5_1, IQ4_NL; qmatmul_ggml.h) on x86, shared by
 * qmatmul_q32_avx2.c, _avxvnni.c and _avx512vnni.c, which define
 * Q32_DOT32(u, s) (8 int32 lanes, lane l = sum of u[4l+j] s[4l+j], u
 * unsigned, s signed) and Q32_NAME(x), the function suffix.
 *
 * Each block's 32 codes are decoded in a ymm (element j in byte j), dotted
 * with x's codes into 8 exact int32 lanes, and eight blocks' lanes are
 * summed into one lane per block (hadd, then the halves: exact). The f32
 * side follows the reference (kiln__qmm_dot_ggml_ref) lane by lane,
 * (d_w d_x) isum [+ m s], each group's terms added to 8 f32 lanes, the
 * lanes summed as kiln__qmm_ggml_lanes_sum and the leftover blocks after
 * in order, so every result is the reference's bit for bit. The rows
 * kernels (qmatmul_ggml.h: a few rows of x against one row of W) are the
 * same body with each block decoded once for all the rows; the one-row
 * kernel is that body with one row. */
#include "qmatmul_ggml.h"

#include "../../quant/quant.h"
#include "qmatmul.h"

#include <immintrin.h>
#include <stddef.h>

/* the loops over blocks and rows unrolled: the steps' choices constants,
 * the rows' accumulators registers */
#define Q32_UNROLL _Pragma("GCC unroll 8")

/* element j (low nibble of byte j) and j + 16 (its high nibble) */
static inline __attribute__((always_inline)) __m256i Q32_NAME(nibbles)(const uint8_t *qs) {
    const __m128i b = _mm_loadu_si128((const __m128i *)qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), _mm256_set1_epi8(0x0f));
}

/* bit j of the little-endian u32 at qh as 0x10 in byte j */
static inline __attribute__((always_inline)) __m256i Q32_NAME(fifth)(const uint8_t *qh) {
    uint32_t h;
    memcpy(&h, qh, 4);
    const __m256i spread = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
    const __m256i bit = _mm256_set1_epi64x((int64_t)0x8040201008040201);
    const __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)h), spread), bit);
    return _mm256_and_si256(_mm256_cmpeq_epi8(v, bit), _mm256_set1_epi8(0x10));
}

/* One block's codes, decoded once for every row of x: unsigned ones (u,
 * Q4_1 / Q5_1, < 32) go onto x straight; signed ones (Q5_0, IQ4_NL,
 * |q| <= 127) as |q| (u) onto x with q's sign (s). */
typedef struct Q32_NAME(codes) {
    __m256i u, s;
} Q32_NAME(codes);

static inline __attribute__((always_inline)) Q32_NAME(codes) Q32_NAME(decode)(kiln_dtype t, const uint8_t *w) {
    Q32_NAME(codes) c = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    switch (t) {
    case KILN_Q4_1: c.u = Q32_NAME(nibbles)(((const kiln_block_q4_1 *)w)->qs); return c;
    case KILN_Q5_1: {
        const kiln_block_q5_1 *b = (const kiln_block_q5_1 *)w;
        c.u = _mm256_or_si256(Q32_NAME(nibbles)(b->qs), Q32_NAME(fifth)(b->qh));
        return c;
    }
    case KILN_Q5_0: {
        const kiln_block_q5_0 *b = (const kiln_block_q5_0 *)w;
        c.s = _mm256_sub_epi8(_mm256_or_si256(Q32_NAME(nibbles)(b->qs), Q32_NAME(fifth)(b->qh)), _mm256_set1_epi8(16));
        break;
    }
    default: { /* IQ4_NL: the nibble picks one of the 16 values */
        const __m256i values = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values));
        c.s = _mm256_shuffle_epi8(values, Q32_NAME(nibbles)(((const kiln_block_iq4_nl *)w)->qs));
        break;
    }
    }
    c.u = _mm256_sign_epi8(c.s, c.s);
    return c;
}

/* the 8 lanes of a decoded block against x's 32 codes */
static inline __attribute__((always_inline)) __m256i Q32_NAME(lanes)(kiln_dtype t, Q32_NAME(codes) c,
                                                                        const int8_t *xq) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    return t == KILN_Q4_1 || t == KILN_Q5_1 ? Q32_DOT32(c.u, x) : Q32_DOT32(c.u, _mm256_sign_epi8(x, c.s));
}

static inline __attribute__((always_inline)) int32_t Q32_NAME(sum1)(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_hadd_epi32(s, s);
    return _mm_cvtsi128_si32(_mm_hadd_epi32(s, s));
}

/* the f16 at p (Q4_1 / Q5_1 blocks and Q8_1's: d at 0, m or s at 2) */
static inline __attribute__((always_inline)) float Q32_NAME(f16)(const uint8_t *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* the u32 at p */
static inline __attribute__((always_inline)) int32_t Q32_NAME(u32)(const uint8_t *p) {
    int32_t u;
    memcpy(&u, p, 4);
    return u;
}

/* the first 4 bytes of eight records step bytes apart, as eight u32 lanes
 * (scalar loads inserted, not vpgatherdd: qemu's Haswell model, which the
 * avx2-cpu test stage runs, got the gather of Q5_1's 24-byte blocks
 * wrong; nor 8 stores and a 32-byte load, which the compiler made of
 * _mm256_setr_epi32 and which stalled on the store forwarding: the
 * one-row kernels of Q4_1 and Q5_1 took 1.7x the time of two rows) */
static inline __attribute__((always_inline)) __m256i Q32_NAME(heads)(const uint8_t *p, size_t step) {
#define Q32_HEAD(b) Q32_NAME(u32)(p + (b) * step)
    __m128i lo = _mm_cvtsi32_si128(Q32_HEAD(0)), hi = _mm_cvtsi32_si128(Q32_HEAD(4));
    lo = _mm_insert_epi32(_mm_insert_epi32(_mm_insert_epi32(lo, Q32_HEAD(1), 1), Q32_HEAD(2), 2), Q32_HEAD(3), 3);
    hi = _mm_insert_epi32(_mm_insert_epi32(_mm_insert_epi32(hi, Q32_HEAD(5), 1), Q32_HEAD(6), 2), Q32_HEAD(7), 3);
#undef Q32_HEAD
    return _mm256_set_m128i(hi, lo);
}

/* eight u32 lanes' low and high halves as f16 to f32 */
static inline __attribute__((always_inline)) void Q32_NAME(halves)(__m256i g, __m256 *lo, __m256 *hi) {
    const __m256i p = _mm256_permute4x64_epi64(
        _mm256_packus_epi32(_mm256_and_si256(g, _mm256_set1_epi32(0xffff)), _mm256_srli_epi32(g, 16)), 0xd8);
    *lo = _mm256_cvtph_ps(_mm256_castsi256_si128(p));
    *hi = _mm256_cvtph_ps(_mm256_extracti128_si256(p, 1));
}

static inline __attribute__((always_inline)) size_t Q32_NAME(size)(kiln_dtype t) {
    return t == KILN_Q4_1 ? sizeof(kiln_block_q4_1) : t == KILN_Q5_0 ? sizeof(kiln_block_q5_0)
         : t == KILN_Q5_1 ? sizeof(kiln_block_q5_1) : sizeof(kiln_block_iq4_nl);
}

#define Q32_RMAX KILN_QMM_ROWS_MAX

/* One row of W against R (1 .. KILN_QMM_ROWS_MAX) rows of x, row q's
 * blocks at xa + q xrow. Each block of W is decoded once; row q's eight
 * blocks' lanes go to one lane per block as they come (hadd pairs, pairs
 * of pairs, then the 128-bit halves: exact in int32), and its f32
 * operations are the reference's, into its own acc, so out[q] is the
 * same whatever R. */
static inline __attribute__((always_inline)) void Q32_NAME(rows)(int R, const kiln_dtype t, const uint8_t *w,
                                                                    const uint8_t *xa, size_t xrow, int64_t nb,
                                                                    float *out) {
    const bool q81 = t == KILN_Q4_1 || t == KILN_Q5_1; /* Q8_1 activations */
    const size_t wsz = Q32_NAME(size)(t), xsz = q81 ? sizeof(kiln_block_q8_1) : sizeof(kiln_block_q8_0);
    const size_t xqs = q81 ? offsetof(kiln_block_q8_1, qs) : offsetof(kiln_block_q8_0, qs);
    __m256 acc[Q32_RMAX];
    float sum[Q32_RMAX];
    Q32_UNROLL
    for (int q = 0; q < R; q++) acc[q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= nb; i += 8) {
        const uint8_t *w8 = w + (size_t)i * wsz, *x8 = xa + (size_t)i * xsz;
        for (size_t l = 0; l < 8 * wsz; l += 64) _mm_prefetch((const char *)w8 + QMM_PREFETCH + l, _MM_HINT_T0);
        __m256i v1[Q32_RMAX], v2[Q32_RMAX], v4[Q32_RMAX], v8[Q32_RMAX];
        Q32_UNROLL
        for (int b = 0; b < 8; b++) {
            const Q32_NAME(codes) c = Q32_NAME(decode)(t, w8 + b * wsz);
            Q32_UNROLL
            for (int q = 0; q < R; q++) {
                const __m256i v = Q32_NAME(lanes)(t, c, (const int8_t *)(x8 + q * xrow + b * xsz + xqs));
                if (!(b & 1)) {
                    v1[q] = v;
                    continue;
                }
                const __m256i h = _mm256_hadd_epi32(v1[q], v); /* blocks b - 1, b */
                if (!(b & 2)) {
                    v2[q] = h;
                    continue;
                }
                const __m256i g = _mm256_hadd_epi32(v2[q], h); /* blocks b - 3 .. b */
                if (b < 4) v4[q] = g;
                else /* lane b: block b's sum */
                    v8[q] = _mm256_add_epi32(_mm256_permute2x128_si256(v4[q], g, 0x20),
                                             _mm256_permute2x128_si256(v4[q], g, 0x31));
            }
        }
        __m256 dw, mw;
        /* the first 4 bytes of eight blocks: d and m (Q4_1 / Q5_1) or s (Q8_1) */
        Q32_NAME(halves)(Q32_NAME(heads)(w8, wsz), &dw, &mw);
        Q32_UNROLL
        for (int q = 0; q < R; q++) {
            __m256 dx, sx;
            Q32_NAME(halves)(Q32_NAME(heads)(x8 + q * xrow, xsz), &dx, &sx);
            __m256 c = _mm256_mul_ps(_mm256_mul_ps(dw, dx), _mm256_cvtepi32_ps(v8[q]));
            if (q81) c = _mm256_add_ps(c, _mm256_mul_ps(mw, sx));
            acc[q] = _mm256_add_ps(acc[q], c);
        }
    }
    Q32_UNROLL
    for (int q = 0; q < R; q++) { /* ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)) */
        __m128 h = _mm_add_ps(_mm256_castps256_ps128(acc[q]), _mm256_extractf128_ps(acc[q], 1));
        h = _mm_add_ps(h, _mm_movehl_ps(h, h));
        sum[q] = _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 1)));
    }
    for (; i < nb; i++) {
        const uint8_t *wb = w + (size_t)i * wsz;
        const Q32_NAME(codes) c = Q32_NAME(decode)(t, wb);
        Q32_UNROLL
        for (int q = 0; q < R; q++) {
            const uint8_t *xb = xa + q * xrow + (size_t)i * xsz;
            const float is = (float)Q32_NAME(sum1)(Q32_NAME(lanes)(t, c, (const int8_t *)(xb + xqs)));
            if (q81)
                sum[q] += Q32_NAME(f16)(wb) * Q32_NAME(f16)(xb) * is + Q32_NAME(f16)(wb + 2) * Q32_NAME(f16)(xb + 2);
            else sum[q] += Q32_NAME(f16)(wb) * Q32_NAME(f16)(xb) * is;
        }
    }
    Q32_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}

/* one copy per dtype, so that the decode is a constant, and per row
 * count, so that the rows' accumulators are registers */
#define Q32_KERNELS(t, T)                                                                                   \
    static float Q32_NAME(t)(const void *w, const void *xa, int64_t nb) {                                     \
        float out;                                                                                          \
        Q32_NAME(rows)(1, T, w, xa, 0, nb, &out);                                                           \
        return out;                                                                                         \
    }                                                                                                       \
    static void Q32_NAME(t##_rows)(const void *w, const void *xa, size_t xrow, int rows, int64_t nb, float *out) { \
        switch (rows) {                                                                                     \
        case 1: Q32_NAME(rows)(1, T, w, xa, xrow, nb, out); break;                                          \
        case 2: Q32_NAME(rows)(2, T, w, xa, xrow, nb, out); break;                                          \
        case 3: Q32_NAME(rows)(3, T, w, xa, xrow, nb, out); break;                                          \
        default: Q32_NAME(rows)(4, T, w, xa, xrow, nb, out); break;                                         \
        }                                                                                                   \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "Q32_KERNELS' cases");
Q32_KERNELS(q4_1, KILN_Q4_1)
Q32_KERNELS(q5_0, KILN_Q5_0)
Q32_KERNELS(q5_1, KILN_Q5_1)
Q32_KERNELS(iq4_nl, KILN_IQ4_NL)

static kiln_qmm_dot_ggml *Q32_NAME(kernel)(kiln_dtype t) {
    switch (t) {
    case KILN_Q4_1: return Q32_NAME(q4_1);
    case KILN_Q5_0: return Q32_NAME(q5_0);
    case KILN_Q5_1: return Q32_NAME(q5_1);
    case KILN_IQ4_NL: return Q32_NAME(iq4_nl);
    default: return NULL;
    }
}

static kiln_qmm_dot_ggml_rows *Q32_NAME(rows_kernel)(kiln_dtype t) {
    switch (t) {
    case KILN_Q4_1: return Q32_NAME(q4_1_rows);
    case KILN_Q5_0: return Q32_NAME(q5_0_rows);
    case KILN_Q5_1: return Q32_NAME(q5_1_rows);
    case KILN_IQ4_NL: return Q32_NAME(iq4_nl_rows);
    default: return NULL;
    }
}
