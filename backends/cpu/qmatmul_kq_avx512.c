/* qmatmul_kq_avx512.c — the K types' and IQ4_XS's dot products on AVX-512
 * without VNNI (Skylake-X; qmatmul_kq.h): Q4_K, Q5_K and Q6_K on zmm
 * (qmatmul_kq_zmm.h) with vpdpwssd as vpmaddwd + vpaddd, and IQ4_XS on zmm
 * below; Q2_K and Q3_K on ymm from the shared body, as on AVX2. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define KQ_NAME(x) kq_##x##_avx512
#define KQ_ACC(acc, p, sc) _mm256_add_epi32((acc), _mm256_madd_epi16((p), (sc)))
#define KQ_ACC512(acc, p, sc) _mm512_add_epi32((acc), _mm512_madd_epi16((p), (sc)))
#define KQ_ZMM_IQ4
#include "qmatmul_kq_zmm.h"

/* IQ4_XS: sub-blocks 2p, 2p + 1 per zmm (kq_iq4_indices), |v| from the
 * table of magnitudes against x negated where v < 0 (the codes 0-7: a
 * masked subtract, AVX-512 having no vpsignb), by vpmaddubsw (|v|, |x| <=
 * 127: no pair saturates), times the sub-blocks' int16 scales: exact */
static inline __attribute__((always_inline)) void iq4_xs_rows_zmm(int R, const kiln_block_iq4_xs *b, const void *xa,
                                                                  size_t xrow, int64_t nb, float *out) {
    const __m512i tabs = _mm512_broadcast_i32x4(_mm_abs_epi8(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values))),
                  eight = _mm512_set1_epi8(8), zero = _mm512_setzero_si512();
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m512i sc4 = _mm512_broadcast_i64x4(KQ_NAME(iq4_scales16)(b + i));
        __m512i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = zero;
        KQ_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i idx = kq_iq4_indices(b[i].qs + 32 * p), av = _mm512_shuffle_epi8(tabs, idx),
                          scp = kq_scales2(sc4, p);
            const __mmask64 neg = _mm512_testn_epi8_mask(idx, eight);
            KQ_UNROLL
            for (int q = 0; q < R; q++) {
                const __m512i x = _mm512_loadu_si512(KQ_XROW(xa, xrow, q, i)->qs + 64 * p);
                acc[q][p & 1] =
                    KQ_ACC512(acc[q][p & 1], _mm512_maddubs_epi16(av, _mm512_mask_sub_epi8(x, neg, zero, x)), scp);
            }
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++)
            sum[q] += KQ_XROW(xa, xrow, q, i)->d * _cvtsh_ss(b[i].d) *
                      (float)KQ_NAME(hsum)(fold(acc[q][0], acc[q][1]));
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(dot_iq4_xs_rows_zmm, iq4_xs_rows_zmm, w, xa, xrow, nb, out)
KQ_ONE_ROW(dot_iq4_xs_zmm, iq4_xs_rows_zmm)

static const kiln_kq_kernels kernels = {
    KQ_NAME(dot_q4_K),      KQ_NAME(dot_q5_K),      dot_q6_K_zmm,           dot_iq4_xs_zmm,
    KQ_NAME(dot_q2_K),      KQ_NAME(dot_q3_K),      KQ_NAME(quantize_q8_K), KQ_NAME(dot_q4_K_rows),
    KQ_NAME(dot_q5_K_rows), dot_q6_K_rows_zmm,      dot_iq4_xs_rows_zmm,    KQ_NAME(dot_q2_K_rows),
    KQ_NAME(dot_q3_K_rows)};

const kiln_kq_kernels *kiln__kq_kernels_avx512(void) { return &kernels; }
#else
const kiln_kq_kernels *kiln__kq_kernels_avx512(void) { return NULL; }
#endif
