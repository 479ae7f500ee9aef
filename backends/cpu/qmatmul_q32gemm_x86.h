/* qmatmul_q32gemm_x86.h — the tile of the blocks of 32's integer GEMM
 * (qmatmul_q32gemm.h) on ymm, included by qmatmul_kgemm_avx2.c and
 * _avxvnni.c after qmatmul_kgemm_x86.h (its KG_NAME, KG_DPBUSD, KG_MR,
 * KG_TILE and store). The panel's 16 columns go in two halves of 8, up to
 * KG_MR rows of x a pass; the f32 operations are the AVX-512 tile's. */
#include "qmatmul_q32gemm_pack_x86.h"

/* block b of half h of the panel: its term added to each of R rows' sums */
static inline __attribute__((always_inline)) void KG_NAME(q32_block)(const int R, const char *xa, size_t xrow,
                                                                     const char *panel, int64_t b, bool has_min,
                                                                     int h, __m256 acc[]) {
    const char *p = panel + b * KILN_Q32GEMM_BLOCK;
    const float *d = (const float *)(p + 8 * KILN_KGEMM_NC * 4) + 8 * h;
    const kiln_q32x *xb[KG_MR];
    __m256i T[KG_MR];
    KG_UNROLL
    for (int r = 0; r < R; r++) {
        xb[r] = (const kiln_q32x *)(xa + (size_t)r * xrow) + b;
        T[r] = _mm256_setzero_si256();
    }
    KG_UNROLL
    for (int qd = 0; qd < 8; qd++) {
        const __m256i u = _mm256_load_si256((const __m256i *)(p + qd * 64 + 32 * h));
        KG_UNROLL
        for (int r = 0; r < R; r++)
            T[r] = KG_DPBUSD(T[r], u, _mm256_set1_epi32(KG_NAME(load32)(xb[r]->qs + 4 * qd)));
    }
    const __m256 dw = _mm256_load_ps(d), mw = _mm256_load_ps(d + KILN_KGEMM_NC);
    KG_UNROLL
    for (int r = 0; r < R; r++) {
        const __m256 dd = _mm256_mul_ps(dw, _mm256_set1_ps(xb[r]->d));
        const __m256 v =
            has_min ? _mm256_add_ps(_mm256_mul_ps(dd, _mm256_cvtepi32_ps(T[r])),
                                    _mm256_mul_ps(mw, _mm256_set1_ps(xb[r]->s)))
                    : _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_sub_epi32(T[r], _mm256_set1_epi32(xb[r]->off))));
        acc[r] = _mm256_add_ps(acc[r], v);
    }
}

/* R rows against half h of the panel, one lane of the reference's sums
 * at a time, then its leftover blocks */
static inline __attribute__((always_inline)) void KG_NAME(q32_rows)(const int R, const char *xa, size_t xrow,
                                                                    const char *panel, int64_t nb, bool has_min,
                                                                    float *y, int64_t ldy, int h, int cols) {
    const int64_t grouped = nb / 8 * 8;
    __m256 lane[8][KG_MR], acc[KG_MR];
    for (int l = 0; l < 8 && grouped; l++) {
        KG_UNROLL
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int64_t b = l; b < grouped; b += 8) KG_NAME(q32_block)(R, xa, xrow, panel, b, has_min, h, acc);
        KG_UNROLL
        for (int r = 0; r < R; r++) lane[l][r] = acc[r];
    }
    KG_UNROLL
    for (int r = 0; r < R; r++)
        acc[r] = !grouped ? _mm256_setzero_ps()
                          : _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(lane[0][r], lane[4][r]),
                                                        _mm256_add_ps(lane[2][r], lane[6][r])),
                                          _mm256_add_ps(_mm256_add_ps(lane[1][r], lane[5][r]),
                                                        _mm256_add_ps(lane[3][r], lane[7][r])));
    for (int64_t b = grouped; b < nb; b++) KG_NAME(q32_block)(R, xa, xrow, panel, b, has_min, h, acc);
    KG_NAME(store)(R, acc, y, ldy, cols);
}

KG_TILE(KG_NAME(q32_tile), KG_NAME(q32_rows))
