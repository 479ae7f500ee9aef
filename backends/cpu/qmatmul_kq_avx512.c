/* qmatmul_kq_avx512.c — the K types' and IQ4_XS's dot products on AVX-512
 * without VNNI (Skylake-X; qmatmul_kq.h): Q4_K, Q5_K and Q6_K on zmm
 * (qmatmul_kq_zmm.h) with vpdpwssd as vpmaddwd + vpaddd; Q2_K, Q3_K and
 * IQ4_XS on ymm from the shared body, as on AVX2. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define KQ_NAME(x) kq_##x##_avx512
#define KQ_ACC(acc, p, sc) _mm256_add_epi32((acc), _mm256_madd_epi16((p), (sc)))
#define KQ_ACC512(acc, p, sc) _mm512_add_epi32((acc), _mm512_madd_epi16((p), (sc)))
#include "qmatmul_kq_zmm.h"

static const kiln_kq_kernels kernels = {
    KQ_NAME(dot_q4_K),      KQ_NAME(dot_q5_K),      dot_q6_K_zmm,              KQ_NAME(dot_iq4_xs),
    KQ_NAME(dot_q2_K),      KQ_NAME(dot_q3_K),      KQ_NAME(quantize_q8_K),    KQ_NAME(dot_q4_K_rows),
    KQ_NAME(dot_q5_K_rows), dot_q6_K_rows_zmm,      KQ_NAME(dot_iq4_xs_rows), KQ_NAME(dot_q2_K_rows),
    KQ_NAME(dot_q3_K_rows)};

const kiln_kq_kernels *kiln__kq_kernels_avx512(void) { return &kernels; }
#else
const kiln_kq_kernels *kiln__kq_kernels_avx512(void) { return NULL; }
#endif
