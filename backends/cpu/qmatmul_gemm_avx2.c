/* qmatmul_gemm_avx2.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AVX2 (qmatmul_gemm_x86.h): W's quads broadcast against 8 rows of x,
 * pairs of products by vpmaddubsw, to int32 by vpmaddwd. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define QG_NAME(x) qg_##x##_avx2
#define QG_VNNI 0
#include "qmatmul_gemm_x86.h"

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx2(void) { return &QG_NAME(kernels); }
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx2(void) { return NULL; }
#endif
