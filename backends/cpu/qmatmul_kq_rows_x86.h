/* qmatmul_kq_rows_x86.h — the rows kernels (qmatmul_ggml.h) of the K types
 * and IQ4_XS on x86, included by qmatmul_kq_x86.h (so by each level's file,
 * with its KQ_NAME, KQ_ACC and flags): one row of W against 1 ..
 * KILN_QMM_ROWS_MAX rows of x. Each block's scales and codes are decoded
 * once and multiplied by every row; a row's integer sums are exact in any
 * order and its f32 operations are the one-row kernel's, block after block
 * into its own sum, so each out[q] is that kernel's product with row q bit
 * for bit. Q2_K's, Q3_K's, Q6_K's and IQ4_XS's one-row kernels are these
 * bodies with one row (KQ_ONE_ROW); Q4_K / Q5_K's integers come from
 * k45_rows_ints (ymm below, zmm in qmatmul_kq_zmm.h), their one-row
 * kernels pair blocks (qmatmul_kq_x86.h). With KQ_ZMM defined Q6_K's
 * kernels are left out here (qmatmul_kq_zmm.h has zmm ones), with
 * KQ_ZMM_IQ4 IQ4_XS's (the AVX512-VNNI file has its own). */

#define KQ_RMAX KILN_QMM_ROWS_MAX

/* row q's Q8_K block i */
#define KQ_XROW(xa, xrow, q, i) ((const kiln_block_q8_K *)((const char *)(xa) + (size_t)(q) * (xrow)) + (i))

/* A rows kernel from its body f(R, ...), R a constant in each case so that
 * the per-row accumulators live in registers. */
#define KQ_ROWS_KERNEL(name, f, ...)                                                                       \
    static void name(const void *w, const void *xa, size_t xrow, int rows, int64_t nb, float *out) {      \
        switch (rows) {                                                                                    \
        case 1: f(1, __VA_ARGS__); break;                                                                  \
        case 2: f(2, __VA_ARGS__); break;                                                                  \
        case 3: f(3, __VA_ARGS__); break;                                                                  \
        default: f(4, __VA_ARGS__); break;                                                                 \
        }                                                                                                  \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "KQ_ROWS_KERNEL's cases");

/* A one-row kernel (kiln_qmm_dot_ggml) from the same body. */
#define KQ_ONE_ROW(name, f)                                           \
    static float name(const void *w, const void *xa, int64_t nb) {    \
        float out;                                                    \
        f(1, w, xa, 0, nb, &out);                                     \
        return out;                                                   \
    }

static inline __attribute__((always_inline)) void KQ_NAME(k45_rows)(int R, const uint8_t *w, size_t bsz,
                                                                    size_t qs_off, bool q5, const void *xa,
                                                                    size_t xrow, int64_t nb, float *out) {
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++, w += bsz) {
        KQ_NAME(prefetch)(w, bsz);
        const kiln_block_q8_K *a[KQ_RMAX];
        __m256i lanes[KQ_RMAX];
        __m128i mins[KQ_RMAX];
        KQ_UNROLL
        for (int q = 0; q < R; q++) a[q] = KQ_XROW(xa, xrow, q, i);
        KQ_NAME(k45_rows_ints)(w, qs_off, q5, a, R, lanes, mins);
        KQ_UNROLL
        for (int q = 0; q < R; q++) sum[q] += KQ_NAME(min_block)(lanes[q], mins[q], a[q], w);
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(KQ_NAME(dot_q4_K_rows), KQ_NAME(k45_rows), w, KQ_K45(kiln_block_q4_K, false), xa, xrow, nb, out)
KQ_ROWS_KERNEL(KQ_NAME(dot_q5_K_rows), KQ_NAME(k45_rows), w, KQ_K45(kiln_block_q5_K, true), xa, xrow, nb, out)

#ifndef KQ_ZMM
static inline __attribute__((always_inline)) void KQ_NAME(k45_rows_ints)(const uint8_t *w, size_t qs_off, bool q5,
                                                                         const kiln_block_q8_K *const *a, int R,
                                                                         __m256i *lanes, __m128i *mins) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), one = _mm256_set1_epi8(1), two = _mm256_set1_epi8(2);
    __m256i sc, acc0[KQ_RMAX], acc1[KQ_RMAX],
        h = q5 ? _mm256_loadu_si256((const __m256i *)(w + offsetof(kiln_block_q5_K, qh))) : _mm256_setzero_si256();
    __m128i mn;
    KQ_NAME(scales_k4)(w + offsetof(kiln_block_q4_K, scales), &sc, &mn);
    KQ_UNROLL
    for (int q = 0; q < R; q++) acc0[q] = acc1[q] = _mm256_setzero_si256();
    KQ_UNROLL
    for (int j = 0; j < 4; j++, h = _mm256_srli_epi16(h, 2)) {
        const __m256i c = _mm256_loadu_si256((const __m256i *)(w + qs_off + 32 * j));
        __m256i lo = _mm256_and_si256(c, m4), hi = _mm256_and_si256(_mm256_srli_epi16(c, 4), m4);
        if (q5) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(h, two), 3));
        }
        const __m256i s0 = KQ_PICK16(sc, 2 * j), s1 = KQ_PICK16(sc, 2 * j + 1);
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            acc0[q] = KQ_ACC(acc0[q], _mm256_maddubs_epi16(lo, KQ_NAME(load)(a[q]->qs + 64 * j)), s0);
            acc1[q] = KQ_ACC(acc1[q], _mm256_maddubs_epi16(hi, KQ_NAME(load)(a[q]->qs + 64 * j + 32)), s1);
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) {
        lanes[q] = _mm256_add_epi32(acc0[q], acc1[q]);
        mins[q] = _mm_madd_epi16(KQ_NAME(bsums32)(a[q]), mn);
    }
}
#endif

