/* qmatmul_gemm_amx.c — the block-scaled int8 GEMM of qmatmul_gemm.h on
 * AMX-INT8 tiles. tdpbssd multiplies signed by signed bytes, so neither
 * side is offset: x's codes stay row-major (an A tile is 16 rows x one
 * block of 32 bytes, loaded with the row stride), and each thread packs
 * 32 columns of W at a time into B tiles (per block, 8 quads x 16 columns
 * x 4 bytes: two 512-byte tiles). One step is one block of a 32 x 32 piece
 * of y: four tdpbssd into four 16 x 16 int32 tiles (the exact block sums),
 * stored, then per row one convert, one scale multiply (da dw) and one FMA
 * into f32 sums kept in L1 — the reference's operations in its order. */
#include "qmatmul_gemm.h"

#if defined(__x86_64__) && (defined(__AMX_TILE__) || defined(__AMXTILE__)) && defined(__AVX512BW__) && defined(__AVX512VL__)
#include "../../quant/quant.h"
#include "amx_tiles.h"
#include "qmatmul_quant_x86.h"
#include "scratch.h"

#include <immintrin.h>
#include <stdlib.h>
#include <string.h>

/* tiles 0..3: C (rows 0-15 / 16-31 x cols 0-15 / 16-31); 4, 5: A (16 rows x
 * 32 bytes); 6, 7: B (8 quads x 64 bytes). A constant object: see
 * amx_tiles.h on GCC 12's _tile_loadconfig. */
static const alignas(64) kiln_amx_config qmm_config = {
    .palette = 1,
    .colsb = {64, 64, 64, 64, 32, 32, 64, 64},
    .rows = {16, 16, 16, 16, 16, 16, 8, 8},
};

/* 32 columns of W from w (cols valid, the rest zero) into B tiles:
 * block b's values of column c at wp + 1024 b + 512 (c / 16) + 64 q + 4 (c % 16),
 * scales at dw + 32 b + c */
static void pack_w(kiln_dtype t, const void *w, int64_t cols, int64_t nb, int8_t *wp, float *dw) {
    const __m256i vidx = _mm256_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112);
    const __m256i lo4 = _mm256_set1_epi8(0x0f), eight = _mm256_set1_epi8(8);
    if (cols < 32) {
        memset(wp, 0, (size_t)(nb * 1024));
        memset(dw, 0, (size_t)(nb * 32) * sizeof(float));
    }
    for (int64_t c = 0; c < cols; c++) {
        int8_t *o = wp + 512 * (c / 16) + 4 * (c % 16);
        if (t == KILN_Q8_0) {
            const kiln_block_q8_0 *b = (const kiln_block_q8_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                _mm256_i32scatter_epi32(o + 1024 * i, vidx, _mm256_loadu_si256((const __m256i *)b[i].qs), 4);
                dw[32 * i + c] = _cvtsh_ss(b[i].d);
            }
        } else {
            const kiln_block_q4_0 *b = (const kiln_block_q4_0 *)w + c * nb;
            for (int64_t i = 0; i < nb; i++) {
                const __m128i p = _mm_loadu_si128((const __m128i *)b[i].qs);
                const __m256i v =
                    _mm256_sub_epi8(_mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(p, 4), p), lo4), eight);
                _mm256_i32scatter_epi32(o + 1024 * i, vidx, v, 4);
                dw[32 * i + c] = _cvtsh_ss(b[i].d);
            }
        }
    }
}

/* y rows [i0, i0 + rows) x columns [j0, j0 + cols) from x's codes xq
 * (row-major, row stride k, 32 rows readable) and scales da ([row][nb]) */
