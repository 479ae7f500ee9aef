/* qmatmul_kgemm_avx512vnni.c — the tiles of the K types' and the blocks
 * of 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) with
 * AVX512-VNNI: qmatmul_kgemm_zmm.h's zmm tiles with the EVEX vpdpbusd and
 * vpdpwssd. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#define KG_DPBUSD(acc, u, x) _mm512_dpbusd_epi32((acc), (u), (x))
#define KG_DPWSSD(acc, a, b) _mm512_dpwssd_epi32((acc), (a), (b))
#include "qmatmul_kgemm_zmm.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, tile, true, KILN_KGEMM_BLOCK},
                                q32_kernels = {q32gemm_pack, q32_tile, true, KILN_Q32GEMM_BLOCK};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return &kernels; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512vnni(void) { return &q32_kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512vnni(void) { return NULL; }
#endif
