/* qmatmul_kgemm_avx2.c — the tiles of the K types' and the blocks of 32's
 * integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) on AVX2: vpdpbusd as
 * vpmaddubsw (pairs of code times x in int16, exact for codes up to 128:
 * not IQ4_NL's; IQ4_XS's by a tile of its own, its codes signed) and
 * vpmaddwd (qmatmul_kgemm_x86.h). */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define KG_NAME(x) kg_##x##_avx2
#define KG_DPBUSD(acc, u, x) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1)))
#define KG_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#define KG_PAIRS16 1
#include "qmatmul_kgemm_x86.h"
#include "qmatmul_q32gemm_x86.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, KG_NAME(tile), false, KILN_KGEMM_BLOCK},
                                iq4xs_kernels = {kgemm_pack, KG_NAME(tile_iq4xs), true, KILN_KGEMM_BLOCK},
                                q32_kernels = {q32gemm_pack, KG_NAME(q32_tile), false, KILN_Q32GEMM_BLOCK};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2(void) { return &kernels; }
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2_iq4xs(void) { return &iq4xs_kernels; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx2(void) { return &q32_kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2(void) { return NULL; }
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2_iq4xs(void) { return NULL; }
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx2(void) { return NULL; }
#endif
