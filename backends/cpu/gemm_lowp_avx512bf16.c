/* gemm_lowp_avx512bf16.c — bf16 GEMM with vdpbf16ps, for AVX-512 CPUs
 * without AMX, on the packed operands the AMX kernel reads (gemm_lowp.h).
 *
 * GotoBLAS-style: an 8 x 48 micro-kernel keeps 24 accumulators in zmm
 * registers (each step 3 loads of B and 8 broadcasts of A for 24
 * vdpbf16ps); a kc-deep panel of B's 48 columns (a quarter of L2) serves
 * every 8-row strip of an A block (half of L2) in turn. C (f32) holds the
 * partial sums between k blocks: each block's accumulators start from
 * them, so every element is the one chain of vdpbf16ps over k in order,
 * the bits of an unblocked loop at any kc and thread count. A bf16 or f16
 * C cannot hold partials: its products run in one k block.
 *
 * Threads take units (a block of rows x a block of columns) from kiln's
 * pool; the packed operands are shared. */
#if defined(__x86_64__)
#include "gemm_kernels.h"
#include "gemm_lowp_x86.h"
#include "pool.h"

#include <stdalign.h>
#include <string.h>

#define MR 8
#define NR 48 /* three 16-column panels of packed B */

static inline __m512 dp(__m512 acc, __m512i a, __m512i b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }

static inline __m512i pair(const uint16_t *p) {
    int32_t x;
    memcpy(&x, p, 4);
    return _mm512_set1_epi32(x);
}

/* Where a tile's accumulators come from and go: rows x cols of f32 at c
 * (row stride ldc), mask[v] the columns of vector v. */
typedef struct tile_c {
    float *c;
    int64_t ldc;
    int rows;
    __mmask16 mask[3];
} tile_c;

#define ROWS(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)
#define V1(X, i) X(i, 0)
#define V2(X, i) X(i, 0) X(i, 1)
#define V3(X, i) X(i, 0) X(i, 1) X(i, 2)
#define DECL(i, v) __m512 c##i##v = _mm512_setzero_ps();
#define LOAD(i, v) c##i##v = _mm512_maskz_loadu_ps(t->mask[v], t->c + (i) * t->ldc + 16 * (v));
#define SAVE(i, v) _mm512_mask_storeu_ps(t->c + (i) * t->ldc + 16 * (v), t->mask[v], c##i##v);
#define DP(i, v) c##i##v = dp(c##i##v, av, b##v);
#define BLOAD(v) __m512i b##v = _mm512_loadu_si512(b + (v) * bs + q * 32);

/* One tile: C[8 x 16 NV] (+)= A strip (chunks of 32 k, a: the strip's
 * rows in its first 1 KiB block) x NV panels of B (b, panel stride bs).
 * first: start from zero, not from C. */
