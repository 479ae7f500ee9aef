/* qmatmul_avx2.c — AVX2 dot products of KILN_OP_QMATMUL (qmatmul.h):
 * maddubs (u8 x s8 pairs to int16; |w| <= 128 and |x| <= 127 keep each
 * pair below 2^15, so nothing saturates) then madd with ones to int32
 * lanes; NF4 decodes 8 codes at a time through the table's two halves
 * (vpermps on the low 3 bits, a blend on the fourth). */
#include "qmatmul.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define QMM_NAME(x) x##_avx2
#define QMM_DOT32(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
/* u <= 15, |x| <= 127: no maddubs saturates (pairs <= 3810), and each
 * difference is a pair of (u - 8) x (|.| <= 2032): both add in int16 */
#define QMM_Q4_DIFF16(u, x) _mm256_sub_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_maddubs_epi16(_mm256_set1_epi8(8), (x)))
#define QMM_Q4_DOT(ul, xl, uh, xh) \
    _mm256_madd_epi16(_mm256_add_epi16(QMM_Q4_DIFF16(ul, xl), QMM_Q4_DIFF16(uh, xh)), _mm256_set1_epi16(1))
#include "qmatmul_x86.h"
#include "qmatmul_quant_ymm.h"
#include "qmatmul_rows_x86.h"

#include <string.h>

/* x to Q8_0 codes in order and scales, kiln__qmm_quantize_x's bits (and
 * xs, if asked, as kiln__qmm_lane_sums) */
static void quantize_x_avx2(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    for (int64_t b = 0; b < n / 32; b++)
        _mm256_storeu_si256((__m256i *)(xq + 32 * b), kiln__qmm_quantize_block_ymm(x + 32 * b, dx + b));
    if (xs) kiln__qmm_lane_sums(xq, xs, n / 32, off);
}

/* 8 codes (4 bytes, high nibble first) as table values */
static inline __m256 nf4_8(const uint8_t *c, __m256 tlo, __m256 thi) {
    int32_t v;
    memcpy(&v, c, 4);
    const __m128i p = _mm_cvtsi32_si128(v);
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(p, 4), _mm_set1_epi8(0x0f)), lo = _mm_and_si128(p, _mm_set1_epi8(0x0f));
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(hi, lo));
    const __m256 upper = _mm256_castsi256_ps(_mm256_cmpgt_epi32(idx, _mm256_set1_epi32(7)));
    return _mm256_blendv_ps(_mm256_permutevar8x32_ps(tlo, idx), _mm256_permutevar8x32_ps(thi, idx), upper);
}

static float dot_nf4_avx2(const uint8_t *codes, int64_t code_stride, const float *absmax, int64_t absmax_stride,
                          int64_t nb, const float *x) {
    const __m256 tlo = _mm256_loadu_ps(kiln__nf4_table), thi = _mm256_loadu_ps(kiln__nf4_table + 8);
    __m256 tot = _mm256_setzero_ps();
    for (int64_t i = 0; i < nb; i++, codes += code_stride, absmax += absmax_stride, x += 64) {
        _mm_prefetch((const char *)codes + QMM_PREFETCH, _MM_HINT_T0);
        __m256 s0 = _mm256_mul_ps(_mm256_loadu_ps(x), nf4_8(codes, tlo, thi));
        __m256 s1 = _mm256_mul_ps(_mm256_loadu_ps(x + 8), nf4_8(codes + 4, tlo, thi));
        for (int g = 2; g < 8; g += 2) {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8 * g), nf4_8(codes + 4 * g, tlo, thi), s0);
            s1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + 8 * g + 8), nf4_8(codes + 4 * g + 4, tlo, thi), s1);
        }
        tot = _mm256_fmadd_ps(_mm256_add_ps(s0, s1), _mm256_set1_ps(absmax[0]), tot);
    }
    float a[8], r = 0.0f;
    _mm256_storeu_ps(a, tot);
    for (int l = 0; l < 8; l++) r += a[l];
    return r;
}

const kiln_qmm_kernels *kiln__qmm_kernels_avx2(void) {
    static const kiln_qmm_kernels k = {.q8_0 = dot_q8_0_avx2, .q4_0 = dot_q4_0_avx2, .nf4 = dot_nf4_avx2,
                                       .quantize_x = quantize_x_avx2, .q8_0sr = dotr_q8_0_avx2,
                                       .q4_0sr = dotr_q4_0_avx2};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_avx2(void) { return NULL; }
#endif
