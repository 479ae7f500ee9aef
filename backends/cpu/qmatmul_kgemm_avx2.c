/* qmatmul_kgemm_avx2.c — the tile of the K types' integer GEMM
 * (qmatmul_kgemm.h) on AVX2: vpdpbusd as vpmaddubsw (pairs of code times x
 * in int16, exact for codes up to 128: not IQ4_XS's) and vpmaddwd by
 * ones, as the batch-1 AVX2 kernels do. */
#include "qmatmul_kgemm.h"

#if defined(__x86_64__) && defined(__AVX2__)
#define KG_NAME(x) kg_##x##_avx2
#define KG_DPBUSD(acc, u, x) \
    _mm256_add_epi32((acc), _mm256_madd_epi16(_mm256_maddubs_epi16((u), (x)), _mm256_set1_epi16(1)))
#define KG_DPWSSD(acc, a, b) _mm256_add_epi32((acc), _mm256_madd_epi16((a), (b)))
#include "qmatmul_kgemm_x86.h"

static const kiln_kgemm_kernels kernels = {kgemm_pack, KG_NAME(tile), false};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2(void) { return &kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2(void) { return NULL; }
#endif
