/* qmatmul_kgemm_zmm.h — the zmm tiles of the K types' and the blocks of
 * 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h), shared by
 * qmatmul_kgemm_avx512vnni.c and _avx512.c, which define KG_DPBUSD(acc, u,
 * x) (acc plus the sums of 4 unsigned u times signed x, 16 int32 lanes)
 * and KG_DPWSSD(acc, a, b) (acc plus the sums of int16 pairs a times b):
 * 16 columns of W in the lanes of one zmm, up to 8 rows of x, each row's
 * integer and f32 sums in registers; x's quads and pairs come broadcast
 * from its blocks as they are (no packing). Defines tile and q32_tile;
 * included once per file, built with that file's flags. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"

#include "../../quant/quant.h"
#include "qmatmul_kgemm_pack_x86.h"
#include "qmatmul_q32gemm_pack_x86.h"

#include <immintrin.h>
#include <string.h>

#define NC KILN_KGEMM_NC
#define UNROLL _Pragma("GCC unroll 8")

static inline int32_t load32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

/* R rows (a constant once inlined) against the panel */
static inline __attribute__((always_inline)) void tile_rows(const int R, const char *xa, size_t xrow,
                                                            const char *panel, int64_t nb, bool has_min, float *y,
                                                            int64_t ldy, int cols) {
    __m512 acc[KILN_KGEMM_MR];
    UNROLL
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        const char *p = panel + b * KILN_KGEMM_BLOCK;
        const int32_t *sc = (const int32_t *)(p + NC * 256), *cp = sc + 16 * NC;
        const float *d = (const float *)(cp + 8 * NC);
        const kiln_block_q8_K *xb[KILN_KGEMM_MR];
        __m512i P[KILN_KGEMM_MR], C[KILN_KGEMM_MR];
        UNROLL
        for (int r = 0; r < R; r++) {
            xb[r] = (const kiln_block_q8_K *)(xa + (size_t)r * xrow) + b;
            P[r] = _mm512_setzero_si512();
        }
        for (int g = 0; g < 16; g++) {
            __m512i T[KILN_KGEMM_MR];
            UNROLL
            for (int r = 0; r < R; r++) T[r] = _mm512_setzero_si512();
            UNROLL
            for (int qd = 0; qd < 4; qd++) {
                const __m512i u = _mm512_load_si512(p + (4 * g + qd) * 64);
                UNROLL
                for (int r = 0; r < R; r++)
                    T[r] = KG_DPBUSD(T[r], u, _mm512_set1_epi32(load32(xb[r]->qs + 16 * g + 4 * qd)));
            }
            const __m512i s = _mm512_load_si512(sc + g * NC);
            UNROLL
            for (int r = 0; r < R; r++) P[r] = _mm512_add_epi32(P[r], _mm512_mullo_epi32(T[r], s));
        }
        UNROLL
        for (int r = 0; r < R; r++) C[r] = _mm512_setzero_si512();
        UNROLL
        for (int t = 0; t < 8; t++) {
            const __m512i c = _mm512_load_si512(cp + t * NC);
            UNROLL
            for (int r = 0; r < R; r++)
                C[r] = KG_DPWSSD(C[r], c, _mm512_set1_epi32(load32(xb[r]->bsums + 2 * t)));
        }
        const __m512 dw = _mm512_load_ps(d), dmw = _mm512_load_ps(d + NC);
        UNROLL
        for (int r = 0; r < R; r++) {
            const __m512 da = _mm512_set1_ps(xb[r]->d);
            const __m512 v =
                has_min ? _mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(P[r])),
                                        _mm512_mul_ps(_mm512_mul_ps(da, dmw), _mm512_cvtepi32_ps(C[r])))
                        : _mm512_mul_ps(_mm512_mul_ps(da, dw), _mm512_cvtepi32_ps(_mm512_sub_epi32(P[r], C[r])));
            acc[r] = _mm512_add_ps(acc[r], v);
        }
    }
    const __mmask16 keep = (__mmask16)((1u << cols) - 1);
    UNROLL
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * ldy, keep, acc[r]);
}

/* block b of a panel of blocks of 32 (qmatmul_q32gemm.h): its term added
 * to each of R rows' sums */
