/* gemm_i8_tiles_avx2.c — the loop over tiles both VNNI kernels of the int8
 * GEMM share (gemm_i8_avxvnni.c, gemm_i8_avx512vnni.c), and the column sums
 * it starts from: AVX2, the level below both (AVX-VNNI CPUs may lack
 * AVX-512, AVX512-VNNI CPUs AVX-VNNI).
 *
 * vpdpbusd multiplies unsigned by signed bytes, so packed A carries a + 128
 * (gemm_i8.h) and every column starts from -128 * sum_p B(j, p): exact in
 * int32 arithmetic modulo 2^32, like the sums themselves. Each k quad of a
 * row is one 32-bit broadcast against one quad-row of a 16-column B panel.
 * K is cut into KC-wide blocks so a tile's B panels (up to 64 x KC bytes)
 * stay in L1 while the row tiles of a group pass over them; a later block
 * adds to the partial C the earlier ones wrote. */
#if defined(__x86_64__)
#include "gemm_i8.h"

#include <immintrin.h>

#define MR KILN_S8_VNNI_MR
#define KC 512   /* k per block: 64 columns x 512 = 32 KiB of B */
#define GROUP 16 /* row tiles per unit of work (96 rows) */

/* 128 * the column sums of one packed B panel (bytes summed in pairs into
 * int16 by vpmaddubsw against ones, those pairs into int32 by vpmaddwd). */
static void colsum(const int8_t *b, int64_t quads, int32_t *out) {
    __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
    __m256i s0 = _mm256_setzero_si256(), s1 = _mm256_setzero_si256();
    for (int64_t q = 0; q < quads; q++, b += 64) {
        __m256i b0 = _mm256_loadu_si256((const __m256i *)b), b1 = _mm256_loadu_si256((const __m256i *)(b + 32));
        s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b0), ones16));
        s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, b1), ones16));
    }
    _mm256_storeu_si256((__m256i *)out, _mm256_slli_epi32(s0, 7));
    _mm256_storeu_si256((__m256i *)(out + 8), _mm256_slli_epi32(s1, 7));
}

/* panels [g0, g1) of 16 columns: their sums */
static void colsums(void *arg, int64_t g0, int64_t g1, int tid) {
    const kiln_s8_packed *p = ((const kiln_s8_units *)arg)->p;
    const int64_t quads = p->kp / 4;
    (void)tid;
    for (int64_t g = g0; g < g1; g++) colsum(p->b + g * quads * 64, quads, p->colsum + g * 16);
}

/* units [u0, u1): one column block (nbw columns) against a group of row
 * tiles; within a unit, K blocks outer so the block's B panels are reused
 * by every row tile of the group. */
static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kiln_s8_units *j = arg;
    const kiln_s8_packed *p = j->p;
    kiln_s8_vnni_tile *tile = (kiln_s8_vnni_tile *)j->tile;
    int32_t *c = j->c;
    const int64_t ldc = j->ldc, nbw = j->nbw, gs = j->gs, mt = p->mp / MR, nbk = (p->np + nbw - 1) / nbw,
                  quads = p->kp / 4, ps = quads * 64;
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t jb = u % nbk, t0 = u / nbk * gs, t1 = t0 + gs < mt ? t0 + gs : mt, j0 = jb * nbw;
        int64_t cols = p->n - j0 < nbw ? p->n - j0 : nbw;
        int np = (int)((p->np - j0 < nbw ? p->np - j0 : nbw) / 16);
        for (int64_t k0 = 0; k0 < quads; k0 += KC / 4) {
            int64_t kq = quads - k0 < KC / 4 ? quads - k0 : KC / 4;
            for (int64_t t = t0; t < t1; t++) {
                int64_t i0 = t * MR, rows = p->m - i0 < MR ? p->m - i0 : MR;
                if (rows <= 0) continue;
                tile(p->a + t * quads * MR * 4 + k0 * MR * 4, p->b + (j0 / 16) * ps + k0 * 64, kq, ps, np,
                     p->colsum + j0, k0 == 0, c + i0 * ldc + j0, ldc, rows, cols);
            }
        }
    }
}

/* Column sums first, then the units, handed out dynamically. */
void kiln__gemm_s8_drive_vnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads, int nbw,
                              kiln_s8_vnni_tile *tile) {
    int64_t mt = p->mp / MR, nbk = (p->np + nbw - 1) / nbw, gs = GROUP;
    while (gs > 1 && (mt + gs - 1) / gs * nbk < 4 * n_threads) gs /= 2;
    kiln_s8_units j = {p, c, ldc, gs, nbw, (const void *)tile};
    kiln__pool_for(p->np / 16, 1, n_threads, colsums, &j);
    kiln__pool_for((mt + gs - 1) / gs * nbk, 1, n_threads, units, &j);
}
#endif
