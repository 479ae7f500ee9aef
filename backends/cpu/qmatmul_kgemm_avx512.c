/* qmatmul_kgemm_avx512.c — the tiles of the K types' and the blocks of
 * 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) on AVX-512
 * without VNNI (Skylake-X): qmatmul_kgemm_zmm.h's zmm tiles with vpdpbusd
 * as vpmaddubsw + vpmaddwd by ones and vpdpwssd as vpmaddwd + vpaddd, as
 * AVX2's ymm tiles do (exact for codes up to 128: not IQ4_XS's or
 * IQ4_NL's, which keep the f32 panels here). */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__x86_64__) && defined(__AVX512BW__)
#define KG_DPBUSD(acc, u, x) \
    _mm512_add_epi32((acc), _mm512_madd_epi16(_mm512_maddubs_epi16((u), (x)), _mm512_set1_epi16(1)))
#define KG_DPWSSD(acc, a, b) _mm512_add_epi32((acc), _mm512_madd_epi16((a), (b)))
#include "qmatmul_kgemm_zmm.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, tile, false, KILN_KGEMM_BLOCK},
                                q32_kernels = {q32gemm_pack, q32_tile, false, KILN_Q32GEMM_BLOCK};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512(void) { return &kernels; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512(void) { return &q32_kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512(void) { return NULL; }
#endif
