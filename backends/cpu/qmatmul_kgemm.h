/* qmatmul_kgemm.h — the batched (prompt) path of KILN_OP_QMATMUL for the K
 * types and IQ4_XS: y[m, n] = x[m, k] . W[n, k]^T with x's rows quantized
 * to Q8_K as in generation and integer products, equal to the batch-1
 * products (qmatmul_ggml.h) row by row, bit for bit.
 *
 * Each thread takes panels of KILN_KGEMM_NC rows of W (columns of y),
 * decodes each block of the panel once (scales by kiln__qints_scales,
 * codes by the level's own loops) into the layout below, and runs every
 * row of x against it, a tile of up to KILN_KGEMM_MR rows at a time. Per row i, column j and block b it computes
 * the batch-1 reference's integers and f32 operations:
 *
 *     u = q + off >= 0 (off: 32 for Q6_K, 4 for Q3_K, 128 for IQ4_XS, else 0)
 *     P = sum over groups g of 16 of sc[g] * (sum over g of u * xq)
 *     C = sum over g of c[g] * bsum[g]     (c = mn with a min, else off sc)
 *     with a min:  y += (dx d) * (float)P + (dx dm) * (float)C
 *     without:     y += (dx d) * (float)(P - C)
 *
 * P - C is the reference's isum and C its summs, both exact in int32, and
 * the f32 operations are the reference's in its order (its "+ 0.0f"
 * without a min changes no sum), so the sums are the reference's bits.
 *
 * The panel's layout, per block (KILN_KGEMM_BLOCK bytes), with NC = 16
 * columns side by side in each 64-byte row (one zmm):
 *     u   [64 quads][NC][4]  uint8   quad q: elements 4q .. 4q + 3
 *     sc  [16 groups][NC]    int32
 *     cp  [8 pairs][NC]      int32   (c[2t], c[2t + 1]) as two int16
 *     d   [NC], dm [NC]      f32
 * Padding columns are zeros (their outputs are not stored).
 *
 * The tile kernels: AVX512-VNNI's (vpdpbusd of W's unsigned codes with a
 * broadcast quad of a row of x, vpmulld by the groups' scales, vpdpwssd of
 * the pairs, 16 columns per zmm), AVX-512's without VNNI (the same zmm
 * tiles, qmatmul_kgemm_zmm.h, with vpdpbusd as vpmaddubsw + vpmaddwd,
 * exact for codes up to 128, so IQ4_XS runs AVX2's tile there), and
 * AVX-VNNI's and AVX2's on ymm (8 columns, each half of the panel in turn;
 * AVX2 emulates vpdpbusd as AVX-512 does, IQ4_XS's by a tile of its own on
 * signed codes); NEON's and NEON-dotprod's on their own panel of signed codes
 * (qmatmul_kgemm_neon.h: smull / sadalp, or sdot by element, 8 columns a
 * pass). The scalar level runs the dequantized panels of qmatmul.c
 * (kiln__qmm_kgemm_handles). The driver also runs the blocks of 32's tiles
 * (qmatmul_q32gemm.h), the same way.
 *
 *     if (kiln__qmm_kgemm_handles(t)) s = kiln__qmm_kgemm(t, m, n, k, x, w, y, n_threads);
 */
#ifndef KILN_CPU_QMATMUL_KGEMM_H
#define KILN_CPU_QMATMUL_KGEMM_H

#include "internal.h"

#define KILN_KGEMM_NC 16 /* columns of W per panel (zmm lanes) */
#define KILN_KGEMM_MR 8  /* rows of x per tile at most */
#define KILN_KGEMM_BLOCK (KILN_KGEMM_NC * (256 + 16 * 4 + 8 * 4 + 2 * 4))

typedef struct kiln_kgemm_kernels {
    /* columns [0, cols) of W of dtype t (w: column 0's row of nb blocks,
     * rows wrow bytes apart) into the panel layout, zeros past cols */
    void (*pack)(kiln_dtype t, const char *w, size_t wrow, int cols, int64_t nb, char *panel);
    /* rows (1 .. KILN_KGEMM_MR) of activations (row r's nb blocks at
     * xa + r * xrow: Q8_K, or kiln_q32x for the blocks of 32) against one
     * packed panel of nb blocks: y[r * ldy + c] for the first cols columns */
    void (*tile)(int rows, const void *xa, size_t xrow, const void *panel, int64_t nb, bool has_min, float *y,
                 int64_t ldy, int cols);
    /* whether the tile multiplies codes up to 255 exactly (IQ4_XS's,
     * IQ4_NL's); AVX2's pairs of code times x (vpmaddubsw, int16
     * saturating) only up to 128 */
    bool wide_codes;
    size_t block; /* bytes of a panel's block */
} kiln_kgemm_kernels;

/* each NULL when not built */
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512vnni(void);
const kiln_kgemm_kernels *kiln__kgemm_kernels_avxvnni(void);
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx512(void);
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2(void);
const kiln_kgemm_kernels *kiln__kgemm_kernels_avx2_iq4xs(void); /* IQ4_XS's tile: its codes signed */
const kiln_kgemm_kernels *kiln__kgemm_kernels_neondot(void);
const kiln_kgemm_kernels *kiln__kgemm_kernels_neon(void);

/* t's tiles at the level in force (the widest the caps allow); NULL
 * where none is built. */
const kiln_kgemm_kernels *kiln__qmm_kgemm_kernels(kiln_dtype t);

/* Whether weight dtype t's prompts run here: the K types and IQ4_XS, and
 * the blocks of 32 of qmatmul_q32gemm.h (Q4_1, Q5_0, Q5_1, IQ4_NL), where
 * a tile runs them (from AVX2 up, IQ4_NL from AVX-VNNI up;
 * NEON and NEON-dotprod).
 * The K types at 128 x 2048 x 2048, one thread (Zen 5 running each
 * level): the ymm tiles took 0.3-0.6x the batch-1 kernels' time row by
 * row and 0.5-0.7x the dequantized panels' where the f32 GEMM is
 * AVX-512's. Not for fewer than
 * KILN_QMM_PANEL_MIN_M rows: packing W costs about what 8-12 rows of
 * batch-1 products do (at 2, 4 and 7 rows the tiles took 3.5-6x, 2.2-3.8x
 * and 1.4-2.2x their time, every level); for the types with rows kernels
 * (qmatmul_ggml.h) not for fewer than KILN_QMM_ROWS_TILES_MIN. */
bool kiln__qmm_kgemm_handles(kiln_dtype t);

/* y[m, n] = x[m, k] . W^T (W contiguous [n, k] of dtype t), threaded over
 * panels of W's rows; only when kiln__qmm_kgemm_handles(t). */
kiln_status kiln__qmm_kgemm(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                            int n_threads);

#endif
