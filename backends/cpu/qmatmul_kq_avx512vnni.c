/* qmatmul_kq_avx512vnni.c — the K types' and IQ4_XS's dot products with
 * AVX512-VNNI (qmatmul_kq.h): Q4_K, Q5_K, Q6_K and IQ4_XS two sub-blocks
 * of 32 (or four of 16) per zmm, the scaled pairs summed by the EVEX
 * vpdpwssd (IQ4_XS: vpdpbusd on its table's values plus 128); Q2_K and
 * Q3_K on ymm from the shared body (Zen 4 has no AVX-VNNI, so nothing here
 * is VEX-encoded). The 16-entry table needs no VBMI: vpshufb looks it up
 * in every 128-bit lane. */
#include "qmatmul_kq.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512VL__) && defined(__AVX512BW__)
#define KQ_NAME(x) kq_##x##_avx512vnni
#define KQ_ACC(acc, p, sc) _mm256_dpwssd_epi32((acc), (p), (sc))
#define KQ_ZMM
#include "qmatmul_kq_x86.h"

/* the two accumulators of a block folded to 8 int32 lanes (exact) */
static inline __m256i fold(__m512i a0, __m512i a1) {
    const __m512i a = _mm512_add_epi32(a0, a1);
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/* [lo | hi]: a ymm and another as one zmm */
static inline __m512i join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* Q4_K / Q5_K's chunk j (sub-blocks 2j, 2j + 1: the low and high nibbles
 * of 32 bytes) against x's 64 bytes in order, scaled by sc[2j], sc[2j + 1]
 * (sc4: the 8 int16 scales in every 128-bit lane) */
static inline __m512i k45_chunk(__m512i acc, __m512i u, const int8_t *x, __m512i sc4, int j) {
    const __m512i pick = join(_mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j))),
                              _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1))));
    return _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(u, _mm512_loadu_si512(x)), _mm512_shuffle_epi8(sc4, pick));
}

static inline __m512i nibbles(const uint8_t *qs, __m512i m4) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    return _mm512_and_si512(join(q, _mm256_srli_epi16(q, 4)), m4);
}

/* Q6_K's q + 32 of half h: ql's 64 bytes as one zmm give elements 0-63
 * (low nibbles, u[0]) and 64-127 (high ones, u[1]), the two bits from
 * qh's 32 bytes in both halves shifted per half */
static inline void q6_codes_zmm(const kiln_block_q6_K *b, int h, __m512i u[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    const __m512i up = join(_mm256_set1_epi16(4), _mm256_set1_epi16(2)),
                  down = join(_mm256_setzero_si256(), _mm256_set1_epi16(2));
    const __m512i l = _mm512_loadu_si512(b->ql + 64 * h),
                  hb = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(b->qh + 32 * h)));
    u[0] = _mm512_or_si512(_mm512_and_si512(l, m4), _mm512_and_si512(_mm512_sllv_epi16(hb, up), m2));
    u[1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l, 4), m4),
                           _mm512_and_si512(_mm512_srlv_epi16(hb, down), m2));
}

/* The zmm kernels for 1 .. KILN_QMM_ROWS_MAX rows of x
 * (qmatmul_kq_rows_x86.h): each block's codes decoded once for every row;
 * the one-row kernels are their case of one row. */
static inline __attribute__((always_inline)) void KQ_NAME(k45_rows_ints)(const uint8_t *w, size_t qs_off, bool q5,
                                                                         const kiln_block_q8_K *const *a, int R,
                                                                         __m256i *lanes, __m128i *mins) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), sixteen = _mm512_set1_epi8(16);
    __m256i sc;
    __m128i mn;
    KQ_NAME(scales_k4)(w + offsetof(kiln_block_q4_K, scales), &sc, &mn);
    const __m256i *qh = (const __m256i *)(w + offsetof(kiln_block_q5_K, qh));
    const __m512i sc4 = _mm512_broadcast_i64x4(sc), h = q5 ? _mm512_broadcast_i64x4(_mm256_loadu_si256(qh)) : sc4;
    __m512i acc[KQ_RMAX][2];
    KQ_UNROLL
    for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm512_setzero_si512();
    KQ_UNROLL
    for (int j = 0; j < 4; j++) {
        __m512i u = nibbles(w + qs_off + 32 * j, m4);
        const __m512i bit = join(_mm256_set1_epi8((char)(1 << 2 * j)), _mm256_set1_epi8((char)(1 << (2 * j + 1))));
        if (q5) u = _mm512_mask_add_epi8(u, _mm512_test_epi8_mask(h, bit), u, sixteen);
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][j & 1] = k45_chunk(acc[q][j & 1], u, a[q]->qs + 64 * j, sc4, j);
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) {
        lanes[q] = fold(acc[q][0], acc[q][1]);
        mins[q] = _mm_madd_epi16(KQ_NAME(bsums32)(a[q]), mn);
    }
}

