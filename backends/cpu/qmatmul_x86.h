/* qmatmul_x86.h — the Q8_0 / Q4_0 dot products shared by qmatmul_avx2.c
 * and qmatmul_avx512vnni.c, which define QMM_DOT32(u, s): the 8 int32 lanes of
 * a block (lane l = sum of u[4l+j] * s[4l+j], u unsigned, s signed) and
 * QMM_NAME(x), the function suffix. Included once per file. */
#include "qmatmul.h"

#include "../../quant/quant.h"

#include <immintrin.h>

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

/* Blocks i, i + 1 (i even) go to lanes 8 ((i >> 1) & 1) .. + 7 (acc[0]
 * lanes 0-7, acc[1] lanes 8-15), a last odd block to the low 4 of its. */
static float QMM_NAME(dot_q4_0)(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        _mm_prefetch((const char *)(b + i) + QMM_PREFETCH, _MM_HINT_T0);
        const __m256i wa = q4_0_bytes(b + i), wb = q4_0_bytes(b + i + 1);
        const __m256i xa = _mm256_loadu_si256((const __m256i *)(xq + 32 * i)),
                      xb = _mm256_loadu_si256((const __m256i *)(xq + 32 * i + 32));
        const __m256i s = q4_0_fold2(QMM_DOT32(_mm256_sign_epi8(wa, wa), _mm256_sign_epi8(xa, wa)),
                                     QMM_DOT32(_mm256_sign_epi8(wb, wb), _mm256_sign_epi8(xb, wb)));
        const __m256 d = _mm256_set_m128(_mm_set1_ps(_cvtsh_ss(b[i + 1].d) * dx[i + 1]), _mm_set1_ps(_cvtsh_ss(b[i].d) * dx[i]));
        acc[(i >> 1) & 1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), d, acc[(i >> 1) & 1]);
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
