/* gemm_i8_neon.c — int8 GEMM on plain ARM64 NEON (no dot product): a 2 x 16
 * tile of C. Each k quad of a row (packed A, gemm_i8.h: 2-row blocks of 4 k)
 * is repeated across a register and multiplied, widening to int16 (smull,
 * exact: |a b| <= 2^14), against a k quad of the 16-column B panel; pairs of
 * products are added into int32 lanes (sadalp), and the two lanes of each
 * column are folded at the end (addp). */
#if defined(__aarch64__)
#include "gemm_i8.h"

#include <arm_neon.h>
#include <string.h>

#define MR KILN_S8_NEON_MR
#define GROUP 16

/* rows x cols (<= 2 x 16) of C = A tile x one B panel, kp / 4 quads */
static void tile(const int8_t *a, const int8_t *b, int64_t quads, int32_t *c, int64_t ldc, int64_t rows,
                 int64_t cols) {
    int32x4_t lo[MR][4], hi[MR][4]; /* lo: columns 4x, 4x+1; hi: 4x+2, 4x+3; two lanes each */
    for (int r = 0; r < MR; r++)
        for (int x = 0; x < 4; x++) lo[r][x] = hi[r][x] = vdupq_n_s32(0);
    for (int64_t q = 0; q < quads; q++, a += MR * 4, b += 64) {
        int8x16_t bx[4] = {vld1q_s8(b), vld1q_s8(b + 16), vld1q_s8(b + 32), vld1q_s8(b + 48)};
        for (int r = 0; r < MR; r++) {
            int32_t w;
            memcpy(&w, a + r * 4, 4);
            int8x16_t av = vreinterpretq_s8_s32(vdupq_n_s32(w));
            for (int x = 0; x < 4; x++) {
                lo[r][x] = vpadalq_s16(lo[r][x], vmull_s8(vget_low_s8(bx[x]), vget_low_s8(av)));
                hi[r][x] = vpadalq_s16(hi[r][x], vmull_high_s8(bx[x], av));
            }
        }
    }
    int32_t tmp[MR][16];
    for (int r = 0; r < MR; r++)
        for (int x = 0; x < 4; x++) vst1q_s32(tmp[r] + x * 4, vpaddq_s32(lo[r][x], hi[r][x]));
    for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc, tmp[r], (size_t)cols * 4);
}

/* units [u0, u1): a 16-column panel against a group of gs row tiles */
static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kiln_s8_units *j = arg;
    const kiln_s8_packed *p = j->p;
    int32_t *c = j->c;
    const int64_t ldc = j->ldc, gs = j->gs, mt = p->mp / MR, nb = p->np / 16, quads = p->kp / 4;
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t jb = u % nb, t0 = u / nb * gs, t1 = t0 + gs < mt ? t0 + gs : mt, j0 = jb * 16;
        int64_t cols = p->n - j0 < 16 ? p->n - j0 : 16;
        for (int64_t t = t0; t < t1; t++) {
            int64_t i0 = t * MR, rows = p->m - i0 < MR ? p->m - i0 : MR;
            tile(p->a + t * quads * MR * 4, p->b + jb * p->kp * 16, quads, c + i0 * ldc + j0, ldc, rows, cols);
        }
    }
}

void kiln__gemm_s8_kernel_neon(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads) {
    int64_t mt = p->mp / MR, nb = p->np / 16, gs = GROUP;
    while (gs > 1 && (mt + gs - 1) / gs * nb < 4 * n_threads) gs /= 2;
    kiln_s8_units j = {p, c, ldc, gs, 0, NULL};
    kiln__pool_for((mt + gs - 1) / gs * nb, 1, n_threads, units, &j);
}
#endif
