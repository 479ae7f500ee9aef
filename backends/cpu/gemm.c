/* gemm.c — f32/f64 GEMM entry points (gemm.h) and kiln's own packed f32
 * GEMM: GotoBLAS/BLIS-style blocking (NC columns of B, KC deep, MC rows
 * of A), B packed into NR-wide row panels shared by all threads, A packed
 * per thread into MR-tall column panels, an ISA micro-kernel
 * (gemm_kernels.h) per MR x NR tile. Transposes and strides are absorbed
 * by the packing; tiny and one-row/one-column problems skip packing and
 * run GEMV-shaped loops. kiln__sgemm sends each problem to OpenBLAS or to
 * kiln's own kernel, whichever measured faster for its shape. */
#include "gemm.h"

#include "gemm_kernels.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_BLAS
#include <cblas.h>
#endif

#define MAX_MR 16
#define MAX_NR 32

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Per-thread scratch that only grows (threads of the OpenMP pool live on,
 * so this saves a page-faulting allocation on every call). */
static float *scratch(int slot, size_t n) {
    static _Thread_local float *buf[2];
    static _Thread_local size_t cap[2];
    if (cap[slot] < n) {
        free(buf[slot]);
        size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
        buf[slot] = aligned_alloc(64, bytes);
        cap[slot] = buf[slot] ? n : 0;
    }
    return buf[slot];
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

/* op(A)[i0 .. i0+mc, p0 .. p0+kc] into MR-row panels: pa[panel*MR*kc + p*MR + i], zero-padded. */
static void pack_a(bool ta, const float *a, int64_t lda, int64_t i0, int64_t mc, int64_t p0, int64_t kc, int mr_,
                   float *pa) {
    for (int64_t ir = 0; ir < mc; ir += mr_) {
        int mr = (int)min64(mr_, mc - ir);
        float *d = pa + ir * kc;
        if (ta) {
            const float *s = a + p0 * lda + i0 + ir;
            for (int64_t p = 0; p < kc; p++, s += lda, d += mr_) {
                int i = 0;
                for (; i < mr; i++) d[i] = s[i];
                for (; i < mr_; i++) d[i] = 0;
            }
        } else {
            const float *rows[MAX_MR];
            for (int i = 0; i < mr; i++) rows[i] = a + (i0 + ir + i) * lda + p0;
            for (int64_t p = 0; p < kc; p++, d += mr_) {
                int i = 0;
                for (; i < mr; i++) d[i] = rows[i][p];
                for (; i < mr_; i++) d[i] = 0;
            }
        }
    }
}

/* op(B)[p0 .. p0+kc, j0 + panels jp0..jp1 of NR] into pb[jp*NR*kc + p*NR + j], zero-padded past nc. */
static void pack_b(bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc, int64_t j0, int64_t nc, int64_t jp0,
                   int64_t jp1, int nr_, float *pb) {
    for (int64_t jp = jp0; jp < jp1; jp++) {
        int64_t jr = jp * nr_;
        int nr = (int)min64(nr_, nc - jr);
        float *d = pb + jr * kc;
        if (!tb) {
            const float *s = b + p0 * ldb + j0 + jr;
            if (nr == nr_)
                for (int64_t p = 0; p < kc; p++, s += ldb, d += nr_) memcpy(d, s, (size_t)nr_ * sizeof *d);
            else
                for (int64_t p = 0; p < kc; p++, s += ldb, d += nr_) {
                    int j = 0;
                    for (; j < nr; j++) d[j] = s[j];
                    for (; j < nr_; j++) d[j] = 0;
                }
        } else {
            for (int j = 0; j < nr_; j++) {
                if (j < nr) {
                    const float *s = b + (j0 + jr + j) * ldb + p0;
                    for (int64_t p = 0; p < kc; p++) d[p * nr_ + j] = s[p];
                } else
                    for (int64_t p = 0; p < kc; p++) d[p * nr_ + j] = 0;
            }
        }
    }
}

/* ---- the blocked driver ----------------------------------------------- */

typedef struct {
    const kiln__sgemm_kernel *K;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
    float alpha, beta;
    int64_t kcb, mcb, ncb; /* block sizes used */
} sgemm_job;

static void run_tile(const sgemm_job *J, int64_t kc, const float *pa, const float *pb, float *c, int mr, int nr,
                     float beta) {
    const kiln__sgemm_kernel *K = J->K;
    if (mr == K->mr && nr == K->nr) {
        K->ukr(kc, pa, pb, c, J->ldc, J->alpha, beta);
        return;
    }
    float t[MAX_MR * MAX_NR];
    K->ukr(kc, pa, pb, t, K->nr, 1.0f, 0.0f);
    for (int i = 0; i < mr; i++) {
        float *ci = c + i * J->ldc;
        const float *ti = t + i * K->nr;
        if (beta == 0)
            for (int j = 0; j < nr; j++) ci[j] = J->alpha * ti[j];
        else
            for (int j = 0; j < nr; j++) ci[j] = J->alpha * ti[j] + beta * ci[j];
    }
}

/* One unit of work: C[i0 .. i0+mc, j0 .. j0+nc] over all of k, with this
 * thread's own packing buffers (no sharing, so no barriers: a thread the
 * OS parks on a busy machine delays only the units it holds). */
static void sgemm_unit(const sgemm_job *J, int64_t i0, int64_t mc, int64_t j0, int64_t nc, float *pa, float *pb) {
    int MR = J->K->mr, NR = J->K->nr;
    int64_t np = ceil_div(nc, NR);
    for (int64_t pc = 0; pc < J->k; pc += J->kcb) {
        int64_t kc = min64(J->kcb, J->k - pc);
        float beta = pc == 0 ? J->beta : 1.0f;
        pack_b(J->tb, J->b, J->ldb, pc, kc, j0, nc, 0, np, NR, pb);
        pack_a(J->ta, J->a, J->lda, i0, mc, pc, kc, MR, pa);
        for (int64_t jp = 0; jp < np; jp++) {
            int nr = (int)min64(NR, nc - jp * NR);
            const float *pbj = pb + jp * NR * kc;
            for (int64_t ir = 0; ir < mc; ir += MR)
                run_tile(J, kc, pa + ir * kc, pbj, J->c + (i0 + ir) * J->ldc + j0 + jp * NR, (int)min64(MR, mc - ir),
                         nr, beta);
        }
    }
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

/* Units (row block x column block) on this thread, or shared out
 * dynamically among the team when called inside the parallel region. */
static void sgemm_units(const sgemm_job *J, int64_t nunits, int64_t ncols_blocks, bool shared) {
    float *pa = scratch(0, (size_t)(J->mcb * J->kcb));
    float *pb = scratch(1, (size_t)(J->kcb * ceil_div(J->ncb, J->K->nr) * J->K->nr));
#define UNIT(u)                                                                                                    \
    {                                                                                                              \
        int64_t i0 = (u) / ncols_blocks * J->mcb, j0 = (u) % ncols_blocks * J->ncb;                                \
        int64_t mc = min64(J->mcb, J->m - i0), nc = min64(J->ncb, J->n - j0);                                      \
        if (pa && pb) sgemm_unit(J, i0, mc, j0, nc, pa, pb);                                                        \
        else /* out of memory for packing */                                                                       \
            sgemm_naive(J->ta, J->tb, mc, nc, J->k, J->alpha, J->a + (J->ta ? i0 : i0 * J->lda), J->lda,           \
                        J->b + (J->tb ? j0 * J->ldb : j0), J->ldb, J->beta, J->c + i0 * J->ldc + j0, J->ldc);       \
    }
    if (shared) {
#pragma omp for schedule(dynamic, 1) nowait
        for (int64_t u = 0; u < nunits; u++) UNIT(u)
    } else
        for (int64_t u = 0; u < nunits; u++) UNIT(u)
#undef UNIT
}

static void sgemm_blocked(const kiln__sgemm_kernel *K, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          float alpha, const float *a, int64_t lda, const float *b, int64_t ldb, float beta, float *c,
                          int64_t ldc, int nt) {
    sgemm_job J = {K, ta, tb, m, n, k, lda, ldb, ldc, a, b, c, alpha, beta, 0, 0, 0};
    int MR = K->mr, NR = K->nr;
    /* block sizes: even splits (no sliver blocks), and with threads at
     * least 4 units per thread so a stalled thread's share is small */
    int64_t mcmax = K->mc, ncmax = K->nc;
    if (nt > 1)
        while (ceil_div(m, mcmax) * ceil_div(n, ncmax) < 4 * nt) {
            if (ncmax > 4 * NR && ceil_div(n, ncmax) * 2 <= ceil_div(n, NR)) ncmax /= 2;
            else if (mcmax > 2 * MR) mcmax /= 2;
            else break;
        }
    J.kcb = ceil_div(k, ceil_div(k, K->kc));
    J.mcb = ceil_div(ceil_div(m, ceil_div(m, mcmax)), MR) * MR;
    J.ncb = ceil_div(ceil_div(n, ceil_div(n, ncmax)), NR) * NR;
    int64_t ncb = ceil_div(n, J.ncb), nunits = ceil_div(m, J.mcb) * ncb;
    if (nt > nunits) nt = (int)nunits;
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
        sgemm_units(&J, nunits, ncb, true);
    } else sgemm_units(&J, nunits, ncb, false);
}

/* ---- unpacked paths: one-row / one-column problems and tiny ones ------- */

/* C row (n values at y) = alpha * x op(B) + beta * y for a contiguous x of k. */
static void row_times_b(const kiln__sgemm_kernel *K, bool tb, int64_t n, int64_t k, float alpha, const float *x,
                        const float *b, int64_t ldb, float beta, float *y, int nt) {
    int64_t per = nt > 1 ? ceil_div(ceil_div(n, nt), 16) * 16 : n;
    if (nt > 1 && n >= 2 * 16) {
#pragma omp parallel for num_threads(nt) schedule(static)
        for (int t = 0; t < nt; t++) {
            int64_t j0 = t * per, jn = min64(per, n - j0);
            if (jn <= 0) continue;
            if (tb) K->dot(jn, k, alpha, x, b + j0 * ldb, ldb, beta, y + j0, 1);
            else K->axpy(jn, k, alpha, x, b + j0, ldb, beta, y + j0);
        }
    } else if (tb) K->dot(n, k, alpha, x, b, ldb, beta, y, 1);
    else K->axpy(n, k, alpha, x, b, ldb, beta, y);
}

#define STACK_FLOATS 2048

/* n == 1: C column = alpha * op(A) x + beta * C column. */
static void a_times_col(const kiln__sgemm_kernel *K, bool ta, int64_t m, int64_t k, float alpha, const float *a,
                        int64_t lda, const float *x, float beta, float *c, int64_t ldc, int nt) {
    if (!ta) { /* rows of A dot x */
        int64_t per = ceil_div(m, nt);
        if (nt > 1 && m >= 8) {
#pragma omp parallel for num_threads(nt) schedule(static)
            for (int t = 0; t < nt; t++) {
                int64_t i0 = t * per, in = min64(per, m - i0);
                if (in > 0) K->dot(in, k, alpha, x, a + i0 * lda, lda, beta, c + i0 * ldc, ldc);
            }
        } else K->dot(m, k, alpha, x, a, lda, beta, c, ldc);
        return;
    }
    if (ldc == 1) {
        row_times_b(K, false, m, k, alpha, x, a, lda, beta, c, nt);
        return;
    }
    float stack[STACK_FLOATS], *y = m <= STACK_FLOATS ? stack : malloc((size_t)m * sizeof *y);
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
        x = k <= STACK_FLOATS ? stack : malloc((size_t)k * sizeof *x);
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

/* Below this many multiply-adds per thread, a second thread costs more than it saves. */
#define MIN_WORK_PER_THREAD (1 << 20)

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
    if (nt > 1 && omp_in_parallel()) nt = 1;
    if (n == 1) {
        float stack[STACK_FLOATS], *x = (float *)b;
        if (!tb && ldb != 1) {
            x = k <= STACK_FLOATS ? stack : malloc((size_t)k * sizeof *x);
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
    /* few rows, or too little work to pay for packing: row at a time */
    if (m <= 2 || work <= 24.0 * 24 * 24)
        rows_times_b(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
    else sgemm_blocked(K, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, nt);
}

void kiln__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    if (!omp_in_parallel() && m > 0 && n > 0 && k > 0) {
        if (openblas_get_num_threads() != n_threads) openblas_set_num_threads(n_threads);
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    kiln__sgemm_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, n_threads);
}

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

void kiln__dgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                     const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads) {
    if (m <= 0 || n <= 0) return;
    for (int64_t i = 0; i < m; i++) {
        double *ci = c + i * ldc;
        for (int64_t j = 0; j < n; j++) ci[j] = beta == 0 ? 0 : beta * ci[j];
    }
    if (k <= 0 || alpha == 0) return;
    double *bp = malloc(sizeof(double) * DKC * DNC);
    int nt = n_threads > 1 && (double)m * n * k >= (double)MIN_WORK_PER_THREAD * 2 && m >= 2 && !omp_in_parallel()
                 ? n_threads
                 : 1;
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
            if (nt > 1) {
                int64_t per = ceil_div(m, nt);
#pragma omp parallel for num_threads(nt) schedule(static)
                for (int t = 0; t < nt; t++)
                    dgemm_rows(ta, a, lda, t * per, min64(m, (t + 1) * per), pc, kc, bp, nc, c + jc, ldc);
            } else dgemm_rows(ta, a, lda, 0, m, pc, kc, bp, nc, c + jc, ldc);
        }
    }
    free(bp);
}

void kiln__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    if (!omp_in_parallel() && m > 0 && n > 0 && k > 0) {
        if (openblas_get_num_threads() != n_threads) openblas_set_num_threads(n_threads);
        cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n,
                    (int)k, alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
        return;
    }
#endif
    kiln__dgemm_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, n_threads);
}
