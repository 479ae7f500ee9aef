/* qmatmul_kgemm_avxvnni.c — the tile of the K types' integer GEMM
 * (qmatmul_kgemm.h) with AVX-VNNI: the VEX vpdpbusd and vpdpwssd on ymm,
 * for CPUs that have them with or without AVX-512. */
#include "qmatmul_kgemm.h"

#if defined(__x86_64__) && defined(__AVXVNNI__)
#define KG_NAME(x) kg_##x##_avxvnni
#define KG_DPBUSD(acc, u, x) _mm256_dpbusd_avx_epi32((acc), (u), (x))
#define KG_DPWSSD(acc, a, b) _mm256_dpwssd_avx_epi32((acc), (a), (b))
#include "qmatmul_kgemm_x86.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, KG_NAME(tile), true};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avxvnni(void) { return &kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avxvnni(void) { return NULL; }
#endif
