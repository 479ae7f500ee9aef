/* qmatmul_kq_avxvnni.c — the K types' and IQ4_XS's dot products with
 * AVX-VNNI (qmatmul_kq.h): the scaled pairs summed by the VEX vpdpwssd,
 * for CPUs that have it with or without AVX-512. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define KQ_NAME(x) kq_##x##_avxvnni
#define KQ_ACC(acc, p, sc) _mm256_dpwssd_avx_epi32((acc), (p), (sc))
#include "qmatmul_kq_x86.h"

const kiln_kq_kernels *kiln__kq_kernels_avxvnni(void) { return &KQ_NAME(kernels); }
#else
const kiln_kq_kernels *kiln__kq_kernels_avxvnni(void) { return NULL; }
#endif