static inline __attribute__((always_inline)) void q32_block(const int R, const char *xa, size_t xrow,
                                                            const char *panel, int64_t b, bool has_min,
                                                            __m512 acc[]) {
    const char *p = panel + b * KILN_Q32GEMM_BLOCK;
    const float *d = (const float *)(p + 8 * NC * 4);
    const kiln_q32x *xb[KILN_KGEMM_MR];
    __m512i T[KILN_KGEMM_MR];
    UNROLL
    for (int r = 0; r < R; r++) {
        xb[r] = (const kiln_q32x *)(xa + (size_t)r * xrow) + b;
        T[r] = _mm512_setzero_si512();
    }
    UNROLL
    for (int qd = 0; qd < 8; qd++) {
        const __m512i u = _mm512_load_si512(p + qd * 64);
        UNROLL
        for (int r = 0; r < R; r++) T[r] = KG_DPBUSD(T[r], u, _mm512_set1_epi32(load32(xb[r]->qs + 4 * qd)));
    }
    const __m512 dw = _mm512_load_ps(d), mw = _mm512_load_ps(d + NC);
    UNROLL
    for (int r = 0; r < R; r++) {
        const __m512 dd = _mm512_mul_ps(dw, _mm512_set1_ps(xb[r]->d));
        const __m512 v =
            has_min ? _mm512_add_ps(_mm512_mul_ps(dd, _mm512_cvtepi32_ps(T[r])),
                                    _mm512_mul_ps(mw, _mm512_set1_ps(xb[r]->s)))
                    : _mm512_mul_ps(dd, _mm512_cvtepi32_ps(_mm512_sub_epi32(T[r], _mm512_set1_epi32(xb[r]->off))));
        acc[r] = _mm512_add_ps(acc[r], v);
    }
}

/* R rows against a panel of blocks of 32, one lane of the reference's
 * sums at a time, then its leftover blocks */
static inline __attribute__((always_inline)) void q32_rows(const int R, const char *xa, size_t xrow,
                                                           const char *panel, int64_t nb, bool has_min, float *y,
                                                           int64_t ldy, int cols) {
    const int64_t grouped = nb / 8 * 8;
    __m512 lane[8][KILN_KGEMM_MR], acc[KILN_KGEMM_MR];
    for (int l = 0; l < 8 && grouped; l++) {
        UNROLL
        for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
        for (int64_t b = l; b < grouped; b += 8) q32_block(R, xa, xrow, panel, b, has_min, acc);
        UNROLL
        for (int r = 0; r < R; r++) lane[l][r] = acc[r];
    }
    UNROLL
    for (int r = 0; r < R; r++)
        acc[r] = !grouped ? _mm512_setzero_ps()
                          : _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(lane[0][r], lane[4][r]),
                                                        _mm512_add_ps(lane[2][r], lane[6][r])),
                                          _mm512_add_ps(_mm512_add_ps(lane[1][r], lane[5][r]),
                                                        _mm512_add_ps(lane[3][r], lane[7][r])));
    for (int64_t b = grouped; b < nb; b++) q32_block(R, xa, xrow, panel, b, has_min, acc);
    const __mmask16 keep = (__mmask16)((1u << cols) - 1);
    UNROLL
    for (int r = 0; r < R; r++) _mm512_mask_storeu_ps(y + r * ldy, keep, acc[r]);
}

/* rows (1 .. 8) through ROWS_FN, R a constant in each case */
#define TILE(NAME, ROWS_FN)                                                                                     \
    static void NAME(int rows, const void *xa, size_t xrow, const void *panel, int64_t nb, bool has_min,       \
                     float *y, int64_t ldy, int cols) {                                                         \
        switch (rows) {                                                                                         \
        case 1: ROWS_FN(1, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 2: ROWS_FN(2, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 3: ROWS_FN(3, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 4: ROWS_FN(4, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 5: ROWS_FN(5, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 6: ROWS_FN(6, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 7: ROWS_FN(7, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        case 8: ROWS_FN(8, xa, xrow, panel, nb, has_min, y, ldy, cols); break;                                  \
        default: break;                                                                                         \
        }                                                                                                       \
    }
TILE(tile, tile_rows)
TILE(q32_tile, q32_rows)
#undef TILE
