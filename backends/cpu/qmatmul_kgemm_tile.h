/* qmatmul_kgemm_tile.h — the tile entry (kiln_kgemm_kernels' tile) of the
 * integer GEMMs' per-ISA headers (qmatmul_kgemm_x86.h, _neon.h), which
 * define KG_MR (rows of x a pass) and the ROWS_FN they name:
 *
 *     KG_TILE(KG_NAME(tile), KG_NAME(tile_rows))
 */
#ifndef KILN_CPU_QMATMUL_KGEMM_TILE_H
#define KILN_CPU_QMATMUL_KGEMM_TILE_H

/* NAME: the tile of rows (1 .. KILN_KGEMM_MR) of x, through ROWS_FN(R,
 * ..., h, cols) on each half h of the panel, KG_MR rows a pass (R a
 * constant in each case) */
#define KG_TILE(NAME, ROWS_FN)                                                                                  \
    static void NAME(int rows, const void *xa, size_t xrow, const void *panel, int64_t nb, bool has_min,       \
                     float *y, int64_t ldy, int cols) {                                                         \
        for (int h = 0; h < 2 && 8 * h < cols; h++) {                                                           \
            const int ch = cols - 8 * h < 8 ? cols - 8 * h : 8;                                                 \
            for (int i = 0; i < rows; i += KG_MR) {                                                             \
                const char *x = (const char *)xa + (size_t)i * xrow;                                            \
                float *yi = y + i * ldy + 8 * h;                                                                \
                switch (rows - i < KG_MR ? rows - i : KG_MR) {                                                  \
                case 1: ROWS_FN(1, x, xrow, panel, nb, has_min, yi, ldy, h, ch); break;                         \
                case 2: ROWS_FN(2, x, xrow, panel, nb, has_min, yi, ldy, h, ch); break;                         \
                case 3: ROWS_FN(3, x, xrow, panel, nb, has_min, yi, ldy, h, ch); break;                         \
                case 4: ROWS_FN(4, x, xrow, panel, nb, has_min, yi, ldy, h, ch); break;                         \
                default: break;                                                                                 \
                }                                                                                               \
            }                                                                                                   \
        }                                                                                                       \
    }

#endif
