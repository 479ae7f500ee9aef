/* qmatmul_avx512.c — KILN_OP_QMATMUL's Q4_0 dot products on AVX-512
 * without VNNI (Skylake-X; qmatmul.h): four blocks (72 bytes) a step on
 * zmm, exact against the reference's lanes. One vpermt2w (the blocks'
 * codes start on even bytes) gathers the step's 64 packed bytes, block j's
 * at bytes 16 j .. 16 j + 15, so that after the nibbles are split each
 * vpmaddubsw pair and vpmaddwd quad lands on zmm lane 4 j + l: block j's
 * reference lane l, the reference's accumulator 4 (i & 3) + l. The two
 * nibbles' int16 pairs add before the vpmaddwd (at most 2 * 2 * 15 * 127),
 * and xs (-8 times the lane's x codes) undoes the unsigned nibbles. One
 * vpermw spreads the four f16 scales to their lanes for one vcvtph2ps.
 * A row's last nb % 4 blocks go through the reference's own operations.
 * Q8_0 (memory-bound: no faster on zmm) and NF4 are AVX2's kernels, a
 * lower level this file may call.
 *
 * x's layout for Q4_0, written by quantize_x: group g of 4 blocks at
 * xq + 128 g, elements 0..15 of its block j at byte 16 j, elements
 * 16..31 at byte 64 + 16 j; xs[4 i + l] = -8 times block i's lane l's 8
 * codes; the blocks past the last whole group as kiln__qmm_quantize_x
 * writes them. */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX512BW__)
#include "../../quant/quant.h"
#include "qmatmul_quant_zmm.h"

#include <immintrin.h>
#include <math.h>
#include <pthread.h>

/* vpermt2w indices: block j's codes (words 9 j + 1 .. 9 j + 8 of the
 * step, 32 on from the second load) to words 8 j ..; its scale (word 9 j)
 * to words 4 j .. 4 j + 3 */
static const uint16_t q4_codes[32] = {1,  2,  3,  4,  5,  6,  7,  8,  10, 11, 12, 13, 14, 15, 16, 17,
                                      19, 20, 21, 22, 23, 24, 25, 26, 28, 29, 30, 31, 32, 33, 34, 35};
static const uint16_t q4_scales[32] = {0, 0, 0, 0, 9, 9, 9, 9, 18, 18, 18, 18, 27, 27, 27, 27};

/* x (n values) to Q8_0 codes and scales, exact as kiln__qmm_quantize_x;
 * for Q4_0 (off 8) in the layout above with its lane sums, otherwise in
 * order (and xs, if asked, as kiln__qmm_lane_sums) */
static void quantize_x_avx512(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    const int64_t nb = n / 32, whole = off == 8 ? nb / 4 * 4 : 0;
    for (int64_t i = 0; i < nb; i++) {
        const __m256i q = kiln__qmm_quantize_block(x + 32 * i, dx + i);
        if (i >= whole) {
            _mm256_storeu_si256((__m256i *)(xq + 32 * i), q);
            continue;
        }
        int8_t *g = xq + 128 * (i / 4) + 16 * (i % 4);
        _mm_storeu_si128((__m128i *)g, _mm256_castsi256_si128(q));
        _mm_storeu_si128((__m128i *)(g + 64), _mm256_extracti128_si256(q, 1));
        const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1));
        const __m128i l = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        _mm_storeu_si128((__m128i *)(xs + 4 * i), _mm_mullo_epi32(l, _mm_set1_epi32(-8)));
    }
    if (xs && off != 8) kiln__qmm_lane_sums(xq, xs, nb, off);
}

/* Block i's lanes onto a (the reference's operations) */
static inline void q4_tail_block(const kiln_block_q4_0 *b, const int8_t *x, float d, float a[4]) {
    for (int l = 0; l < 4; l++) {
        int32_t s = 0;
        for (int j = 4 * l; j < 4 * l + 4; j++)
            s += ((b->qs[j] & 0x0f) - 8) * x[j] + ((b->qs[j] >> 4) - 8) * x[j + 16];
        a[l] = fmaf((float)s, d, a[l]);
    }
}