/* Q6_K: four sub-blocks of 16 per zmm, scaled by one vpermw of the 16
 * scales */
static inline __attribute__((always_inline)) void q6_K_rows_zmm(int R, const kiln_block_q6_K *b, const void *xa,
                                                                size_t xrow, int64_t nb, float *out) {
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        const __m512i sc16 = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(sc8));
        __m512i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm512_setzero_si512();
        KQ_UNROLL
        for (int h = 0; h < 2; h++) {
            __m512i u[2];
            q6_codes_zmm(b + i, h, u);
            KQ_UNROLL
            for (int p = 0; p < 2; p++) {
                const int s = 8 * h + 4 * p;
                const __m512i idx =
                    join(_mm256_set_m128i(_mm_set1_epi16((short)(s + 1)), _mm_set1_epi16((short)s)),
                         _mm256_set_m128i(_mm_set1_epi16((short)(s + 3)), _mm_set1_epi16((short)(s + 2))));
                const __m512i scp = _mm512_permutexvar_epi16(idx, sc16);
                KQ_UNROLL
                for (int q = 0; q < R; q++)
                    acc[q][p] = _mm512_dpwssd_epi32(
                        acc[q][p],
                        _mm512_maddubs_epi16(u[p], _mm512_loadu_si512(KQ_XROW(xa, xrow, q, i)->qs + 128 * h + 64 * p)),
                        scp);
            }
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            const kiln_block_q8_K *a = KQ_XROW(xa, xrow, q, i);
            sum[q] += a->d * _cvtsh_ss(b[i].d) * (float)KQ_NAME(isum16)(fold(acc[q][0], acc[q][1]), sc8, a, 5);
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(dot_q6_K_rows_zmm, q6_K_rows_zmm, w, xa, xrow, nb, out)
KQ_ONE_ROW(dot_q6_K_zmm, q6_K_rows_zmm)

/* IQ4_XS: sub-blocks 2p, 2p + 1 (32 bytes of codes) as [low nibbles of
 * the first 16 | their high ones | the same of the next 16], element
 * order, through the table plus 128 in every lane (1..241, unsigned):
 * vpdpbusd against x, times the sub-block's scale (vpmulld), and 128 sc
 * times x's sums (bsums) taken off per block: exact */
static inline __attribute__((always_inline)) void iq4_xs_rows_zmm(int R, const kiln_block_iq4_xs *b, const void *xa,
                                                                  size_t xrow, int64_t nb, float *out) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                  nib = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4),
                  tabu = _mm512_xor_si512(_mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values)),
                                          _mm512_set1_epi8((char)0x80));
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m256i sc = _mm256_srai_epi32(KQ_NAME(iq4_scales)(b + i), 16);
        const __m512i scz = _mm512_castsi256_si512(sc);
        __m512i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm512_setzero_si512();
        KQ_UNROLL
        for (int p = 0; p < 4; p++) {
            const __m512i c = _mm512_permutexvar_epi64(
                spread, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * p))));
            const __m512i u = _mm512_shuffle_epi8(tabu, _mm512_and_si512(_mm512_srlv_epi64(c, nib), m4));
            const __m512i scp =
                _mm512_permutexvar_epi32(join(_mm256_set1_epi32(2 * p), _mm256_set1_epi32(2 * p + 1)), scz);
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
