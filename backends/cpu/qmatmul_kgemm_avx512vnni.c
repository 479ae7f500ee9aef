/* qmatmul_kgemm_avx512vnni.c — the tile of the K types' integer GEMM
 * (qmatmul_kgemm.h) with AVX512-VNNI: 16 columns of W in the lanes of one
 * zmm, up to 8 rows of x, each row's P, its group sums and its f32 sums in
 * registers; x's quads and pairs come broadcast from its Q8_K blocks as
 * they are (no packing). */
#include "qmatmul_kgemm.h"

#if defined(__x86_64__) && defined(__AVX512VNNI__) && defined(__AVX512BW__)
#include "../../quant/quant.h"
#include "qmatmul_kgemm_pack_x86.h"

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
                    T[r] = _mm512_dpbusd_epi32(T[r], u, _mm512_set1_epi32(load32(xb[r]->qs + 16 * g + 4 * qd)));
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
                C[r] = _mm512_dpwssd_epi32(C[r], c, _mm512_set1_epi32(load32(xb[r]->bsums + 2 * t)));
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

static void tile(int rows, const void *xa, size_t xrow, const void *panel, int64_t nb, bool has_min, float *y,
                 int64_t ldy, int cols) {
    switch (rows) {
#define ROWS(R) \
    case R: tile_rows(R, xa, xrow, panel, nb, has_min, y, ldy, cols); break;
        ROWS(1) ROWS(2) ROWS(3) ROWS(4) ROWS(5) ROWS(6) ROWS(7) ROWS(8)
#undef ROWS
    default: break;
    }
}

static const kiln_kgemm_kernels kernels = {kgemm_pack, tile, true};

const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return &kernels; }
#else
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void) { return NULL; }
#endif
