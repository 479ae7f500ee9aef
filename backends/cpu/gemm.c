/* gemm.c — f32/f64 GEMM entry points (gemm.h) and kiln's own packed f32
 * GEMM: GotoBLAS/BLIS-style blocking (KC deep, MC rows of A, NC columns
 * of B, sized from the CPU's caches: gemm_blocks.c), B packed into NR-wide
 * row panels and A into MR-tall column panels (transposes and strides
 * absorbed by the packing), an ISA micro-kernel (gemm_kernels.h) per MR x
 * NR tile. Threads pack each block of B together into a shared buffer,
 * then take units of work (rows x panels, A packed in the thread's own
 * buffer) from kiln's pool (pool.h); a product whose A fits L2 gives each
 * thread its own columns instead, nothing shared. One-row/one-column
 * problems run GEMV-shaped loops; small ones read B and A^T in place in a
 * single pass. kiln__sgemm sends
 * big problems to OpenBLAS only when its core is as wide as kiln's. */
#include "gemm.h"
#include "host_gemm.h"

#include "cpu_features.h"
#include "gemm_kernels.h"
#include "pool.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#ifdef KILN_BLAS
#include <cblas.h>
#endif

#define MAX_MR 16
#define MAX_NR 32

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Per-thread packing buffers (0: A, 1: B) that only grow: the pool's
 * threads live on, so this saves a page-faulting allocation on every call;
 * freed when the thread ends (scratch.h). */
static float *scratch(int slot, size_t n) {
    return kiln__scratch_slot(slot ? KILN_SCRATCH_GEMM_B : KILN_SCRATCH_GEMM_A, n * sizeof(float));
}

/* C = beta * C over m x n (beta == 0 writes zeros without reading). */
static void scale_c(int64_t m, int64_t n, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        if (beta == 0) memset(ci, 0, (size_t)n * sizeof *ci);
        else if (beta != 1)
            for (int64_t j = 0; j < n; j++) ci[j] *= beta;
    }
}

/* ---- packing ---------------------------------------------------------- */

/* Each row's run of B is short and a row (ldb) from the last, a stream
 * the hardware prefetcher starts cold every time: the row this many
 * ahead is fetched while one is copied */
#define PACK_B_AHEAD 4

/* Rows [q0, q1) of a kc-deep block whose row p starts at s0 + p*ld,
 * columns 0 .. nc, into w-wide panels: d[panel*w*kc + p*w + j],
 * zero-padded. Read row by row, each row spread over the panels: reading
 * it panel by panel (kc rows of w floats, each a page apart at ld 1024)
 * took 4.7% of a 1-thread 1024^2 product as B. A transposed A (a weight
 * gradient's G^T X) is packed the same way. */
static void pack_rows(int w, const float *s0, int64_t ld, int64_t kc, int64_t q0, int64_t q1, int64_t nc, float *d0) {
    const int64_t full = nc / w * w;
    for (int64_t p = q0; p < q1; p++) {
        const float *s = s0 + p * ld;
        const float *ahead = p + PACK_B_AHEAD < q1 ? s + PACK_B_AHEAD * ld : NULL;
        float *d = d0 + p * w;
        for (int64_t jr = 0; jr < full; jr += w) {
            if (ahead)
                for (int l = 0; l < w; l += 16) __builtin_prefetch(ahead + jr + l);
#pragma omp simd
            for (int j = 0; j < w; j++) d[jr * kc + j] = s[jr + j];
        }
        if (full < nc) {
            float *e = d + full * kc;
            int j = 0;
            for (; j < nc - full; j++) e[j] = s[full + j];
            for (; j < w; j++) e[j] = 0;
        }
    }
}

/* op(A)[i0 .. i0+mc, p0 .. p0+kc] into MR-row panels: pa[panel*MR*kc + p*MR + i], zero-padded. */
static void pack_a(const kiln__sgemm_kernel *K, bool ta, const float *a, int64_t lda, int64_t i0, int64_t mc,
                   int64_t p0, int64_t kc, float *pa) {
    int w = K->mr;
    if (ta) {
        pack_rows(w, a + p0 * lda + i0, lda, kc, 0, kc, mc, pa);
        return;
    }
    for (int64_t ir = 0; ir < mc; ir += w)
        K->pack_t(a + (i0 + ir) * lda + p0, lda, (int)min64(w, mc - ir), kc, w, pa + ir * kc);
}

