/* qmatmul_q32_avx512vnni.c — the products of ggml's blocks of 32 with
 * AVX512-VNNI's EVEX vpdpbusd on ymm (qmatmul_q32_x86.h). */
#include "qmatmul_ggml.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define Q32_NAME(x) q32_##x##_avx512vnni
#define Q32_DOT32(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_q32_x86.h"

kiln_qmm_dot_ggml *kiln__qmm_ggml_avx512vnni(kiln_dtype t) { return Q32_NAME(kernel)(t); }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx512vnni(kiln_dtype t) { return Q32_NAME(rows_kernel)(t); }
#else
kiln_qmm_dot_ggml *kiln__qmm_ggml_avx512vnni(kiln_dtype t) { return (void)t, NULL; }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx512vnni(kiln_dtype t) { return (void)t, NULL; }
#endif
