/* qmatmul_gemm_avxvnni.c — the block-scaled int8 GEMM of qmatmul_gemm.h
 * with AVX-VNNI (qmatmul_gemm_x86.h): the VEX vpdpbusd on ymm, W's quads
 * (made unsigned) broadcast against 8 rows of x, for CPUs that have it
 * without AVX-512. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define QG_NAME(x) qg_##x##_avxvnni
#define QG_VNNI 1
#include "qmatmul_gemm_x86.h"

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avxvnni(void) { return &QG_NAME(kernels); }
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avxvnni(void) { return NULL; }
#endif