/* Rows [q0, q1) of the kc-deep block of op(B) at p0, columns j0 .. j0+nc,
 * into NR-wide panels: pb[panel*NR*kc + p*NR + j], zero-padded. */
static void pack_b_rows(const kiln__sgemm_kernel *K, bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                        int64_t q0, int64_t q1, int64_t j0, int64_t nc, float *pb) {
    int w = K->nr;
    if (tb) {
        for (int64_t jr = 0; jr < nc; jr += w)
            K->pack_t(b + (j0 + jr) * ldb + p0 + q0, ldb, (int)min64(w, nc - jr), q1 - q0, w, pb + jr * kc + q0 * w);
        return;
    }
    pack_rows(w, b + p0 * ldb + j0, ldb, kc, q0, q1, nc, pb);
}

/* the whole kc-deep block */
void kiln__sgemm_pack_b(const kiln__sgemm_kernel *K, bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                        int64_t j0, int64_t nc, float *pb) {
    pack_b_rows(K, tb, b, ldb, p0, kc, 0, kc, j0, nc, pb);
}

static void sgemm_naive(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                        const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    for (int64_t i = 0; i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++) {
            float s = 0;
            for (int64_t p = 0; p < k; p++)
                s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]);
            ci[j] = alpha * s + (beta != 0 ? beta * ci[j] : 0);
        }
    }
}

/* ---- the blocked driver ----------------------------------------------- */

/* One product in cache blocks (gemm_blocks.c): for each group of kc x nc
 * blocks of op(B) (as many as the B block's cache budget holds: all of B
 * up to 1024^2), the threads first pack it together into one shared
 * buffer, then take units of work (an mr-multiple of rows x a run of B's
 * NR panels), each packing its rows of A into the thread's own buffer and
 * multiplying them by the shared panels, block after block. Every element
 * of A and B is packed once per group (units that each packed all of B
 * packed it up to 8 times at 2 threads, as much work as the multiply
 * itself at 1024^2), and the threads meet twice per group (each meeting
 * waits for a thread the OS parked); each element of C is summed over k by
 * one thread in one order, whichever thread it is. */
typedef struct sgemm_job {
    const kiln__sgemm_kernel *K;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    float alpha, beta;
    float *pb;                  /* the shared packed group of B: block pc at (pc - pc0) * ncb */
    float *pa;                  /* or the shared packed A, all of k: block pc at pc * mp (NULL: each unit packs its own) */
    int64_t mp;                 /* m rounded up to MR */
    int64_t kcb, ncb;           /* block depth and width */
    int64_t pc0, pc1, jc, nc;   /* the group: k rows pc0 .. pc1, columns jc .. jc + nc */
    int64_t rows, pu;           /* a unit: one of `rows` even runs of MR-row tiles x pu panels of NR */
} sgemm_job;

/* One MR x NR tile (mr x nr of it inside C): straight into C when full
 * width, through a scratch tile otherwise. */
void kiln__sgemm_run_tile(const kiln__sgemm_kernel *K, int64_t kc, const float *pa, int64_t as, const float *pb,
                          int64_t bs, float *c, int64_t ldc, int mr, int nr, float alpha, float beta) {
    if (nr == K->nr && (mr == K->mr || K->ukr_rows)) {
        if (mr == K->mr) K->ukr(kc, pa, as, pb, bs, c, ldc, alpha, beta);
        else K->ukr_rows(mr, kc, pa, as, pb, bs, c, ldc, alpha, beta);
        return;
    }
    float t[MAX_MR * MAX_NR];
    if (K->ukr_rows) K->ukr_rows(mr, kc, pa, as, pb, bs, t, K->nr, 1.0f, 0.0f);
    else K->ukr(kc, pa, as, pb, bs, t, K->nr, 1.0f, 0.0f);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * ldc;
        const float *ti = t + i * K->nr;
        if (beta == 0)
            for (int j = 0; j < nr; j++) ci[j] = alpha * ti[j];
        else
            for (int j = 0; j < nr; j++) ci[j] = alpha * ti[j] + beta * ci[j];
    }
}

/* Rows [r0, r1) of the group's k (pc0 + r0 ..), across all its panels,
 * packed by this thread: each thread reads whole rows of B (a split into
 * runs of panels read 512 bytes of each row: pack_b took 4.6% of a
 * 2-thread 1024^2 product, 1.9% of a 1-thread one) */
