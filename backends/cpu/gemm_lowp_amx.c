/* gemm_lowp_amx.c — bf16 GEMM on AMX tiles (tdpbf16ps). Each step makes a
 * 32x32 block of C in four 16x16 f32 accumulator tiles (2 A tiles x 2 B
 * tiles, 8 tiles in all), walking K 32 at a time over the packed operands
 * of gemm_lowp.h, whose every tile is one contiguous 1 KiB line. Threads
 * share the blocks; each loads the tile configuration before its first
 * tile instruction and releases the tiles at the end. */
#if defined(__x86_64__)
#include "amx_tiles.h"
#include "gemm_lowp_x86.h"
#include "pool.h"


/* tiles 0..3: C blocks (00 01 10 11); 4, 5: A rows 0-15 / 16-31; 6, 7: B cols 0-15 / 16-31 */
static void block(const kiln_lowp_packed *p, int64_t ib, int64_t jb, float *out) {
    int64_t chunks = p->kp / 32;
    const uint16_t *a0 = p->a + (2 * ib) * chunks * 512, *a1 = a0 + chunks * 512;
    const uint16_t *b0 = p->b + (2 * jb) * (p->kp / 2) * 32, *b1 = b0 + (p->kp / 2) * 32;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int64_t c = 0; c < chunks; c++) {
        _tile_loadd(4, a0 + c * 512, 64);
        _tile_loadd(6, b0 + c * 512, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + c * 512, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + c * 512, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 128);
    _tile_stored(1, out + 16, 128);
    _tile_stored(2, out + 16 * 32, 128);
    _tile_stored(3, out + 16 * 32 + 16, 128);
}

/* Blocks go in groups of up to GROUP block rows (A: GROUP * 64 B * Kp,
 * 512 KiB at K = 1024, stays in L2), B panels outer within a group, so each
 * B panel is reused GROUP times while it is hot; 8 measured best of 1, 4,
 * 8, 16 (1.45x over plain row order at 1024^3). A unit of work is one B
 * panel against one group, handed out dynamically: a thread that the OS
 * holds back (a busy machine) does not hold the others up. Each block is
 * computed whole by one thread, so results do not depend on the thread count. */
#define GROUP 8

typedef struct kernel_job {
    const kiln_lowp_packed *p;
    kiln_dtype c_dt;
    void *c;
    int64_t ldc, gs;
} kernel_job;

/* units [u0, u1); the tiles configured and released around them */
static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kernel_job *j = arg;
    const kiln_lowp_packed *p = j->p;
    const kiln_dtype c_dt = j->c_dt;
    void *c = j->c;
    const int64_t ldc = j->ldc, mb = p->mp / 32, nb = p->np / 32, gs = j->gs;
    size_t es = c_dt == KILN_F32 ? 4 : 2;
    alignas(64) float out[32 * 32];
    (void)tid;
    _tile_loadconfig(&kiln__amx_config);
    for (int64_t u = u0; u < u1; u++) {
        int64_t jb = u % nb, ib0 = u / nb * gs, ib1 = ib0 + gs < mb ? ib0 + gs : mb, j0 = jb * 32;
        int64_t cols = p->n - j0 < 32 ? p->n - j0 : 32;
        for (int64_t ib = ib0; ib < ib1; ib++) {
            int64_t i0 = ib * 32, rows = p->m - i0 < 32 ? p->m - i0 : 32;
            block(p, ib, jb, out);
            lowp_store_block(c_dt, out, 32, rows, cols, (char *)c + (size_t)(i0 * ldc + j0) * es, ldc);
        }
    }
    _tile_release();
}

void kiln__lowp_kernel_amx(const kiln_lowp_packed *p, kiln_dtype c_dt, void *c, int64_t ldc, int n_threads) {
    int64_t mb = p->mp / 32, nb = p->np / 32, gs = GROUP;
    while (gs > 1 && (mb + gs - 1) / gs * nb < 4 * n_threads) gs /= 2; /* enough units for every thread */
    kernel_job j = {p, c_dt, c, ldc, gs};
    kiln__pool_for((mb + gs - 1) / gs * nb, 1, n_threads, units, &j);
}
#endif
