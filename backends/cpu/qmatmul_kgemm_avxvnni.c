/* qmatmul_kgemm_avxvnni.c — the tiles of the K types' and the blocks of
 * 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) with AVX-VNNI: the VEX vpdpbusd and vpdpwssd on ymm,
 * for CPUs that have them with or without AVX-512. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define KG_NAME(x) kg_##x##_avxvnni
#define KG_DPBUSD(acc, u, x) _mm256_dpbusd_avx_epi32((acc), (u), (x))
#define KG_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#define KG_PAIRS16 0
#include "qmatmul_kgemm_x86.h"
#include "qmatmul_q32gemm_x86.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, KG_NAME(tile), true, KILN_KGEMM_BLOCK},
                                q32_kernels = {q32gemm_pack, KG_NAME(q32_tile), true, KILN_Q32GEMM_BLOCK};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avxvnni(void) { return &kernels; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avxvnni(void) { return &q32_kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avxvnni(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avxvnni(void) { return NULL; }
#endif
