/* qmatmul_gq_avx2.c — the GQ dot product on AVX2 (qmatmul_gq.h): maddubs
 * (u8 x s8 pairs to int16; |w| <= 15 and |x| <= 127 never saturate), then
 * madd with ones to int32 lanes; and the same with AVX-VNNI's VEX vpdpbusd
 * (target attribute), built here with AVX2 flags only so that nothing in
 * it needs AVX-512 (see gemm_i8_avxvnni_avx2.c). */
#include "qmatmul_gq.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define GQ_TARGET
#define GQ_NAME(x) x##_avx2
#define GQ_DOT32(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "qmatmul_gq_x86.h"
#undef GQ_TARGET
#undef GQ_NAME
#undef GQ_DOT32
#define GQ_TARGET __attribute__((target("avxvnni")))
#define GQ_NAME(x) x##_avxvnni
#define GQ_DOT32(u, s) _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), (u), (s))
#include "qmatmul_gq_x86.h"

kiln_gq_dot *kiln__gq_dot_avx2(void) { return dot_avx2; }
kiln_gq_dot *kiln__gq_dot_avxvnni(void) { return dot_avxvnni; }
#else
kiln_gq_dot *kiln__gq_dot_avx2(void) { return NULL; }
kiln_gq_dot *kiln__gq_dot_avxvnni(void) { return NULL; }
#endif
