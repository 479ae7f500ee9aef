/* qmatmul_kq_zmm.h — the zmm batch-1 (and few-rows) products of Q4_K,
 * Q5_K and Q6_K (qmatmul_kq.h), shared by qmatmul_kq_avx512vnni.c and
 * _avx512.c, which define KQ_NAME(x), KQ_ACC (qmatmul_kq_x86.h's ymm step)
 * and KQ_ACC512(acc, p, sc): acc (16 int32) plus the int16 pairs p times
 * the int16 scales sc, summed pairwise (vpdpwssd, or vpmaddwd + vpaddd).
 * Q4_K and Q5_K take two sub-blocks of 32 per zmm, Q6_K four sub-blocks
 * of 16, the codes unsigned against x by vpmaddubsw. Includes the shared
 * ymm body (Q2_K, Q3_K, the Q8_K quantizer) with KQ_ZMM defined; a file
 * defining KQ_ZMM_IQ4 has its own IQ4_XS kernels (both AVX-512 files,
 * from kq_iq4_indices). Included once per file, built with that file's
 * flags. */
#define KQ_ZMM
#include "qmatmul_kq_x86.h"

/* the two accumulators of a block folded to 8 int32 lanes (exact) */
static inline __m256i fold(__m512i a0, __m512i a1) {
    const __m512i a = _mm512_add_epi32(a0, a1);
    return _mm256_add_epi32(_mm512_castsi512_si256(a), _mm512_extracti64x4_epi64(a, 1));
}

/* [lo | hi]: a ymm and another as one zmm */
static inline __m512i kq_join(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

/* [sc[2j] x 16 | sc[2j + 1] x 16] from sc4, 8 int16 scales in every
 * 128-bit lane: the scales of a zmm holding sub-blocks 2j, 2j + 1 */
static inline __m512i kq_scales2(__m512i sc4, int j) {
    return _mm512_shuffle_epi8(sc4, kq_join(_mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j))),
                                            _mm256_set1_epi16((short)(0x0100 + 0x0202 * (2 * j + 1)))));
}

/* Q4_K / Q5_K's chunk j (sub-blocks 2j, 2j + 1: the low and high nibbles
 * of 32 bytes) against x's 64 bytes in order, scaled by sc[2j], sc[2j + 1]
 * (sc4: the 8 int16 scales in every 128-bit lane) */
static inline __m512i k45_chunk(__m512i acc, __m512i u, const int8_t *x, __m512i sc4, int j) {
    return KQ_ACC512(acc, _mm512_maddubs_epi16(u, _mm512_loadu_si512(x)), kq_scales2(sc4, j));
}

static inline __m512i kq_nibbles(const uint8_t *qs, __m512i m4) {
    const __m256i q = _mm256_loadu_si256((const __m256i *)qs);
    return _mm512_and_si512(kq_join(q, _mm256_srli_epi16(q, 4)), m4);
}

/* Q6_K's q + 32 of half h: ql's 64 bytes as one zmm give elements 0-63
 * (low nibbles, u[0]) and 64-127 (high ones, u[1]), the two bits from
 * qh's 32 bytes in both halves shifted per half */
static inline void q6_codes_zmm(const kiln_block_q6_K *b, int h, __m512i u[2]) {
    const __m512i m4 = _mm512_set1_epi8(0x0f), m2 = _mm512_set1_epi8(0x30);
    const __m512i up = kq_join(_mm256_set1_epi16(4), _mm256_set1_epi16(2)),
                  down = kq_join(_mm256_setzero_si256(), _mm256_set1_epi16(2));
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
        __m512i u = kq_nibbles(w + qs_off + 32 * j, m4);
        const __m512i bit = kq_join(_mm256_set1_epi8((char)(1 << 2 * j)), _mm256_set1_epi8((char)(1 << (2 * j + 1))));
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
                    kq_join(_mm256_set_m128i(_mm_set1_epi16((short)(s + 1)), _mm_set1_epi16((short)s)),
                         _mm256_set_m128i(_mm_set1_epi16((short)(s + 3)), _mm_set1_epi16((short)(s + 2))));
                const __m512i scp = _mm512_permutexvar_epi16(idx, sc16);
                KQ_UNROLL
                for (int q = 0; q < R; q++)
                    acc[q][p] = KQ_ACC512(
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

/* IQ4_XS's sub-blocks 2p, 2p + 1 (their 32 bytes of codes at qs) as table
 * indices in element order: [low nibbles of the first 16 | their high
 * ones | the same of the next 16] */
static inline __m512i kq_iq4_indices(const uint8_t *qs) {
    const __m512i spread = _mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3), nib = _mm512_setr_epi64(0, 0, 4, 4, 0, 0, 4, 4);
    const __m512i c = _mm512_permutexvar_epi64(spread, _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)qs)));
    return _mm512_and_si512(_mm512_srlv_epi64(c, nib), _mm512_set1_epi8(0x0f));
}
