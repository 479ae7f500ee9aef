/* qmatmul_x86.h — the Q8_0 / Q4_0 dot products shared by qmatmul_avx2.c
 * and qmatmul_avx512vnni.c, which define QMM_DOT32(u, s): the 8 int32 lanes of
 * a block (lane l = sum of u[4l+j] * s[4l+j], u unsigned, s signed) and
 * QMM_NAME(x), the function suffix. Included once per file. */
#include "qmatmul.h"

#include "../../quant/quant.h"

#include <immintrin.h>

/* Q4_0's exact lanes sum((u - 8) x) of two blocks' nibbles u (0 .. 15)
 * against x, as sum(u x) - sum(8 x): no sign ops; a file may define it
 * where the products can share work */
#ifndef QMM_Q4_DOT
#define QMM_Q4_DOT(ul, xl, uh, xh)                                                                       \
    _mm256_sub_epi32(_mm256_add_epi32(QMM_DOT32(ul, xl), QMM_DOT32(uh, xh)),                          \
                     _mm256_add_epi32(QMM_DOT32(_mm256_set1_epi8(8), xl), QMM_DOT32(_mm256_set1_epi8(8), xh)))
#endif

/* One Q8_0 block: |w| (unsigned) against sign(x, w), fma into the lanes. */
static inline __m256 qmm_block(__m256i w, const int8_t *xq, float d, __m256 acc) {
    const __m256i x = _mm256_loadu_si256((const __m256i *)xq);
    const __m256i s = QMM_DOT32(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d), acc);
}

/* Q8_0's lanes 0-7 (acc0) and 8-15 (acc1) summed as kiln__qmm_q8_lanes_sum */
static inline float qmm_lanes(__m256 acc0, __m256 acc1) {
    const __m256 h = _mm256_add_ps(acc0, acc1);
    const __m128 q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    const __m128 p = _mm_add_ps(q, _mm_movehl_ps(q, q));
    return _mm_cvtss_f32(_mm_add_ss(p, _mm_movehdup_ps(p)));
}

static float QMM_NAME(dot_q8_0)(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q8_0 *b = w;
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        kiln__qmm_prefetch_far(b + i);
        kiln__qmm_prefetch_far((const char *)(b + i) + 64);
        acc0 = qmm_block(_mm256_loadu_si256((const __m256i *)b[i].qs), xq + 32 * i, _cvtsh_ss(b[i].d) * dx[i], acc0);
        acc1 = qmm_block(_mm256_loadu_si256((const __m256i *)b[i + 1].qs), xq + 32 * (i + 1),
                         _cvtsh_ss(b[i + 1].d) * dx[i + 1], acc1);
    }
    if (i < nb)
        acc0 = qmm_block(_mm256_loadu_si256((const __m256i *)b[i].qs), xq + 32 * i, _cvtsh_ss(b[i].d) * dx[i], acc0);
    return qmm_lanes(acc0, acc1);
}

/* Q4_0 block i as 32 signed bytes: elements 0..15 from the low nibbles,
 * 16..31 from the high ones, minus 8 */
static inline __m256i q4_0_bytes(const kiln_block_q4_0 *b) {
    const __m128i p = _mm_loadu_si128((const __m128i *)b->qs);
    const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), _mm256_set1_epi8(0x0f));
    return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

static inline float q4_lanes(__m256 acc0, __m256 acc1) {
    float a[16];
    _mm256_storeu_ps(a, acc0);
    _mm256_storeu_ps(a + 8, acc1);
    return kiln__qmm_q4_lanes_sum(a);
}

/* Two blocks' 8 + 8 lanes (elements 4l..4l+3 of each, l < 8) as Q4_0's
 * 4 + 4: lane l of a block plus its lane l + 4 (exact in int32). */
static inline __m256i q4_0_fold2(__m256i sa, __m256i sb) {
    return _mm256_add_epi32(_mm256_permute2x128_si256(sa, sb, 0x20), _mm256_permute2x128_si256(sa, sb, 0x31));
}

/* Blocks i, i + 1 packed side by side (W's 16 + 16 bytes in one ymm), as
 * unsigned bytes lo = [low nibbles of i | of i + 1] and hi likewise from
 * the high ones: against x's [i's 0..15 | i + 1's 0..15] and [16..31 |
 * 16..31], DOT32's lane l is block i's Q4_0 lane l (l < 4), then block
 * i + 1's: the lanes without q4_0_fold2's permutes. */