static void piece(const int8_t *xq, const float *da, int64_t k, int64_t nb, int64_t i0, int64_t rows,
                  const int8_t *wp, const float *dw, float *y, int64_t n, int64_t j0, int64_t cols) {
    alignas(64) int32_t cb[4][16][16];
    alignas(64) float acc[32][32];
    memset(acc, 0, sizeof acc);
    const int8_t *a0 = xq + i0 * k, *a1 = a0 + 16 * k;
    for (int64_t b = 0; b < nb; b++) {
        _tile_zero(0);
        _tile_zero(1);
        _tile_zero(2);
        _tile_zero(3);
        _tile_loadd(4, a0 + 32 * b, k);
        _tile_loadd(6, wp + 1024 * b, 64);
        _tile_dpbssd(0, 4, 6);
        _tile_loadd(7, wp + 1024 * b + 512, 64);
        _tile_dpbssd(1, 4, 7);
        _tile_loadd(5, a1 + 32 * b, k);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
        _tile_stored(0, cb[0], 64);
        _tile_stored(1, cb[1], 64);
        _tile_stored(2, cb[2], 64);
        _tile_stored(3, cb[3], 64);
        const __m512 w0 = _mm512_loadu_ps(dw + 32 * b), w1 = _mm512_loadu_ps(dw + 32 * b + 16);
        const float *dr = da + i0 * nb + b;
        for (int r = 0; r < 32; r++) {
            const __m512 d = _mm512_set1_ps(dr[r * nb]);
            const int hi = r >> 4, rr = r & 15;
            _mm512_store_ps(acc[r], _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[2 * hi][rr])),
                                                    _mm512_mul_ps(d, w0), _mm512_load_ps(acc[r])));
            _mm512_store_ps(acc[r] + 16, _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(cb[2 * hi + 1][rr])),
                                                         _mm512_mul_ps(d, w1), _mm512_load_ps(acc[r] + 16)));
        }
    }
    const __mmask16 m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
    const __mmask16 m1 = cols >= 32 ? (__mmask16)0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
    for (int64_t r = 0; r < rows; r++) {
        _mm512_mask_storeu_ps(y + (i0 + r) * n + j0, m0, _mm512_load_ps(acc[r]));
        _mm512_mask_storeu_ps(y + (i0 + r) * n + j0 + 16, m1, _mm512_load_ps(acc[r] + 16));
    }
}

kiln_status kiln__qmm_gemm_amx(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                               int n_threads) {
    const int64_t nb = k / 32, mp = (m + 31) / 32 * 32, units = (n + 31) / 32;
    const size_t row_bytes = (size_t)kiln__elems_bytes(t, k);
    const size_t xbytes = ((size_t)(mp * k) + (size_t)(mp * nb) * sizeof(float) + 63) & ~(size_t)63;
    int8_t *xq = aligned_alloc(64, xbytes);
    if (!xq) return kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory quantizing the activations");
    float *da = (float *)(xq + mp * k);
    const size_t pbytes = (size_t)nb * (1024 + 32 * sizeof(float));
    if (n_threads < 1) n_threads = 1;
    const int nt = units > 1 ? n_threads : 1;
    int fail = 0;
#pragma omp parallel num_threads(nt) if (nt > 1)
    {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < mp; i++) {
            if (i >= m) {
                memset(xq + i * k, 0, (size_t)k);
                memset(da + i * nb, 0, (size_t)nb * sizeof(float));
                continue;
            }
            for (int64_t b = 0; b < nb; b++)
                _mm256_storeu_si256((__m256i *)(xq + i * k + 32 * b),
                                    kiln__qmm_quantize_block(x + i * k + 32 * b, da + i * nb + b));
        }
        bool owned;
        int8_t *wp = kiln__scratch_get((pbytes + 63) & ~(size_t)63, &owned);
        if (!wp) {
#pragma omp atomic write
            fail = 1;
        }
        float *dw = (float *)(wp + nb * 1024);
        _tile_loadconfig(&qmm_config);
#pragma omp for schedule(dynamic, 1)
        for (int64_t u = 0; u < units; u++) {
            if (!wp) continue;
            const int64_t j0 = u * 32, cols = n - j0 < 32 ? n - j0 : 32;
            pack_w(t, (const char *)w + (size_t)j0 * row_bytes, cols, nb, wp, dw);
            for (int64_t i0 = 0; i0 < m; i0 += 32)
                piece(xq, da, k, nb, i0, m - i0 < 32 ? m - i0 : 32, wp, dw, y, n, j0, cols);
        }
        _tile_release();
        if (owned) free(wp);
    }
    free(xq);
    return fail ? kiln__errs(KILN_ERR_OOM, "qmatmul: out of memory for a W panel") : KILN_OK;
}
#else
kiln_status kiln__qmm_gemm_amx(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                               int n_threads) {
    (void)t, (void)m, (void)n, (void)k, (void)x, (void)w, (void)y, (void)n_threads;
    return kiln__errs(KILN_ERR_UNSUPPORTED, "qmatmul: AMX not built");
}
#endif
