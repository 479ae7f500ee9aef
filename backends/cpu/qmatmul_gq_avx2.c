/* qmatmul_gq_avx2.c — the GQ dot product on AVX2 (qmatmul_gq.h): maddubs
 * (u8 x s8 pairs to int16; |w| <= 15 and |x| <= 127 never saturate), then
 * madd with ones to int32 lanes. */
#include "qmatmul_gq.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define GQ_NAME(x) x##_avx2
#define GQ_DOT32(u, s) _mm256_madd_epi16(_mm256_maddubs_epi16((u), (s)), _mm256_set1_epi16(1))
#include "qmatmul_gq_x86.h"

kiln_gq_dot *kiln__gq_dot_avx2(void) { return dot_avx2; }
#else
kiln_gq_dot *kiln__gq_dot_avx2(void) { return NULL; }
#endif