/* Q2_K: 2-bit codes (bits 2r of the half's 32 bytes), scales the low
 * nibbles, mins the high ones against bsums */
static inline __attribute__((always_inline)) void KQ_NAME(q2_K_rows)(int R, const kiln_block_q2_K *b, const void *xa,
                                                                     size_t xrow, int64_t nb, float *out) {
    const __m256i m2 = _mm256_set1_epi8(3);
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m128i s8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        const __m128i sc8 = _mm_and_si128(s8, _mm_set1_epi8(0x0f)),
                      mn8 = _mm_and_si128(_mm_srli_epi16(s8, 4), _mm_set1_epi8(0x0f));
        __m256i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm256_setzero_si256();
        KQ_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i c = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            KQ_UNROLL
            for (int r = 0; r < 4; r++) {
                const __m256i u = _mm256_and_si256(_mm256_srli_epi16(c, 2 * r), m2);
                KQ_UNROLL
                for (int q = 0; q < R; q++)
                    acc[q][r & 1] = KQ_NAME(acc16)(acc[q][r & 1], u, KQ_XROW(xa, xrow, q, i)->qs + 128 * h + 32 * r,
                                                   sc8, 8 * h + 2 * r);
            }
        }
        const __m256i mn16 = _mm256_cvtepu8_epi16(mn8);
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            const kiln_block_q8_K *a = KQ_XROW(xa, xrow, q, i);
            const __m256i mins = _mm256_madd_epi16(mn16, _mm256_loadu_si256((const __m256i *)a->bsums));
            sum[q] += KQ_NAME(min_block)(_mm256_add_epi32(acc[q][0], acc[q][1]),
                                         _mm_add_epi32(_mm256_castsi256_si128(mins), _mm256_extracti128_si256(mins, 1)),
                                         a, &b[i].d);
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(KQ_NAME(dot_q2_K_rows), KQ_NAME(q2_K_rows), w, xa, xrow, nb, out)
KQ_ONE_ROW(KQ_NAME(dot_q2_K), KQ_NAME(q2_K_rows))

/* Q3_K: u = the 2-bit code + 4 where hmask's bit is set (q = u - 4) */
static inline __attribute__((always_inline)) void KQ_NAME(q3_K_rows)(int R, const kiln_block_q3_K *b, const void *xa,
                                                                     size_t xrow, int64_t nb, float *out) {
    const __m256i m2 = _mm256_set1_epi8(3), four = _mm256_set1_epi8(4);
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m128i sc8 = KQ_NAME(q3_scales)(b + i);
        __m256i acc[KQ_RMAX][2], hm = _mm256_loadu_si256((const __m256i *)b[i].hmask);
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm256_setzero_si256();
        KQ_UNROLL
        for (int h = 0; h < 2; h++) {
            const __m256i c = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * h));
            KQ_UNROLL
            for (int r = 0; r < 4; r++, hm = _mm256_srli_epi16(hm, 1)) {
                const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(c, 2 * r), m2),
                                                  _mm256_and_si256(_mm256_slli_epi16(hm, 2), four));
                KQ_UNROLL
                for (int q = 0; q < R; q++)
                    acc[q][r & 1] = KQ_NAME(acc16)(acc[q][r & 1], u, KQ_XROW(xa, xrow, q, i)->qs + 128 * h + 32 * r,
                                                   sc8, 8 * h + 2 * r);
            }
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            const kiln_block_q8_K *a = KQ_XROW(xa, xrow, q, i);
            sum[q] += a->d * _cvtsh_ss(b[i].d) *
                      (float)KQ_NAME(isum16)(_mm256_add_epi32(acc[q][0], acc[q][1]), sc8, a, 2);
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(KQ_NAME(dot_q3_K_rows), KQ_NAME(q3_K_rows), w, xa, xrow, nb, out)
KQ_ONE_ROW(KQ_NAME(dot_q3_K), KQ_NAME(q3_K_rows))

