/* qmatmul_kq_avx2.c — the K types' and IQ4_XS's dot products on AVX2
 * (qmatmul_kq.h): maddubs to int16 pairs, madd with the scales. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define KQ_NAME(x) kq_##x##_avx2
#define KQ_ACC(acc, p, sc) _mm256_add_epi32((acc), _mm256_madd_epi16((p), (sc)))
#include "qmatmul_kq_x86.h"

const kiln_kq_kernels *kiln__kq_kernels_avx2(void) { return &KQ_NAME(kernels); }
#else
const kiln_kq_kernels *kiln__kq_kernels_avx2(void) { return NULL; }
#endif