static void pack_b_group_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const sgemm_job *J = arg;
    (void)tid;
    for (int64_t r = r0; r < r1;) {
        int64_t pc = J->pc0 + (r / J->kcb) * J->kcb, kc = min64(J->kcb, J->pc1 - pc);
        int64_t q0 = J->pc0 + r - pc, q1 = min64(kc, q0 + r1 - r);
        pack_b_rows(J->K, J->tb, J->b, J->ldb, pc, kc, q0, q1, J->jc, J->nc, J->pb + (pc - J->pc0) * J->ncb);
        r += q1 - q0;
    }
}

/* Items [u0, u1) of the shared A, an MR-row panel of one kc block each:
 * every unit of columns reads all of A (at 256^2, 2 threads: 8 units of
 * one panel, which packed A 4 times a thread) */
static void pack_a_panels(void *arg, int64_t u0, int64_t u1, int tid) {
    const sgemm_job *J = arg;
    const int MR = J->K->mr;
    const int64_t tiles = ceil_div(J->m, MR);
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t pc = u / tiles * J->kcb, kc = min64(J->kcb, J->k - pc), ir = u % tiles * MR;
        pack_a(J->K, J->ta, J->a, J->lda, ir, min64(MR, J->m - ir), pc, kc, J->pa + pc * J->mp + ir * kc);
    }
}

/* Units [u0, u1) of the group: rows i0.. of A packed here, block by
 * block (or read from the shared A), times panels jp0.. of the shared B
 * (or, without one, of the unit's own, packed here too), into C. */
static void mul_units(void *arg, int64_t u0, int64_t u1, int tid) {
    const sgemm_job *J = arg;
    const int MR = J->K->mr, NR = J->K->nr;
    const int64_t np = ceil_div(J->nc, NR), per_row = ceil_div(np, J->pu);
    const int64_t tiles = ceil_div(J->m, MR);
    float *pa = J->pa ? J->pa : scratch(0, (size_t)(ceil_div(tiles, J->rows) * MR * J->kcb));
    float *own = J->pb ? NULL : scratch(1, (size_t)(J->kcb * J->pu * NR));
    (void)tid;
    for (int64_t u = u0; u < u1; u++) {
        int64_t r = u / per_row, i0 = r * tiles / J->rows * MR;
        int64_t mc = min64((r + 1) * tiles / J->rows * MR, J->m) - i0;
        int64_t jp0 = u % per_row * J->pu, jp1 = min64(jp0 + J->pu, np);
        int64_t j0 = J->jc + jp0 * NR, nc = min64(jp1 * NR, J->nc) - jp0 * NR;
        if (!pa || (!J->pb && !own)) { /* out of memory for packing */
            const float *a = J->ta ? J->a + J->pc0 * J->lda + i0 : J->a + i0 * J->lda + J->pc0;
            const float *b = J->tb ? J->b + j0 * J->ldb + J->pc0 : J->b + J->pc0 * J->ldb + j0;
            sgemm_naive(J->ta, J->tb, mc, nc, J->pc1 - J->pc0, J->alpha, a, J->lda, b, J->ldb,
                        J->pc0 == 0 ? J->beta : 1.0f, J->c + i0 * J->ldc + j0, J->ldc);
            continue;
        }
        for (int64_t pc = J->pc0; pc < J->pc1; pc += J->kcb) {
            int64_t kc = min64(J->kcb, J->pc1 - pc);
            float beta = pc == 0 ? J->beta : 1.0f;
            const float *pac = J->pa ? J->pa + pc * J->mp : pa;
            if (!J->pa) pack_a(J->K, J->ta, J->a, J->lda, i0, mc, pc, kc, pa);
            if (own) kiln__sgemm_pack_b(J->K, J->tb, J->b, J->ldb, pc, kc, j0, nc, own);
            for (int64_t jp = jp0; jp < jp1; jp++) {
                int nr = (int)min64(NR, J->nc - jp * NR);
                const float *pbj = own ? own + (jp - jp0) * NR * kc : J->pb + (pc - J->pc0) * J->ncb + jp * NR * kc;
                float *cj = J->c + i0 * J->ldc + J->jc + jp * NR;
                const int64_t ntiles = ceil_div(mc, MR), lines = NR * kc / 16, per_tile = ceil_div(lines, ntiles);
                for (int64_t ir = 0, t = 0; ir < mc; ir += MR, t++) {
                    /* the next panel to L2 in slices, one a tile: its first
                     * tile would otherwise wait on L3 for the panel */
                    if (jp + 1 < jp1)
                        for (int64_t l = t * per_tile; l < min64(lines, (t + 1) * per_tile); l++)
                            __builtin_prefetch(pbj + NR * kc + l * 16, 0, 2);
                    kiln__sgemm_run_tile(J->K, kc, pac + ir * kc, MR, pbj, NR, cj + ir * J->ldc, J->ldc,
                                         (int)min64(MR, mc - ir), nr, J->alpha, beta);
                }
            }
        }
    }
}

