/* gemm_i8_neondot.c — int8 GEMM with the ARMv8.2 dot product (sdot,
 * vdotq_laneq_s32): a 4 x 16 tile of C in 16 int32x4 accumulators. Packed A
 * (gemm_i8.h: 4-row blocks of 16 k) gives one register per row holding 4 k
 * quads; each lane of it is dotted against one k quad of the 16-column B
 * panel (four registers of 4 columns x 4 k). */
#if defined(__aarch64__)
#include "gemm_i8.h"

#include <arm_neon.h>
#include <string.h>

#define MR KILN_S8_NEONDOT_MR
#define GROUP 16

#define LANE(l)                                                                                      \
    {                                                                                                \
        const int8_t *bq = b + (4 * c + (l)) * 64;                                                   \
        int8x16_t b0 = vld1q_s8(bq), b1 = vld1q_s8(bq + 16), b2 = vld1q_s8(bq + 32), b3 = vld1q_s8(bq + 48); \
        for (int r = 0; r < MR; r++) {                                                               \
            acc[r][0] = vdotq_laneq_s32(acc[r][0], b0, ar[r], l);                                    \
            acc[r][1] = vdotq_laneq_s32(acc[r][1], b1, ar[r], l);                                    \
            acc[r][2] = vdotq_laneq_s32(acc[r][2], b2, ar[r], l);                                    \
            acc[r][3] = vdotq_laneq_s32(acc[r][3], b3, ar[r], l);                                    \
        }                                                                                            \
    }

/* rows x cols (<= 4 x 16) of C = A tile x one B panel, kp / 16 chunks */
static void tile(const int8_t *a, const int8_t *b, int64_t chunks, int32_t *c, int64_t ldc, int64_t rows,
                 int64_t cols) {
    int32x4_t acc[MR][4];
    for (int r = 0; r < MR; r++)
        for (int x = 0; x < 4; x++) acc[r][x] = vdupq_n_s32(0);
    for (int64_t c = 0; c < chunks; c++) {
        int8x16_t ar[MR];
        for (int r = 0; r < MR; r++) ar[r] = vld1q_s8(a + c * MR * 16 + r * 16);
        LANE(0) LANE(1) LANE(2) LANE(3)
    }
    if (rows == MR && cols == 16) {
        for (int r = 0; r < MR; r++)
            for (int x = 0; x < 4; x++) vst1q_s32(c + r * ldc + x * 4, acc[r][x]);
        return;
    }
    int32_t tmp[MR][16];
    for (int r = 0; r < MR; r++)
        for (int x = 0; x < 4; x++) vst1q_s32(tmp[r] + x * 4, acc[r][x]);
    for (int64_t r = 0; r < rows; r++) memcpy(c + r * ldc, tmp[r], (size_t)cols * 4);
}

/* units [u0, u1): a 16-column panel against a group of gs row tiles */
static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kiln_s8_units *j = arg;
    const kiln_s8_packed *p = j->p;
    int32_t *c = j->c;
    const int64_t ldc = j->ldc, gs = j->gs, mt = p->mp / MR, nb = p->np / 16, chunks = p->kp / 16;
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t jb = u % nb, t0 = u / nb * gs, t1 = t0 + gs < mt ? t0 + gs : mt, j0 = jb * 16;
        int64_t cols = p->n - j0 < 16 ? p->n - j0 : 16;
        for (int64_t t = t0; t < t1; t++) {
            int64_t i0 = t * MR, rows = p->m - i0 < MR ? p->m - i0 : MR;
            tile(p->a + t * chunks * MR * 16, p->b + jb * p->kp * 16, chunks, c + i0 * ldc + j0, ldc, rows, cols);
        }
    }
}

void kiln__gemm_s8_kernel_neondot(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads) {
    int64_t mt = p->mp / MR, nb = p->np / 16, gs = GROUP;
    while (gs > 1 && (mt + gs - 1) / gs * nb < 4 * n_threads) gs /= 2;
    kiln_s8_units j = {p, c, ldc, gs, 0, NULL};
    kiln__pool_for((mt + gs - 1) / gs * nb, 1, n_threads, units, &j);
}
#endif
