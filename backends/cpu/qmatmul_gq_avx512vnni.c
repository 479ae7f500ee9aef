/* qmatmul_gq_avx512vnni.c — the GQ dot product with AVX512-VNNI's EVEX
 * vpdpbusd on ymm (qmatmul_gq.h). */
#include "qmatmul_gq.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define GQ_NAME(x) x##_avx512vnni
#define GQ_DOT32(u, s) _mm256_dpbusd_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_gq_x86.h"

kiln_gq_dot *kiln__gq_dot_avx512vnni(void) { return dot_avx512vnni; }
#else
kiln_gq_dot *kiln__gq_dot_avx512vnni(void) { return NULL; }
#endif
