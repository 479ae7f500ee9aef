/* qmatmul_q32_avx2.c — the products of ggml's blocks of 32 on AVX2
 * (qmatmul_q32_x86.h): maddubs (u8 x s8 pairs to int16; |w| <= 127 and
 * |x| <= 127 never saturate a pair), then madd with ones to int32 lanes. */
#include "qmatmul_ggml.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define Q32_NAME(x) q32_##x##_avx2
#define Q32_DOT32(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "qmatmul_q32_x86.h"

kiln_qmm_dot_ggml *kiln__qmm_ggml_avx2(kiln_dtype t) { return Q32_NAME(kernel)(t); }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx2(kiln_dtype t) { return Q32_NAME(rows_kernel)(t); }
#else
kiln_qmm_dot_ggml *kiln__qmm_ggml_avx2(kiln_dtype t) { return (void)t, NULL; }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx2(kiln_dtype t) { return (void)t, NULL; }
#endif
