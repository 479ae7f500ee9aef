/* qmatmul_q32_avxvnni.c — the products of ggml's blocks of 32 with
 * AVX-VNNI's VEX vpdpbusd on ymm (qmatmul_q32_x86.h), for CPUs that have
 * it with or without AVX-512 (Alder Lake has no AVX-512, Zen 4 no
 * AVX-VNNI). */
#include "qmatmul_ggml.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define Q32_NAME(x) q32_##x##_avxvnni
#define Q32_DOT32(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_q32_x86.h"

kiln_qmm_dot_ggml *kiln__qmm_ggml_avxvnni(kiln_dtype t) { return Q32_NAME(kernel)(t); }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avxvnni(kiln_dtype t) { return Q32_NAME(rows_kernel)(t); }
#else
kiln_qmm_dot_ggml *kiln__qmm_ggml_avxvnni(kiln_dtype t) { return (void)t, NULL; }
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avxvnni(kiln_dtype t) { return (void)t, NULL; }
#endif