#define TILE(name, NV)                                                                                             \
    static void name(const uint16_t *a, const uint16_t *b, int64_t bs, int64_t chunks, const tile_c *t,          \
                     bool first) {                                                                                 \
        ROWS(DECL##NV)                                                                                             \
        if (!first) {                                                                                              \
            ROWS(LOAD##NV##R)                                                                                      \
        }                                                                                                          \
        for (int64_t ch = 0; ch < chunks; ch++, a += 512, b += 512) {                                              \
            _Pragma("GCC unroll 16") for (int q = 0; q < 16; q++) {                                                \
                if (!(q & 1)) _mm_prefetch((const char *)(a + 512 + q / 2 * 32), _MM_HINT_T0);                     \
                BLOADS##NV                                                                                         \
                ROWS(STEP##NV)                                                                                     \
            }                                                                                                      \
        }                                                                                                          \
        ROWS(SAVE##NV##R)                                                                                          \
    }
#define DECL3(i) V3(DECL, i)
#define DECL2(i) V2(DECL, i)
#define DECL1(i) V1(DECL, i)
#define LOAD3R(i) if ((i) < t->rows) { V3(LOAD, i) }
#define LOAD2R(i) if ((i) < t->rows) { V2(LOAD, i) }
#define LOAD1R(i) if ((i) < t->rows) { V1(LOAD, i) }
#define SAVE3R(i) if ((i) < t->rows) { V3(SAVE, i) }
#define SAVE2R(i) if ((i) < t->rows) { V2(SAVE, i) }
#define SAVE1R(i) if ((i) < t->rows) { V1(SAVE, i) }
#define BLOADS3 BLOAD(0) BLOAD(1) BLOAD(2)
#define BLOADS2 BLOAD(0) BLOAD(1)
#define BLOADS1 BLOAD(0)
#define STEP3(i) { __m512i av = pair(a + (i) * 32 + 2 * q); V3(DP, i) }
#define STEP2(i) { __m512i av = pair(a + (i) * 32 + 2 * q); V2(DP, i) }
#define STEP1(i) { __m512i av = pair(a + (i) * 32 + 2 * q); V1(DP, i) }

TILE(tile3, 3)
TILE(tile2, 2)
TILE(tile1, 1)

typedef struct kernel_job {
    const kiln_lowp_packed *p;
    kiln_dtype c_dt;
    void *c;
    int64_t ldc;
    int64_t kc;      /* k block, a multiple of 32 */
    int64_t mu, nu;  /* a unit's rows (multiple of MR) and columns (of NR) */
    int64_t units_n; /* units across */
} kernel_job;

static inline __mmask16 mask16(int64_t cnt) {
    return cnt <= 0 ? 0 : cnt >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << cnt) - 1);
}

/* Rows [i0, i1) x columns [j0, j1) of C, k blocks outermost, then B's
 * 48-column panels, then A's 8-row strips. */
static void unit(const kernel_job *j, int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    const kiln_lowp_packed *p = j->p;
    const int64_t chunks = p->kp / 32, bs = p->kp * 16;
    const bool f32 = j->c_dt == KILN_F32;
    alignas(64) float out[MR * NR];
    for (int64_t p0 = 0; p0 < p->kp; p0 += j->kc) {
        int64_t kb = (p->kp - p0 < j->kc ? p->kp - p0 : j->kc) / 32;
        for (int64_t jr = j0; jr < j1; jr += NR) {
            int64_t cols = (p->n < jr + NR ? p->n : jr + NR) - jr, nv = (p->np - jr) / 16 < 3 ? (p->np - jr) / 16 : 3;
            const uint16_t *b = p->b + (jr / 16) * bs + p0 * 16;
            for (int64_t ir = i0; ir < i1 && ir < p->m; ir += MR) {
                const uint16_t *a = p->a + ((ir / 16) * chunks + p0 / 32) * 512 + (ir % 16) * 32;
                int rows = (int)(p->m - ir < MR ? p->m - ir : MR);
                tile_c t = {out, NR, MR, {0xffff, 0xffff, 0xffff}};
                if (f32) { /* C itself holds the partial sums */
                    t = (tile_c){(float *)j->c + ir * j->ldc + jr, j->ldc, rows,
                                 {mask16(cols), mask16(cols - 16), mask16(cols - 32)}};
                    /* the next strip's C on its way from L3 (its loads, and its stores' fetches) */
                    for (int64_t i = ir + MR; i < ir + 2 * MR && i < p->m; i++) {
                        const float *ci = (const float *)j->c + i * j->ldc + jr;
                        for (int64_t x = 0; x < cols; x += 16) _mm_prefetch((const char *)(ci + x), _MM_HINT_T0);
                        _mm_prefetch((const char *)(ci + cols - 1), _MM_HINT_T0);
                    }
                }
                if (nv == 3) tile3(a, b, bs, kb, &t, p0 == 0);
                else if (nv == 2) tile2(a, b, bs, kb, &t, p0 == 0);
                else tile1(a, b, bs, kb, &t, p0 == 0);
                if (!f32) /* one k block (kc = kp): the sums are whole */
                    lowp_store_block(j->c_dt, out, NR, rows, cols, (uint16_t *)j->c + ir * j->ldc + jr, j->ldc);
            }
        }
    }
}

static void units(void *arg, int64_t u0, int64_t u1, int tid) {
    const kernel_job *j = arg;
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t i0 = u / j->units_n * j->mu, j0 = u % j->units_n * j->nu;
        int64_t j1 = j0 + j->nu < j->p->np ? j0 + j->nu : j->p->np;
        unit(j, i0, i0 + j->mu, j0, j1);
    }
}

static int64_t clamp64(int64_t v, int64_t lo, int64_t hi) { return v < lo ? lo : v > hi ? hi : v; }

void kiln__lowp_kernel_avx512bf16(const kiln_lowp_packed *p, kiln_dtype c_dt, void *c, int64_t ldc, int n_threads) {
    const kiln__cpu_caches *caches = kiln__cpu_caches_get();
    int64_t l2 = caches->l2 > 0 ? caches->l2 : 1 << 20;
    kernel_job j = {p, c_dt, c, ldc, p->kp, 0, 0, 0};
    /* k blocks as deep as a quarter of L2 holds B's kc x 48 panel, of
     * equal depth: each block loads and stores all of C, which cost more
     * than streaming the panel from L2 (Zen 5, 1 MiB L2, 1 thread, CPU
     * time: kc 256, a panel of half of L1, ran 1024^2 at 0.85x and 2048^2
     * at 0.85x of kc 1024, kc 512 at 0.9x and 0.95x) */
    if (c_dt == KILN_F32) {
        int64_t kc_max = clamp64(l2 / 4 / (NR * 2) / 32 * 32, 256, 4096), nb = (p->kp + kc_max - 1) / kc_max;
        j.kc = (p->kp / 32 + nb - 1) / nb * 32;
    }
    /* a unit's A block (mu x kc) in half of L2, reused across all of B */
    j.mu = clamp64(l2 / 2 / (j.kc * 2) / MR * MR, MR, (p->mp + MR - 1) / MR * MR);
    j.nu = (p->np + NR - 1) / NR * NR;
    /* enough units for every thread to take a few: fewer rows first */
    while (n_threads > 1 && ((p->mp + j.mu - 1) / j.mu) * ((p->np + j.nu - 1) / j.nu) < 4 * n_threads) {
        if (j.mu >= 8 * MR) j.mu = (j.mu / 2 + MR - 1) / MR * MR;
        else if (j.nu >= 2 * NR) j.nu = (j.nu / 2 + NR - 1) / NR * NR;
        else break;
    }
    j.units_n = (p->np + j.nu - 1) / j.nu;
    kiln__pool_for((p->mp + j.mu - 1) / j.mu * j.units_n, 1, n_threads, units, &j);
}
#endif
