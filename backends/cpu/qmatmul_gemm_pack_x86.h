/* qmatmul_gemm_pack_x86.h — W's panel of the block-scaled int8 GEMM
 * (qmatmul_gemm.h) on x86 and the tiles' 4-byte load from it, shared by
 * qmatmul_gemm_avx512vnni.c, qmatmul_gemm_avx512.c and qmatmul_gemm_x86.h
 * (AVX2, AVX-VNNI), which define QG_NAME(x) (the function suffix),
 * QG_Q8_OFF (Q8_0's off: 128 or 0) and QG_Q8_SPLIT (0: one plane; 1: w
 * and |w|; 2: the high and low nibbles of w + 128: the planes of
 * qmatmul_gemm.h's q8_split). Included once per file, built
 * with its flags. */
#include "qmatmul_gemm.h"

#include "../../quant/quant.h"

#include <immintrin.h>
#include <string.h>

/* a quad of the panel as one int32, to broadcast */
static inline int32_t QG_NAME(load32)(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* W's columns as the tile reads them: Q4_0's nibbles (w + 8), Q8_0's
 * w + QG_Q8_OFF or QG_Q8_SPLIT's planes, in element order; the scales as
 * f32 */
static void QG_NAME(pack_w)(kiln_dtype t, const void *w, int64_t cols, int64_t nc, int64_t nb, uint8_t *wp,
                            float *dw) {
    const __m256i flip = _mm256_set1_epi8((char)(QG_Q8_OFF ? 0x80 : 0)), lo4 = _mm256_set1_epi8(0x0f);
    for (int64_t c = 0; c < cols; c++) {
        uint8_t *o = wp + c * nb * 32;
        if (t == KILN_Q8_0) {
            const kiln_block_q8_0 *b = (const kiln_block_q8_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                const __m256i q = _mm256_loadu_si256((const __m256i *)b[i].qs), u = _mm256_xor_si256(q, flip);
                __m256i *second = (__m256i *)(o + KILN_QMM_GEMM_NU * nb * 32 + 32 * i);
                if (QG_Q8_SPLIT == 2) {
                    _mm256_storeu_si256((__m256i *)(o + 32 * i), _mm256_and_si256(_mm256_srli_epi16(u, 4), lo4));
                    _mm256_storeu_si256(second, _mm256_and_si256(u, lo4));
                } else {
                    _mm256_storeu_si256((__m256i *)(o + 32 * i), u);
                    if (QG_Q8_SPLIT) _mm256_storeu_si256(second, _mm256_abs_epi8(q));
                }
                dw[c * nb + i] = _cvtsh_ss(b[i].d);
            }
        } else {
            const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                const __m128i p = _mm_loadu_si128((const __m128i *)b[i].qs);
                _mm256_storeu_si256((__m256i *)(o + 32 * i),
                                    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), lo4));
                dw[c * nb + i] = _cvtsh_ss(b[i].d);
            }
        }
    }
    for (int64_t c = cols; c < nc; c++) {
        memset(wp + c * nb * 32, 0, (size_t)(nb * 32));
        if (QG_Q8_SPLIT && t == KILN_Q8_0) memset(wp + (KILN_QMM_GEMM_NU + c) * nb * 32, 0, (size_t)(nb * 32));
        memset(dw + c * nb, 0, (size_t)nb * sizeof(float));
    }
}
