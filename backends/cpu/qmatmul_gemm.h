/* qmatmul_gemm.h — the batched (prompt) path of KILN_OP_QMATMUL for Q8_0 and
 * Q4_0: y[m, n] = x[m, k] . W[n, k]^T as a block-scaled integer GEMM, for
 * m >= KILN_QMM_PANEL_MIN_M from AVX2 up (AVX512-VNNI's and AVX-512's zmm
 * tiles, AVX-VNNI's and AVX2's ymm ones, qmatmul_gemm_x86.h) and on ARM64 with the dot
 * product (qmatmul_gemm_neondot.c); elsewhere, and for NF4, the
 * dequantized panels + f32 GEMM of qmatmul.c run.
 *
 * No AMX: an AMX-INT8 version (commit 605e32e: tdpbssd per block of 32,
 * each block's four 16 x 16 int32 tiles stored and scaled into f32 sums in
 * L1) measured 0.75x this VNNI kernel at 128 x 2048 x 2048 on this
 * machine's Sapphire Rapids (242 against 328 GOP/s, one thread, same run):
 * per-block scales force a tile store and 64 vector conversions per 32K
 * multiply-adds, and with K = 32 each tdpbssd does half its work.
 *
 * The algorithm every path computes, bit for bit:
 *   - each row of x quantized as in generation (kiln__qmm_quantize_x:
 *     int8 a per block of 32, scale da = f16(amax / 127));
 *   - W's int8 values w (Q8_0: qs; Q4_0: nibble - 8) and scales dw;
 *   - per output (i, j) and block b the exact int32 S = sum a w, then
 *       y = 0;  for b in order:  y = fmaf((float)S, da[i][b] * dw[j][b], y)
 *     (|S| <= 32 * 128 * 128 = 2^19, so (float)S is exact).
 * kiln__qmm_gemm_ref is that loop in C; the SIMD kernels (VNNI: vpdpbusd,
 * w + off unsigned against signed x, each block's sum starting from
 * -off sum(x), so S comes out exact; AVX2 and AVX-512 without VNNI:
 * vpmaddubsw's int16 pairs, Q8_0 as |w| times sign(x, w) on AVX2 and as
 * the nibbles of w + 128 on AVX-512) run the same order in each lane.
 *
 * This is not the batch-1 products' order (qmatmul.h: per quad of a block
 * one f32 lane, summed as a tree at the end), so a row of a prompt may
 * differ from the same row computed alone in the last bits. Following
 * that order would take a conversion and a multiply-add per quad (8 per
 * block for Q8_0) instead of one per block.
 *
 *     if (kiln__qmm_gemm_available(t)) s = kiln__qmm_gemm(t, m, n, k, x, w, y, n_threads);
 */
#ifndef KILN_CPU_QMATMUL_GEMM_H
#define KILN_CPU_QMATMUL_GEMM_H

#include "internal.h"

/* Columns of W per packed panel the SIMD kernels take at once (one tile). */
#define KILN_QMM_GEMM_NC 6
/* Columns of W per panel (a unit of the threads' work) */
#define KILN_QMM_GEMM_NU (16 * KILN_QMM_GEMM_NC)

/* The operands the SIMD kernels read (packed by their pack_x / pack_w):
 *   x: groups of 16 rows, block by block, quad by quad:
 *        a(i, 32 b + 4 q + e) at ((i / 16) * nb + b) * 512 + q * 64 + (i % 16) * 4 + e
 *      (one zmm per group and quad); at ((i / 16) * nb + b) * 16 + i % 16
 *      the scale da and xs = -off * (sum of the block's codes), off the
 *      offset that makes W's values unsigned (Q8_0 128, Q4_0 8; Q8_0 0
 *      where the kernels keep W signed: q8_off);
 *   W panel (per thread): for column c of the panel, wp + c * nb * 32
 *      holds its values + off in order, dw + c * nb its scales; a Q8_0
 *      panel of kernels with q8_split holds two planes of bytes instead,
 *      the second at wp + (KILN_QMM_GEMM_NU + c) * nb * 32: w and |w|
 *      (unsigned: 128 for -128) with q8_off 0 (AVX2), the high and the
 *      low nibbles of w + 128 with q8_off 128 (AVX-512 without VNNI). */
typedef struct kiln_qmm_gemm_kernels {
    /* one row of x (k = 32 nb values): xp, da, xs point at the row's
     * bytes, scale and sum of block 0 */
    void (*pack_x)(const float *x, int64_t nb, int32_t off, int8_t *xp, float *da, int32_t *xs);
    /* columns [0, cols) of W (w: the first byte of column 0's row) into
     * the panel layout, zeros up to nc (a multiple of KILN_QMM_GEMM_NC) */
    void (*pack_w)(kiln_dtype t, const void *w, int64_t cols, int64_t nc, int64_t nb, uint8_t *wp, float *dw);
    /* out[c][r] (c < KILN_QMM_GEMM_NC, r < 32) of rows (1 .. 32) rows of
     * packed x, in 1 or 2 groups (xp, da, xs at the first group; the
     * group's rows past rows are padding, computed or not), against
     * KILN_QMM_GEMM_NC panel columns (wp, dw at the first), over blocks
     * [b0, b1) of nb: out is set (first) or added to, in the reference's
     * order as long as the blocks come in order */
    void (*tile_q8)(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first,
                    float out[KILN_QMM_GEMM_NC][32]);
    /* the same for Q4_0's panels */
    void (*tile_q4)(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp,
                    const float *dw, int64_t nb, int64_t b0, int64_t b1, bool first,
                    float out[KILN_QMM_GEMM_NC][32]);
    int32_t q8_off; /* Q8_0's off: 128, or 0 where the panel keeps w signed */
    bool q8_split;  /* a Q8_0 panel holds two planes (above) */
} kiln_qmm_gemm_kernels;

/* each NULL when not built */
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512vnni(void);
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avxvnni(void);
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx512(void);
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_avx2(void);
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_neondot(void);

/* pack_x by the scalar quantizer, and pack_w with W signed (Q8_0's
 * q8_off 0, Q4_0's nibble), for the sets that need no faster ones */
void kiln__qmm_gemm_pack_x(const float *x, int64_t nb, int32_t off, int8_t *xp, float *da, int32_t *xs);
void kiln__qmm_gemm_pack_w(kiln_dtype t, const void *w, int64_t cols, int64_t nc, int64_t nb, uint8_t *wp,
                           float *dw);

/* Whether the integer path runs for dtype t on this CPU (caps in force). */
bool kiln__qmm_gemm_available(kiln_dtype t);

/* y[m, n] = x[m, k] . W^T (W contiguous [n, k] Q8_0 or Q4_0), threaded over
 * panels of W's rows; only when kiln__qmm_gemm_available(t). */
kiln_status kiln__qmm_gemm(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                           int n_threads);

/* The scalar reference of the same algorithm (one thread; tests). */
kiln_status kiln__qmm_gemm_ref(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y);

#endif