/* One row of W against R rows of x (row q's codes at xq + 32 nb q, lane
 * sums at xs + 8 nb q, scales at dx + nb q): W's step decoded and its
 * scales converted once, each row's operations the one-row kernel's */
static inline __attribute__((always_inline)) void q4_rows(const int R, const kiln_block_q4_0 *b, const int8_t *xq,
                                                          const int32_t *xs, const float *dx, int64_t nb,
                                                          float *out) {
    const __m512i codes = _mm512_loadu_si512(q4_codes), scales = _mm512_loadu_si512(q4_scales),
                  lo4 = _mm512_set1_epi8(0x0f), ones = _mm512_set1_epi16(1),
                  spread = _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3);
    __m512 acc[KILN_QMM_ROWS_MAX];
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        const uint8_t *p = (const uint8_t *)(b + i);
        kiln__qmm_prefetch_far_near(p);
        kiln__qmm_prefetch_far_near(p + 64);
        const __m512i z0 = _mm512_loadu_si512(p), q = _mm512_permutex2var_epi16(z0, codes, _mm512_maskz_loadu_epi16(0xf, p + 64));
        const __m512i lo = _mm512_and_si512(q, lo4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), lo4);
        const __m512 dw = _mm512_cvtph_ps(_mm512_castsi512_si256(_mm512_permutexvar_epi16(scales, z0)));
        _Pragma("GCC unroll 8")
        for (int r = 0; r < R; r++) {
            const int8_t *x = xq + 32 * nb * r + 32 * i;
            const __m512i s16 = _mm512_add_epi16(_mm512_maddubs_epi16(lo, _mm512_loadu_si512(x)),
                                                 _mm512_maddubs_epi16(hi, _mm512_loadu_si512(x + 64)));
            const __m512i s = _mm512_add_epi32(_mm512_madd_epi16(s16, ones), _mm512_loadu_si512(xs + 8 * nb * r + 4 * i));
            const __m512 d = _mm512_mul_ps(dw, _mm512_permutexvar_ps(spread, _mm512_castps128_ps512(_mm_loadu_ps(dx + nb * r + i))));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), d, acc[r]);
        }
    }
    _Pragma("GCC unroll 8")
    for (int r = 0; r < R; r++) {
        float a[16];
        _mm512_storeu_ps(a, acc[r]);
        for (int64_t t = i; t < nb; t++)
            q4_tail_block(b + t, xq + 32 * nb * r + 32 * t, _cvtsh_ss(b[t].d) * dx[nb * r + t], a + 4 * (t & 3));
        out[r] = kiln__qmm_q4_lanes_sum(a);
    }
}

static float dot_q4_0s_avx512(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb) {
    float out;
    q4_rows(1, w, xq, xs, dx, nb, &out);
    return out;
}

static void dotr_q4_0s_avx512(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb,
                              int rows, float *out) {
    switch (rows) {
    case 1: q4_rows(1, w, xq, xs, dx, nb, out); break;
    case 2: q4_rows(2, w, xq, xs, dx, nb, out); break;
    case 3: q4_rows(3, w, xq, xs, dx, nb, out); break;
    default: q4_rows(4, w, xq, xs, dx, nb, out); break;
    }
}
_Static_assert(KILN_QMM_ROWS_MAX == 4, "dotr_q4_0s_avx512's cases");

static kiln_qmm_kernels avx512;

static void avx512_init(void) {
    const kiln_qmm_kernels *k = kiln__qmm_kernels_avx2();
    if (!k) return;
    avx512 = (kiln_qmm_kernels){.q8_0 = k->q8_0, .q4_0 = k->q4_0, .nf4 = k->nf4, .q4_0s = dot_q4_0s_avx512,
                                .quantize_x = quantize_x_avx512, .q8_0sr = k->q8_0sr, .q4_0sr = dotr_q4_0s_avx512};
}

const kiln_qmm_kernels *kiln__qmm_kernels_avx512(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, avx512_init);
    return avx512.q8_0 ? &avx512 : NULL;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_avx512(void) { return NULL; }
#endif
