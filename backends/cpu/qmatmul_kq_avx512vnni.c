/* qmatmul_kq_avx512vnni.c — the K types' and IQ4_XS's dot products with
 * AVX512-VNNI (qmatmul_kq.h): the scaled pairs summed by the EVEX
 * vpdpwssd on ymm (Zen 4 has no AVX-VNNI). */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__)
#define KQ_NAME(x) kq_##x##_avx512vnni
#define KQ_ACC(acc, p, sc) _mm256_dpwssd_epi32((acc), (p), (sc))
#include "qmatmul_kq_x86.h"

const kiln_kq_kernels *kiln__kq_kernels_avx512vnni(void) { return &KQ_NAME(kernels); }
#else
const kiln_kq_kernels *kiln__kq_kernels_avx512vnni(void) { return NULL; }
#endif