static void sgemm_blocked(const kiln__sgemm_kernel *K, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc, int nt) {
    const int MR = K->mr, NR = K->nr;
    const kiln__sgemm_blocks bl = kiln__sgemm_blocks_for(K);
    sgemm_job J = {K, ta, tb, m, n, k, lda, ldb, ldc, a, b, c, alpha, beta, NULL, NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0};
    /* even blocks; with threads, about 4 units a thread so that one the
     * OS parks holds up little: rows first (a split of B's panels packs
     * the unit's A again for each) */
    J.kcb = ceil_div(k, ceil_div(k, bl.kc));
    /* k up to a third past the block depth runs as one block (its A block
     * fewer rows, below, to stay within A's L2 budget): two blocks of half
     * depth read and wrote C twice (Zen 5, 1 thread, kc 384: the GPT's
     * k = 512 products 1.02-1.08x) */
    if (k <= bl.kc + bl.kc / 3) J.kcb = k;
    J.ncb = ceil_div(ceil_div(n, ceil_div(n, bl.nc)), NR) * NR;
    /* blocks in the budget of B's block, one per thread: the group is
     * shared, and each meeting costs the threads their idle tails (at
     * 4096^2 one block a group: 24 meetings at 2 threads) */
    const int64_t per_group = (int64_t)nt * bl.kc * bl.nc / (J.kcb * J.ncb);
    const int64_t group = J.kcb * (per_group > 1 ? per_group : 1);
    const int64_t want = nt > 1 ? 4 * nt : 1;
    /* a shallow product writes C once per few multiply-adds: its A blocks
     * shrink with k, so that the rows a B panel's tiles write stay close
     * (576 x 32768 x 64, a convolution's data gradient: 1.37x the CPU time
     * of 56-row blocks at 294) */
    const int64_t mc_scaled = bl.mc * (J.kcb < bl.kc ? J.kcb : bl.kc) / (J.kcb < bl.kc ? bl.kc : J.kcb) / MR * MR;
    const int64_t mc = mc_scaled > MR ? mc_scaled : MR;
    /* With threads, a product whose A block of all m rows fits A's L2
     * budget and whose columns give each thread at least 128: one unit of
     * columns a thread, each packing all of A and its own B, nothing
     * shared. Packing into a shared buffer rewrote lines the other core
     * had read, and each core then read the half the other had written:
     * at 512^2, 2 threads, packing B and its meeting took 14% of the wall
     * time (under 3% at 1 thread). Zen 5, 2 threads, median wall time
     * with the other processes held off: 1.17x at 512^2, 1.29x at 256^2,
     * 1.04-1.31x the MLP's products. */
    const int64_t np = ceil_div(n, NR), l2_panels = bl.mc * bl.kc / (J.kcb * NR);
    const bool private_a = nt > 1 && m * J.kcb <= bl.mc * bl.kc && n >= 128 * nt && ceil_div(np, nt) <= l2_panels;
    if (m <= mc || private_a) {
        /* one block of rows (a convolution's O output channels, or the
         * product above): no other rows read B, so units of columns each
         * pack their own B, a block the size of A's (for L2), and the
         * threads meet once (twice with a shared A, below) */
        J.rows = 1;
        J.pu = private_a ? ceil_div(np, nt) : min64(l2_panels > 1 ? l2_panels : 1, ceil_div(np, want));
        J.jc = 0, J.nc = n, J.pc0 = 0, J.pc1 = k;
        const int64_t units = ceil_div(np, J.pu), tiles = ceil_div(m, MR);
        /* with threads, A packed once into a shared buffer (one meeting
         * more) where it fits the budget of B's block, not by every unit */
        J.mp = tiles * MR;
        if (!private_a && nt > 1 && units > 1 && J.mp * k <= (int64_t)nt * bl.kc * bl.nc &&
            (J.pa = scratch(0, (size_t)(J.mp * k))))
            kiln__pool_for(ceil_div(k, J.kcb) * tiles, ceil_div(ceil_div(k, J.kcb) * tiles, want), nt, pack_a_panels,
                           &J);
        kiln__pool_for(units, 1, nt, mul_units, &J);
        return;
    }
    /* rows of tiles spread evenly over a multiple of the threads (each
     * thread first takes its own contiguous half: 13 units of 168 rows at
     * 2048 gave one thread 7, 8 units of 70 at 512 one thread the short
     * last one) */
    const int64_t tiles = ceil_div(m, MR);
    J.rows = min64(tiles, ceil_div(ceil_div(m, mc) > want ? ceil_div(m, mc) : want, nt) * nt);
    int64_t cols = J.rows < want ? ceil_div(want, J.rows) : 1;
    J.pu = ceil_div(ceil_div(J.ncb, NR), cols);
    J.pb = scratch(1, (size_t)(min64(group, k) * J.ncb));
    if (!J.pb) { /* out of memory for packing */
        sgemm_naive(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
        return;
    }
    for (J.jc = 0; J.jc < n; J.jc += J.ncb) {
        J.nc = min64(J.ncb, n - J.jc);
        int64_t np = ceil_div(J.nc, NR), units = J.rows * ceil_div(np, J.pu);
        for (J.pc0 = 0; J.pc0 < k; J.pc0 = J.pc1) {
            J.pc1 = min64(J.pc0 + group, k);
            kiln__pool_for(J.pc1 - J.pc0, ceil_div(J.pc1 - J.pc0, want), nt, pack_b_group_rows, &J);
            kiln__pool_for(units, 1, nt, mul_units, &J);
        }
    }
}

/* ---- unpacked paths: one-row / one-column problems -------------------- */

/* One GEMV: y (outputs ldy apart) = alpha * op(M) x + beta * y, op(M)'s
 * rows M's rows dotted with x (dot) or x's combination of M's rows (axpy);
 * each output the same whichever thread computes it. */
typedef struct gemv_job {
    const kiln__sgemm_kernel *K;
    bool dot;
    int64_t n, k, ldm, ldy, unit; /* outputs, in units of `unit` */
    float alpha, beta;
    const float *x, *m;
    float *y;
} gemv_job;

/* units [u0, u1) of outputs, the last one short */
static void gemv_units(void *arg, int64_t u0, int64_t u1, int tid) {
    const gemv_job *j = arg;
    const int64_t j0 = u0 * j->unit, jn = min64(u1 * j->unit, j->n) - j0;
    (void)tid;
    if (j->dot) j->K->dot(jn, j->k, j->alpha, j->x, j->m + j0 * j->ldm, j->ldm, j->beta, j->y + j0 * j->ldy, j->ldy);
    else j->K->axpy(jn, j->k, j->alpha, j->x, j->m + j0, j->ldm, j->beta, j->y + j0);
}

/* C row (n values at y) = alpha * x op(B) + beta * y for a contiguous x of k. */
static void row_times_b(const kiln__sgemm_kernel *K, bool tb, int64_t n, int64_t k, float alpha, const float *x,
                        const float *b, int64_t ldb, float beta, float *y, int nt) {
    gemv_job j = {K, tb, n, k, ldb, 1, 16, alpha, beta, x, b, y};
    kiln__pool_for(ceil_div(n, 16), 1, n >= 2 * 16 ? nt : 1, gemv_units, &j);
}

#define STACK_FLOATS 2048

/* n == 1: C column = alpha * op(A) x + beta * C column. */
static void a_times_col(const kiln__sgemm_kernel *K, bool ta, int64_t m, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *x, float beta, float *c, int64_t ldc, int nt) {
    if (!ta) { /* rows of A dot x */
        gemv_job j = {K, true, m, k, lda, ldc, 4, alpha, beta, x, a, c};
        kiln__pool_for(ceil_div(m, 4), 1, m >= 8 ? nt : 1, gemv_units, &j);
        return;
    }
    if (ldc == 1) {
        row_times_b(K, false, m, k, alpha, x, a, lda, beta, c, nt);
        return;
    }
    float stack[STACK_FLOATS], *y = m <= STACK_FLOATS ? stack : kiln__malloc((size_t)m * sizeof *y);
    if (!y) y = stack, m = 0; /* cannot happen for sane sizes; leave C as is */
    row_times_b(K, false, m, k, alpha, x, a, lda, 0.0f, y, nt);
    for (int64_t i = 0; i < m; i++) c[i * ldc] = beta == 0 ? y[i] : y[i] + beta * c[i * ldc];
    if (y != stack) free(y);
}

/* Each row of C as its own row_times_b (a strided row of A gathered first). */
static void rows_times_b(const kiln__sgemm_kernel *K, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                         const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                         int nt) {
    float stack[STACK_FLOATS], *x = NULL;
    if (ta) {
        x = k <= STACK_FLOATS ? stack : kiln__malloc((size_t)k * sizeof *x);
        if (!x) {
            sgemm_blocked(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
            return;
        }
    }
    for (int64_t i = 0; i < m; i++) {
        const float *xi = a + i * lda;
        if (ta) {
            for (int64_t p = 0; p < k; p++) x[p] = a[p * lda + i];
            xi = x;
        }
        row_times_b(K, tb, n, k, alpha, xi, b, ldb, beta, c + i * ldc, nt);
    }
    if (x && x != stack) free(x);
}

/* Small problems in one pass over k, on the calling thread, reading B
 * (untransposed) and A^T in place: only what the kernel cannot read
 * directly (an untransposed A, a transposed B, B's last partial panel) is
 * packed. Returns false when out of memory. */
static bool sgemm_small(const kiln__sgemm_kernel *K, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                        const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
    int MR = K->mr, NR = K->nr;
    bool a_in_place = ta && K->ukr_rows; /* edge tiles must not read rows past m */
    int64_t as = a_in_place ? lda : MR, np = ceil_div(n, NR), nfull = tb ? 0 : n / NR;
    float *pa = a_in_place ? NULL : scratch(0, (size_t)(ceil_div(m, MR) * MR * k));
    float *pb = nfull == np ? NULL : scratch(1, (size_t)((np - nfull) * NR * k));
    if ((!a_in_place && !pa) || (nfull < np && !pb)) return false;
    if (pa) pack_a(K, ta, a, lda, 0, m, 0, k, pa);
    if (pb) kiln__sgemm_pack_b(K, tb, b, ldb, 0, k, nfull * NR, n - nfull * NR, pb);
    for (int64_t jp = 0; jp < np; jp++) {
        const float *bj = jp < nfull ? b + jp * NR : pb + (jp - nfull) * NR * k;
        int64_t bs = jp < nfull ? ldb : NR;
        int nr = (int)min64(NR, n - jp * NR);
        for (int64_t ir = 0; ir < m; ir += MR)
            kiln__sgemm_run_tile(K, k, a_in_place ? a + ir : pa + ir * k, as, bj, bs, c + ir * ldc + jp * NR, ldc,
                                 (int)min64(MR, m - ir), nr, alpha, beta);
    }
    return true;
}

/* Below this many multiply-adds per thread, a second thread costs more than it saves. */
#define MIN_WORK_PER_THREAD (1 << 20)
/* Up to this many multiply-adds a problem takes the one-pass path. */
#define SMALL_WORK (128.0 * 128 * 128)
/* ... and at most this deep (the one pass keeps the whole of k's panels) */
#define SMALL_K 512

/* A small C over a long K (a convolution's weight gradient sums over the
 * whole batch: 16 x 9 outputs, K = 86528): rows and columns are too few to
 * share, so each thread takes a slice of K into its own C and the slices
 * are added. False when there is no memory for the partial results. */
typedef struct split_job {
    bool ta, tb;
    int64_t m, n, k, kc, lda, ldb, ldc;
    float alpha, beta, *c, *part;
    const float *a, *b;
} split_job;

/* slices [t0, t1) of K: the first into C, the others into their part */
static void split_slices(void *arg, int64_t t0, int64_t t1, int tid) {
    const split_job *j = arg;
    const int64_t mn = j->m * j->n;
    (void)tid;
    for (int64_t t = t0; t < t1; t++) {
        int64_t k0 = min64(j->k, t * j->kc), kl = min64(j->kc, j->k - k0);
        const float *at = j->ta ? j->a + k0 * j->lda : j->a + k0, *bt = j->tb ? j->b + k0 : j->b + k0 * j->ldb;
        bool first = t == 0;
        kiln__sgemm_own(j->ta, j->tb, j->m, j->n, kl, j->alpha, at, j->lda, bt, j->ldb, first ? j->beta : 0.0f,
                        first ? j->c : j->part + (t - 1) * mn, first ? j->ldc : j->n, 1);
    }
}

static bool sgemm_split_k(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int nt) {
    int64_t mn = m * n, kc = ceil_div(k, nt);
    float *part = kiln__malloc((size_t)(nt - 1) * (size_t)mn * sizeof *part);
    if (!part) return false;
    split_job j = {ta, tb, m, n, k, kc, lda, ldb, ldc, alpha, beta, c, part, a, b};
    kiln__pool_for(nt, 1, nt, split_slices, &j);
    for (int t = 1; t < nt; t++)
        for (int64_t i = 0; i < m; i++) {
            const float *p = part + (t - 1) * mn + i * n;
            float *ci = c + i * ldc;
            for (int64_t j = 0; j < n; j++) ci[j] += p[j];
        }
    free(part);
    return true;
}

void kiln__sgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0 || alpha == 0) {
        scale_c(m, n, beta, c, ldc);
        return;
    }
    const kiln__sgemm_kernel *K = kiln__sgemm_kernel_pick();
    double work = (double)m * (double)n * (double)k;
    int nt = n_threads < 1 ? 1 : n_threads;
    if (work < (double)MIN_WORK_PER_THREAD * nt) nt = (int)(work / MIN_WORK_PER_THREAD) > 1 ? (int)(work / MIN_WORK_PER_THREAD) : 1;
    if (nt > 1 && kiln__pool_inside()) nt = 1;
    if (nt > 1 && m * n <= 128 * 128 && k >= 8 * (m + n) && k >= 4096 &&
        sgemm_split_k(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt))
        return;
    if (n == 1) {
        float stack[STACK_FLOATS], *x = (float *)b;
        if (!tb && ldb != 1) {
            x = k <= STACK_FLOATS ? stack : kiln__malloc((size_t)k * sizeof *x);
            if (!x) {
                sgemm_blocked(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
                return;
            }
            for (int64_t p = 0; p < k; p++) x[p] = b[p * ldb];
        }
        a_times_col(K, ta, m, k, alpha, a, lda, x, beta, c, ldc, nt);
        if (x != b && x != stack) free(x);
        return;
    }
    /* one row: GEMV; small: one pass, little packing */
    if (m == 1)
        rows_times_b(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
    else if (!(nt == 1 && k <= SMALL_K && work <= SMALL_WORK &&
               sgemm_small(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)))
        sgemm_blocked(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
}

#ifdef KILN_BLAS
/* OpenBLAS picks its kernels by CPU model when it loads; on a model it
 * does not know it falls back to an old core (on this project's Sapphire
 * Rapids VM, 0.3.21 picks "Prescott": about 30 GFLOP/s a thread, a quarter
 * of kiln's AVX-512 kernel). So OpenBLAS gets the big problems only when
 * its core is at least as wide as the kernel kiln would run. */
static bool blas_is_strong(void) {
    static int strong = -1; /* a benign race: every thread computes the same answer */
    if (strong < 0) {
        const char *core = openblas_get_corename();
        static const char *const avx512[] = {"skylakex", "cooperlake", "sapphirerapids"};
        static const char *const avx2[] = {"haswell", "zen", "skylakex", "cooperlake", "sapphirerapids"};
        int level = 0;
        for (size_t i = 0; core && i < sizeof avx2 / sizeof *avx2; i++)
            if (!strcasecmp(core, avx2[i])) level = 1;
        for (size_t i = 0; core && i < sizeof avx512 / sizeof *avx512; i++)
            if (!strcasecmp(core, avx512[i])) level = 2;
#if defined(__x86_64__)
        kiln_simd_level l = kiln__cpu_caps_detected()->level;
        int ours = l >= KILN_SIMD_AVX512 ? 2 : l >= KILN_SIMD_AVX2 ? 1 : 0;
#else
        int ours = 0; /* elsewhere OpenBLAS's core names are not ranked here: trust it */
#endif
        strong = level >= ours;
    }
    return strong;
}
#endif

void kiln__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    /* kiln's own: inside a pool loop, one-row/one-column products (its GEMV
     * paths measured 1-3x OpenBLAS's), everything when OpenBLAS's core is
     * the weaker one, and every call that may use more than one thread
     * (the build links OpenBLAS's single-threaded library; its pthread
     * one's threads spun after each call and fought kiln's for the cores:
     * a 2-thread GPT training step ran at half speed) */
    if (n_threads == 1 && !kiln__pool_inside() && m > 1 && n > 1 && k > 0 && blas_is_strong()) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    kiln__sgemm_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, n_threads);
}

/* the host GEMM of the layers above the backends (core/host_gemm.h) */
__attribute__((constructor)) static void lend_sgemm(void) { kiln__host_sgemm_lend(kiln__sgemm); }

/* ---- f64 -------------------------------------------------------------- */

#define DKC 128
#define DNC 512

/* C[i, j0 .. j0+nc] += sum_p A(i, p0+p) bp[p, :] for rows i0..i1 */
static void dgemm_rows(bool ta, const double *a, int64_t lda, int64_t i0, int64_t i1, int64_t p0, int64_t kc,
                       const double *bp, int64_t nc, double *c, int64_t ldc) {
    for (int64_t i = i0; i < i1; i++) {
        double *ci = c + i * ldc;
        for (int64_t p = 0; p < kc; p++) {
            double ai = ta ? a[(p0 + p) * lda + i] : a[i * lda + p0 + p];
            const double *bq = bp + p * nc;
#pragma omp simd
            for (int64_t j = 0; j < nc; j++) ci[j] += ai * bq[j];
        }
    }
}

typedef struct dgemm_job {
    bool ta;
    const double *a;
    int64_t lda;
    const double *bp;
    double *c;
    int64_t ldc, p0, kc, nc, jc;
} dgemm_job;

static void dgemm_range(void *arg, int64_t i0, int64_t i1, int tid) {
    const dgemm_job *j = arg;
    (void)tid;
    dgemm_rows(j->ta, j->a, j->lda, i0, i1, j->p0, j->kc, j->bp, j->nc, j->c + j->jc, j->ldc);
}

void kiln__dgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                     const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads) {
    if (m <= 0 || n <= 0) return;
    for (int64_t i = 0; i < m; i++) {
        double *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++) ci[j] = beta == 0 ? 0 : beta * ci[j];
    }
    if (k <= 0 || alpha == 0) return;
    double *bp = kiln__malloc(sizeof(double) * DKC * DNC);
    int nt = n_threads > 1 && (double)m * n * k >= (double)MIN_WORK_PER_THREAD * 2 && m >= 2 ? n_threads : 1;
    dgemm_job dj = {ta, a, lda, bp, c, ldc, 0, 0, 0, 0};
    for (int64_t jc = 0; jc < n; jc += DNC) {
        int64_t nc = min64(DNC, n - jc);
        for (int64_t pc = 0; pc < k; pc += DKC) {
            int64_t kc = min64(DKC, k - pc);
            if (!bp) { /* no memory for the block: straight loops */
                for (int64_t i = 0; i < m; i++)
                    for (int64_t j = 0; j < nc; j++) {
                        double s = 0;
                        for (int64_t p = 0; p < kc; p++)
                            s += (ta ? a[(pc + p) * lda + i] : a[i * lda + pc + p]) *
                                 (tb ? b[(jc + j) * ldb + pc + p] : b[(pc + p) * ldb + jc + j]);
                        c[i * ldc + jc + j] += alpha * s;
                    }
                continue;
            }
            /* op(B) block, times alpha, stored kc x nc contiguous */
            for (int64_t p = 0; p < kc; p++)
                for (int64_t j = 0; j < nc; j++)
                    bp[p * nc + j] = alpha * (tb ? b[(jc + j) * ldb + pc + p] : b[(pc + p) * ldb + jc + j]);
            dj.p0 = pc, dj.kc = kc, dj.nc = nc, dj.jc = jc;
            kiln__pool_for(m, 1, nt, dgemm_range, &dj);
        }
    }
    free(bp);
}

/* f64 (gradient checks, references): OpenBLAS on the calling thread where
 * it is built in */
void kiln__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    if (!kiln__pool_inside() && m > 0 && n > 0 && k > 0) {
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    kiln__dgemm_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, n_threads);
}
