/* gemm_i8_amx.c — int8 GEMM on AMX tiles (tdpbssd, signed x signed bytes,
 * int32 sums). Each step makes a 32x32 block of C in four 16x16 int32
 * accumulator tiles (2 A tiles x 2 B tiles, 8 tiles in all), walking K 64 at
 * a time over the packed operands of gemm_i8.h, whose every tile is one
 * contiguous 1 KiB line. Threads share the blocks; each loads the tile
 * configuration before its first tile instruction and releases the tiles at
 * the end. The structure follows the bf16 kernel (gemm_lowp_amx.c). */
#if defined(__x86_64__)
#include "amx_tiles.h"
#include "gemm_i8.h"

#include <immintrin.h>

/* tiles 0..3: C blocks (00 01 10 11); 4, 5: A rows 0-15 / 16-31; 6, 7: B
 * cols 0-15 / 16-31. Stores the block with row stride ld (in int32). */
static void block(const kiln_s8_packed *p, int64_t ib, int64_t jb, int32_t *out, int64_t ld) {
    int64_t chunks = p->kp / 64;
    const int8_t *a0 = p->a + (2 * ib) * chunks * 1024, *a1 = a0 + chunks * 1024;
    const int8_t *b0 = p->b + (2 * jb) * p->kp * 16, *b1 = b0 + p->kp * 16;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c = 0; c < chunks; c++) {
        _tile_loadd(4, a0 + c * 1024, 64);
        _tile_loadd(6, b0 + c * 1024, 64);
        _tile_dpbssd(0, 4, 6);
        _tile_loadd(7, b1 + c * 1024, 64);
        _tile_dpbssd(1, 4, 7);
        _tile_loadd(5, a1 + c * 1024, 64);
        _tile_dpbssd(2, 5, 6);
        _tile_dpbssd(3, 5, 7);
    }
    _tile_stored(0, out, ld * 4);
    _tile_stored(1, out + 16, ld * 4);
    _tile_stored(2, out + 16 * ld, ld * 4);
    _tile_stored(3, out + 16 * ld + 16, ld * 4);
}

/* Blocks go in groups of up to GROUP block rows, B panels outer within a
 * group, so each B panel is reused GROUP times while it is hot (as in the
 * bf16 kernel). A unit of work is one B panel against one group, handed out
 * dynamically. Each block is computed whole by one thread, so results do
 * not depend on the thread count (they could not anyway: integer sums). */
#define GROUP 8

/* units [u0, u1); the tiles configured and released around them */
static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kiln_s8_units *j = arg;
    const kiln_s8_packed *p = j->p;
    int32_t *c = j->c;
    const int64_t ldc = j->ldc, mb = p->mp / 32, nb = p->np / 32, gs = j->gs;
    alignas(64) int32_t out[32 * 32];
    (void)tid;
    _tile_loadconfig(&kiln__amx_config);
    for (int64_t u = u0; u < u1; u++) {
        int64_t jb = u % nb, ib0 = u / nb * gs, ib1 = ib0 + gs < mb ? ib0 + gs : mb, j0 = jb * 32;
        int64_t cols = p->n - j0 < 32 ? p->n - j0 : 32;
        __mmask16 m0 = cols >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cols) - 1);
        __mmask16 m1 = cols >= 32 ? (__mmask16)0xffff : cols <= 16 ? 0 : (__mmask16)((1u << (cols - 16)) - 1);
        for (int64_t ib = ib0; ib < ib1; ib++) {
            int64_t i0 = ib * 32, rows = p->m - i0 < 32 ? p->m - i0 : 32;
            int32_t *dst = c + i0 * ldc + j0;
            if (rows == 32 && cols == 32) {
                block(p, ib, jb, dst, ldc);
                continue;
            }
            block(p, ib, jb, out, 32);
            for (int64_t i = 0; i < rows; i++) {
                _mm512_mask_storeu_epi32(dst + i * ldc, m0, _mm512_load_si512(out + i * 32));
                _mm512_mask_storeu_epi32(dst + i * ldc + 16, m1, _mm512_load_si512(out + i * 32 + 16));
            }
        }
    }
    _tile_release();
}

void kiln__gemm_s8_kernel_amx(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads) {
    int64_t mb = p->mp / 32, nb = p->np / 32, gs = GROUP;
    while (gs > 1 && (mb + gs - 1) / gs * nb < 4 * n_threads) gs /= 2; /* enough units for every thread */
    kiln_s8_units j = {p, c, ldc, gs, 0, NULL};
    kiln__pool_for((mb + gs - 1) / gs * nb, 1, n_threads, units, &j);
}
#endif
