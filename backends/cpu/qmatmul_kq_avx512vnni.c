/* qmatmul_kq_avx512vnni.c — the K types' and IQ4_XS's dot products with
 * AVX512-VNNI (qmatmul_kq.h): Q4_K, Q5_K, Q6_K (qmatmul_kq_zmm.h) and
 * IQ4_XS two sub-blocks of 32 (or four of 16) per zmm, the scaled pairs
 * summed by the EVEX vpdpwssd (IQ4_XS: vpdpbusd on its table's values plus
 * 128); Q2_K and Q3_K on ymm from the shared body (Zen 4 has no AVX-VNNI,
 * so nothing here is VEX-encoded). The 16-entry table needs no VBMI:
 * vpshufb looks it up in every 128-bit lane. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define KQ_NAME(x) kq_##x##_avx512vnni
#define KQ_ACC(acc, p, sc) _mm256_dpwssd_epi32((acc), (p), (sc))
#define KQ_ACC512(acc, p, sc) _mm512_dpwssd_epi32((acc), (p), (sc))
#define KQ_ZMM_IQ4
#include "qmatmul_kq_zmm.h"

/* IQ4_XS: sub-blocks 2p, 2p + 1 (32 bytes of codes) as [low nibbles of
 * the first 16 | their high ones | the same of the next 16], element
 * order, through the table plus 128 in every lane (1..241, unsigned):
 * vpdpbusd against x, times the sub-block's scale (vpmulld), and 128 sc
 * times x's sums (bsums) taken off per block: exact */
static inline __attribute__((always_inline)) void iq4_xs_rows_zmm(int R, const kiln_block_iq4_xs *b, const void *xa,
                                                                  size_t xrow, int64_t nb, float *out) {
    const __m512i tabu = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values)),
                                          _mm512_set1_epi8((char)0x80));
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m256i sc = KQ_NAME(iq4_scales)(b + i);
        const __m512i scz = _mm512_castsi256_si512(sc);
        __m512i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm512_setzero_si512();
        KQ_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i u = _mm512_shuffle_epi8(tabu, kq_iq4_indices(b[i].qs + 32 * p));
            const __m512i scp =
                _mm512_permutexvar_epi32(kq_join(_mm256_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1)), scz);
            KQ_UNROLL
            for (int q = 0; q < R; q++) {
                const __m512i d = _mm512_dpbusd_epi32(_mm512_setzero_si512(), u,
                                                      _mm512_loadu_si512(KQ_XROW(xa, xrow, q, i)->qs + 64 * p));
                acc[q][p & 1] = _mm512_add_epi32(acc[q][p & 1], _mm512_mullo_epi32(d, scp));
            }
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            const kiln_block_q8_K *a = KQ_XROW(xa, xrow, q, i);
            const __m256i off = _mm256_mullo_epi32(_mm256_cvtepi16_epi32(KQ_NAME(bsums32)(a)), sc);
            sum[q] += a->d * _cvtsh_ss(b[i].d) *
                      (float)KQ_NAME(hsum)(_mm256_sub_epi32(fold(acc[q][0], acc[q][1]), _mm256_slli_epi32(off, 7)));
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(dot_iq4_xs_rows_zmm, iq4_xs_rows_zmm, w, xa, xrow, nb, out)
KQ_ONE_ROW(dot_iq4_xs_zmm, iq4_xs_rows_zmm)

static const kiln_kq_kernels kernels = {
    KQ_NAME(dot_q4_K),      KQ_NAME(dot_q5_K),      dot_q6_K_zmm,      dot_iq4_xs_zmm,
    KQ_NAME(dot_q2_K),      KQ_NAME(dot_q3_K),      KQ_NAME(quantize_q8_K), KQ_NAME(dot_q4_K_rows),
    KQ_NAME(dot_q5_K_rows), dot_q6_K_rows_zmm,      dot_iq4_xs_rows_zmm,    KQ_NAME(dot_q2_K_rows),
    KQ_NAME(dot_q3_K_rows)};

const kiln_kq_kernels *kiln__kq_kernels_avx512vnni(void) { return &kernels; }
#else
const kiln_kq_kernels *kiln__kq_kernels_avx512vnni(void) { return NULL; }
#endif