#ifndef KQ_ZMM
/* Q6_K: q + 32 (0..63) unsigned against x, 32 sc bsums taken off */
static inline __attribute__((always_inline)) void KQ_NAME(q6_K_rows)(int R, const kiln_block_q6_K *b, const void *xa,
                                                                     size_t xrow, int64_t nb, float *out) {
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m128i sc8 = _mm_loadu_si128((const __m128i *)b[i].scales);
        __m256i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm256_setzero_si256();
        KQ_UNROLL
        for (int h = 0; h < 2; h++) {
            __m256i u[4];
            KQ_NAME(q6_codes)(b + i, h, u);
            KQ_UNROLL
            for (int r = 0; r < 4; r++)
                KQ_UNROLL
                for (int q = 0; q < R; q++)
                    acc[q][r & 1] = KQ_NAME(acc16)(acc[q][r & 1], u[r], KQ_XROW(xa, xrow, q, i)->qs + 128 * h + 32 * r,
                                                   sc8, 8 * h + 2 * r);
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++) {
            const kiln_block_q8_K *a = KQ_XROW(xa, xrow, q, i);
            sum[q] += a->d * _cvtsh_ss(b[i].d) *
                      (float)KQ_NAME(isum16)(_mm256_add_epi32(acc[q][0], acc[q][1]), sc8, a, 5);
        }
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(KQ_NAME(dot_q6_K_rows), KQ_NAME(q6_K_rows), w, xa, xrow, nb, out)
KQ_ONE_ROW(KQ_NAME(dot_q6_K), KQ_NAME(q6_K_rows))
#endif

#ifndef KQ_ZMM_IQ4
/* IQ4_XS: sub-block s's 16 bytes in both lanes, the low nibbles in the
 * first and the high ones in the second (element order), through the
 * table (pshufb), signed: |v| against sign(x, v); its scale picked from
 * iq4_scales16 in-lane (a lane-crossing vpermd with indices built per
 * sub-block, and constants spilled, cost more) */
static inline __attribute__((always_inline)) void KQ_NAME(iq4_xs_rows)(int R, const kiln_block_iq4_xs *b,
                                                                       const void *xa, size_t xrow, int64_t nb,
                                                                       float *out) {
    const __m256i m4 = _mm256_set1_epi8(0x0f), nib = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4),
                  tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)kiln__iq4nl_values));
    float sum[KQ_RMAX] = {0};
    for (int64_t i = 0; i < nb; i++) {
        KQ_NAME(prefetch)(b + i, sizeof *b);
        const __m256i sc16 = KQ_NAME(iq4_scales16)(b + i);
        __m256i acc[KQ_RMAX][2];
        KQ_UNROLL
        for (int q = 0; q < R; q++) acc[q][0] = acc[q][1] = _mm256_setzero_si256();
        KQ_UNROLL
        for (int s = 0; s < 8; s++) {
            const __m256i c = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(b[i].qs + 16 * s)));
            const __m256i v = _mm256_shuffle_epi8(tab, _mm256_and_si256(_mm256_srlv_epi32(c, nib), m4));
            const __m256i av = _mm256_sign_epi8(v, v), scs = KQ_PICK16(sc16, s);
            KQ_UNROLL
            for (int q = 0; q < R; q++) {
                const __m256i x = KQ_NAME(load)(KQ_XROW(xa, xrow, q, i)->qs + 32 * s);
                acc[q][s & 1] = KQ_ACC(acc[q][s & 1], _mm256_maddubs_epi16(av, _mm256_sign_epi8(x, v)), scs);
            }
        }
        KQ_UNROLL
        for (int q = 0; q < R; q++)
            sum[q] += KQ_XROW(xa, xrow, q, i)->d * _cvtsh_ss(b[i].d) *
                      (float)KQ_NAME(hsum)(_mm256_add_epi32(acc[q][0], acc[q][1]));
    }
    KQ_UNROLL
    for (int q = 0; q < R; q++) out[q] = sum[q];
}
KQ_ROWS_KERNEL(KQ_NAME(dot_iq4_xs_rows), KQ_NAME(iq4_xs_rows), w, xa, xrow, nb, out)
KQ_ONE_ROW(KQ_NAME(dot_iq4_xs), KQ_NAME(iq4_xs_rows))
#endif
