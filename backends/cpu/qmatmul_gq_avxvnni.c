/* qmatmul_gq_avxvnni.c — the GQ dot product with AVX-VNNI's VEX vpdpbusd
 * on ymm (qmatmul_gq.h), for CPUs that have it with or without AVX-512
 * (Alder Lake has no AVX-512, Zen 4 no AVX-VNNI). */
#include "qmatmul_gq.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define GQ_NAME(x) x##_avxvnni
#define GQ_DOT32(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_gq_x86.h"

kiln_gq_dot *kiln__gq_dot_avxvnni(void) { return dot_avxvnni; }
#else
kiln_gq_dot *kiln__gq_dot_avxvnni(void) { return NULL; }
#endif
