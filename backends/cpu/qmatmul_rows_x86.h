/* qmatmul_rows_x86.h — the rows kernels (kiln_qmm_dotr_i8s, qmatmul.h) of
 * Q8_0 and Q4_0 on ymm: one row of W against 1 .. KILN_QMM_ROWS_MAX rows
 * of x, for qmatmul_avx2.c and qmatmul_avxvnni.c (included after
 * qmatmul_x86.h, with its QMM_NAME and QMM_DOT32). W's blocks are loaded
 * and decoded (Q8_0: |w|; Q4_0: the nibbles) and their scales converted
 * once; each row then takes dot_q8_0's / dot_q4_0's operations in their
 * order (the lanes, d_w dx, the FMA onto its accumulator, the tails), so
 * out[q] is that kernel's product with row q bit for bit (the scalar
 * reference's). These kernels take no lane sums (xs). */

#define QMM_RMAX KILN_QMM_ROWS_MAX
#define QMM_UNROLL _Pragma("GCC unroll 8")

/* row q's codes and scales: xq + 32 nb q, dx + nb q (qmatmul.h) */
static inline __attribute__((always_inline)) void QMM_NAME(q8_rows)(int R, const kiln_block_q8_0 *b, const int8_t *xq,
                                                                    const float *dx, int64_t nb, float *out) {
    __m256 a0[QMM_RMAX], a1[QMM_RMAX];
    QMM_UNROLL
    for (int q = 0; q < R; q++) a0[q] = a1[q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 1 < nb; i += 2) {
        kiln__qmm_prefetch_far(b + i);
        kiln__qmm_prefetch_far((const char *)(b + i) + 64);
        const __m256i w0 = _mm256_loadu_si256((const __m256i *)b[i].qs),
                      w1 = _mm256_loadu_si256((const __m256i *)b[i + 1].qs);
        const __m256i u0 = _mm256_sign_epi8(w0, w0), u1 = _mm256_sign_epi8(w1, w1);
        const float d0 = _cvtsh_ss(b[i].d), d1 = _cvtsh_ss(b[i + 1].d);
        QMM_UNROLL
        for (int q = 0; q < R; q++) {
            const int8_t *x = xq + 32 * nb * q + 32 * i;
            const __m256i s0 = QMM_DOT32(u0, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)x), w0));
            const __m256i s1 = QMM_DOT32(u1, _mm256_sign_epi8(_mm256_loadu_si256((const __m256i *)(x + 32)), w1));
            a0[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s0), _mm256_set1_ps(d0 * dx[nb * q + i]), a0[q]);
            a1[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s1), _mm256_set1_ps(d1 * dx[nb * q + i + 1]), a1[q]);
        }
    }
    QMM_UNROLL
    for (int q = 0; q < R; q++) {
        if (i < nb)
            a0[q] = qmm_block(_mm256_loadu_si256((const __m256i *)b[i].qs), xq + 32 * nb * q + 32 * i,
                              _cvtsh_ss(b[i].d) * dx[nb * q + i], a0[q]);
        out[q] = qmm_lanes(a0[q], a1[q]);
    }
}

/* Q4_0: blocks i + off, i + off + 1 onto acc of each row (dot_q4_0's
 * steps), the scales d_w dx given per row by dq (d_w converted once) */
#define QMM_Q4_PAIR_ROWS(acc, off, dq)                                                                     \
    do {                                                                                                 \
        __m256i lo, hi;                                                                                  \
        q4_0_pair(b + i + (off), &lo, &hi);                                                              \
        QMM_UNROLL                                                                                       \
        for (int q = 0; q < R; q++)                                                                      \
            acc[q] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q4_0_pair_dot(lo, hi, xq + 32 * nb * q + 32 * (i + (off)))), \
                                     dq, acc[q]);                                                        \
    } while (0)

static inline __attribute__((always_inline)) void QMM_NAME(q4_rows)(int R, const kiln_block_q4_0 *b, const int8_t *xq,
                                                                    const float *dx, int64_t nb, float *out) {
    __m256 a0[QMM_RMAX], a1[QMM_RMAX]; /* lanes 0-7, 8-15: blocks 0, 1, 4, 5 .. and 2, 3, 6, 7 .. */
    QMM_UNROLL
    for (int q = 0; q < R; q++) a0[q] = a1[q] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 3 < nb; i += 4) {
        _mm_prefetch((const char *)(b + i) + QMM_PREFETCH, _MM_HINT_T0);
        _mm_prefetch((const char *)(b + i + 2) + QMM_PREFETCH, _MM_HINT_T0);
        const __m128 dw = q4_0_dw4(b + i);
        __m256 d01[QMM_RMAX], d23[QMM_RMAX];
        QMM_UNROLL
        for (int q = 0; q < R; q++) q4_0_d4(dw, dx + nb * q + i, &d01[q], &d23[q]);
        QMM_Q4_PAIR_ROWS(a0, 0, d01[q]);
        QMM_Q4_PAIR_ROWS(a1, 2, d23[q]);
    }
    if (i + 1 < nb) {
        const float da = _cvtsh_ss(b[i].d), db = _cvtsh_ss(b[i + 1].d);
        QMM_Q4_PAIR_ROWS(a0, 0, _mm256_set_m128(_mm_set1_ps(db * dx[nb * q + i + 1]), _mm_set1_ps(da * dx[nb * q + i])));
        i += 2;
    }
    if (i < nb) { /* the odd last block, onto the low 4 lanes of its pair's accumulator */
        const __m256i wa = q4_0_bytes(b + i), ua = _mm256_sign_epi8(wa, wa);
        const float da = _cvtsh_ss(b[i].d);
        QMM_UNROLL
        for (int q = 0; q < R; q++) {
            const __m256i xa = _mm256_loadu_si256((const __m256i *)(xq + 32 * nb * q + 32 * i));
            const __m256i s8 = QMM_DOT32(ua, _mm256_sign_epi8(xa, wa));
            const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
            __m256 *a = (i >> 1) & 1 ? &a1[q] : &a0[q];
            const __m128 lo = _mm_fmadd_ps(_mm_cvtepi32_ps(s), _mm_set1_ps(da * dx[nb * q + i]),
                                           _mm256_castps256_ps128(*a));
            *a = _mm256_insertf128_ps(*a, lo, 0);
        }
    }
    QMM_UNROLL
    for (int q = 0; q < R; q++) out[q] = q4_lanes(a0[q], a1[q]);
}

/* The kernels, R a constant in each case (xs unused) */
#define QMM_ROWS_KERNEL(name, f, B)                                                                          \
    static void name(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb, int rows, \
                     float *out) {                                                                           \
        (void)xs;                                                                                            \
        switch (rows) {                                                                                      \
        case 1: f(1, (const B *)w, xq, dx, nb, out); break;                                                  \
        case 2: f(2, (const B *)w, xq, dx, nb, out); break;                                                  \
        case 3: f(3, (const B *)w, xq, dx, nb, out); break;                                                  \
        default: f(4, (const B *)w, xq, dx, nb, out); break;                                                 \
        }                                                                                                    \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "QMM_ROWS_KERNEL's cases");
QMM_ROWS_KERNEL(QMM_NAME(dotr_q8_0), QMM_NAME(q8_rows), kiln_block_q8_0)
QMM_ROWS_KERNEL(QMM_NAME(dotr_q4_0), QMM_NAME(q4_rows), kiln_block_q4_0)