static inline void q4_0_pair(const kiln_block_q4_0 *b, __m256i *lo, __m256i *hi) {
    const __m256i p = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128((const __m128i *)b[0].qs)),
                                              _mm_loadu_si128((const __m128i *)b[1].qs), 1);
    const __m256i m = _mm256_set1_epi8(0x0f);
    *lo = _mm256_and_si256(p, m);
    *hi = _mm256_and_si256(_mm256_srli_epi16(p, 4), m);
}

/* q4_0_pair's 8 int32 lanes against x's two blocks at x (exact) */
static inline __m256i q4_0_pair_dot(__m256i lo, __m256i hi, const int8_t *x) {
    const __m256i xl = _mm256_loadu2_m128i((const __m128i *)(x + 32), (const __m128i *)x),
                  xh = _mm256_loadu2_m128i((const __m128i *)(x + 48), (const __m128i *)(x + 16));
    return QMM_Q4_DOT(lo, xl, hi, xh);
}

/* Blocks i .. i + 3's f16 scales as f32, one conversion */
static inline __m128 q4_0_dw4(const kiln_block_q4_0 *b) {
    __m128i h = _mm_cvtsi32_si128(b[0].d);
    h = _mm_insert_epi16(h, b[1].d, 1);
    h = _mm_insert_epi16(h, b[2].d, 2);
    h = _mm_insert_epi16(h, b[3].d, 3);
    return _mm_cvtph_ps(h);
}

/* d_w dx of blocks i .. i + 3 (one multiply, the same f32 products as
 * one by one) spread to their lanes: d01 = [d_i x 4 | d_i+1 x 4], d23 */
static inline void q4_0_d4(__m128 dw, const float *dx, __m256 *d01, __m256 *d23) {
    const __m256 d = _mm256_castps128_ps256(_mm_mul_ps(dw, _mm_loadu_ps(dx)));
    *d01 = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
    *d23 = _mm256_permutevar8x32_ps(d, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3));
}

/* Blocks i .. i + 3 (i % 4 == 0): i, i + 1 to acc[0] (lanes 0-7), i + 2,
 * i + 3 to acc[1] (8-15); then a last pair to acc[0] with its scales one by
 * one, and a last odd block to the low 4 of its pair's accumulator. */
static float QMM_NAME(dot_q4_0)(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        _mm_prefetch((const char *)(b + i) + QMM_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + 2) + QMM_PREFETCH, _MM_HINT_T0);
        __m256 d01, d23;
        q4_0_d4(q4_0_dw4(b + i), dx + i, &d01, &d23);
        __m256i l0, h0, l1, h1;
        q4_0_pair(b + i, &l0, &h0);
        q4_0_pair(b + i + 2, &l1, &h1);
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q4_0_pair_dot(l0, h0, xq + 32 * i)), d01, acc[0]);
        acc[1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q4_0_pair_dot(l1, h1, xq + 32 * i + 64)), d23, acc[1]);
    }
    if (i + 1 < nb) {
        __m256i l0, h0;
        q4_0_pair(b + i, &l0, &h0);
        const __m256 d = _mm256_set_m128(_mm_set1_ps(_cvtsh_ss(b[i + 1].d) * dx[i + 1]), _mm_set1_ps(_cvtsh_ss(b[i].d) * dx[i]));
        acc[0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q4_0_pair_dot(l0, h0, xq + 32 * i)), d, acc[0]);
        i += 2;
    }
    if (i < nb) {
        const __m256i wa = q4_0_bytes(b + i), xa = _mm256_loadu_si256((const __m256i *)(xq + 32 * i));
        const __m256i s8 = QMM_DOT32(_mm256_sign_epi8(wa, wa), _mm256_sign_epi8(xa, wa));
        const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        __m256 *a = &acc[(i >> 1) & 1];
        const __m128 lo = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(_cvtsh_ss(b[i].d) * dx[i]), _mm256_castps256_ps128(*a));
        *a = _mm256_insertf128_ps(*a, lo, 0);
    }
    return q4_lanes(acc[0], acc[1]);
}
