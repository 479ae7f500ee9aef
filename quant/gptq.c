/* gptq.c — GPTQ on one linear layer (include/kiln.h), following the
 * paper and IST-DASLab/gptq's fasterquant: the inputs' Hessian, dead
 * columns, act order, damping, the upper Cholesky factor of H^-1 and the
 * lazy-block column loop. GPTQ treats the rows of W independently (they
 * share H only), so the column loop inside a block runs row by row, rows
 * in parallel; the update of the later columns after a block is one GEMM. */
#include "gptq.h"
#include "host_gemm.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_BLAS
#include <lapacke.h>
#endif

struct kiln_gptq {
    int64_t cols, n; /* n: samples so far */
    float *h;        /* [cols, cols], upper triangle kept (row-major) */
};

kiln_gptq *kiln_gptq_new(int64_t cols) {
    if (cols < 1 || cols > INT32_MAX || (uint64_t)cols * (uint64_t)cols > SIZE_MAX / sizeof(float))
        return kiln__err(KILN_ERR_SHAPE, "kiln_gptq_new: invalid column count %lld", (long long)cols);
    kiln_gptq *h = kiln__calloc(1, sizeof *h);
    if (h) h->h = kiln__calloc((size_t)(cols * cols), sizeof *h->h);
    if (!h || !h->h) {
        if (h) free(h);
        return kiln__err(KILN_ERR_OOM, "kiln_gptq_new: out of memory for a %lld x %lld Hessian", (long long)cols,
                         (long long)cols);
    }
    h->cols = cols;
    return h;
}

void kiln_gptq_free(kiln_gptq *h) {
    if (!h) return;
    free(h->h);
    free(h);
}

int64_t kiln_gptq_samples(const kiln_gptq *h) { return h ? h->n : 0; }

kiln_status kiln_gptq_add_batch(kiln_gptq *h, const float *x, int64_t n) {
    static const char who[] = "kiln_gptq_add_batch";
    if (!h || !x) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    if (n < 1 || n > INT32_MAX) return kiln__errs(KILN_ERR_ARG, "%s: invalid sample count %lld", who, (long long)n);
    kiln_sgemm_fn *gemm = kiln__host_sgemm(who);
    if (!gemm) return kiln_last_status();
    const int64_t c = h->cols;
    for (int64_t i = 0; i < n * c; i++)
        if (!isfinite(x[i]))
            return kiln__errs(KILN_ERR_NUMERIC, "%s: x[%lld, %lld] is not finite", who, (long long)(i / c),
                              (long long)(i % c));
    /* the reference's running mean: H *= N / (N + n); H += 2 / (N + n) X^T X */
    const float keep = (float)((double)h->n / (double)(h->n + n)), a = (float)(2.0 / (double)(h->n + n));
    h->n += n;
    /* the full product (the CPU backend's GEMM, which picks OpenBLAS only
     * where its kernels are as wide as kiln's); the upper half is read */
    for (int64_t i = 0; i < c * c; i++) h->h[i] *= keep;
    gemm(true, false, c, c, n, a, x, c, x, c, 1.0f, h->h, c, kiln__threads());
    return KILN_OK;
}

#ifdef KILN_BLAS

/* order of columns by descending diag, ties by index (torch's argsort is
 * not stable; a fixed order keeps results reproducible) */
typedef struct diag_col {
    double d;
    int32_t col;
} diag_col;
static int by_diag_desc(const void *a, const void *b) {
    const diag_col *x = a, *y = b;
    if (x->d != y->d) return x->d > y->d ? -1 : 1;
    return (x->col > y->col) - (x->col < y->col);
}

/* U, upper with U^T U = (H + damp I)^-1, of the permuted H in double
 * (row-major, upper triangles only); false if H is not positive definite.
 * A row-major upper triangle is LAPACK's column-major lower one: so no
 * transposed copies (LAPACKE's row-major path makes them). */
static bool hinv_upper(double *hd, int64_t c) {
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', (lapack_int)c, hd, (lapack_int)c)) return false;
    if (LAPACKE_dpotri(LAPACK_COL_MAJOR, 'L', (lapack_int)c, hd, (lapack_int)c)) return false;
    if (LAPACKE_dpotrf(LAPACK_COL_MAJOR, 'L', (lapack_int)c, hd, (lapack_int)c)) return false;
    return true;
}

/* Fit the group starting at column i on the row's weights as updated by
 * every column before i. Columns past the block (>= i2) still lack the
 * block's updates from columns i1..i-1 (err), added here for the fit only.
 * (The reference fits on W there, lacking them; with group sizes dividing
 * the block size, 32/64/128 in 128, no group crosses a block and the two
 * agree.) False when out of memory. */
static bool fit_group(const kiln_gptq_result *r, const float *u, const float *w, int64_t i, int64_t i1, int64_t i2,
                      const float *err, float *scale, uint8_t *zero) {
    const int64_t c = r->cols, n = i + r->group_size > c ? c - i : r->group_size;
    if (i == i1 || i + n <= i2) {
        kiln__gptq_fit(w + i, n, 1, r->bits, r->sym, scale, zero);
        return true;
    }
    float *t = kiln__malloc((size_t)n * sizeof *t);
    if (!t) return false;
    for (int64_t j = i; j < i + n; j++) {
        float v = w[j];
        if (j >= i2)
            for (int64_t k = i1; k < i; k++) v -= err[k - i1] * u[k * c + j];
        t[j - i] = v;
    }
    kiln__gptq_fit(t, n, 1, r->bits, r->sym, scale, zero);
    free(t);
    return true;
}

/* The column loop of one block [i1, i2) on row w (permuted order, updated
 * in place): fit a group where one starts, quantize, spread each error over
 * the block's later columns; errors / U_ii go to err [i2 - i1]. Returns the
 * row's sum of (w - q)^2 / U_ii^2, NaN when out of memory. */
static double block_row(const kiln_gptq_result *r, const float *u, float *w, int64_t row, int64_t i1, int64_t i2,
                        float *err, uint8_t *codes) {
    const int64_t c = r->cols, gs = r->group_size;
    const int maxq = (1 << r->bits) - 1;
    float *scales = r->scales + row * r->n_groups;
    uint8_t *zeros = r->zeros + row * r->n_groups;
    double loss = 0.0;
    for (int64_t i = i1; i < i2; i++) {
        const int64_t g = i / gs;
        if (i % gs == 0 && !fit_group(r, u, w, i, i1, i2, err, &scales[g], &zeros[g])) return NAN;
        const float d = u[i * c + i];
        const uint8_t q = kiln__gptq_code(w[i], scales[g], zeros[g], maxq);
        codes[r->perm[i]] = q;
        const float e = (w[i] - kiln__gptq_dequant(q, scales[g], zeros[g])) / d;
        loss += (double)e * e;
        err[i - i1] = e;
        const float *ui = u + i * c;
        for (int64_t j = i + 1; j < i2; j++) w[j] -= e * ui[j];
    }
    return loss;
}

/* One block of columns [i1, i2) of every row, the rows' losses in rl. */
typedef struct block_job {
    kiln_gptq_result *r;
    const float *u;
    float *wp, *err;
    int64_t i1, i2;
    double *rl;
} block_job;

static void block_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const block_job *j = arg;
    const int64_t c = j->r->cols, n = j->i2 - j->i1;
    (void)tid;
    for (int64_t row = r0; row < r1; row++)
        j->rl[row] = block_row(j->r, j->u, j->wp + row * c, row, j->i1, j->i2, j->err + row * n, j->r->codes + row * c);
}

#endif

kiln_gptq_result *kiln_gptq_quantize(const kiln_gptq *h, const float *w, int64_t rows, const kiln_gptq_config *cfg) {
    static const char who[] = "kiln_gptq_quantize";
    if (!h || !w) return kiln__err(KILN_ERR_ARG, "%s: NULL argument", who);
    const int64_t c = h->cols;
    if (kiln__gptq_check(who, rows, c, cfg)) return NULL;
#ifndef KILN_BLAS
    (void)rows;
    return kiln__err(KILN_ERR_UNSUPPORTED,
                     "%s: GPTQ needs LAPACK's Cholesky (dpotrf, dpotri) and this build has none (built with BLAS=0)",
                     who);
#else
    if (h->n == 0) return kiln__err(KILN_ERR_STATE, "%s: no calibration samples (kiln_gptq_add_batch)", who);
    kiln_sgemm_fn *gemm = kiln__host_sgemm(who);
    if (!gemm) return NULL;
    for (int64_t i = 0; i < rows * c; i++)
        if (!isfinite(w[i]))
            return kiln__err(KILN_ERR_NUMERIC, "%s: w[%lld, %lld] is not finite", who, (long long)(i / c),
                             (long long)(i % c));
    kiln_gptq_result *r = kiln__gptq_result_new(rows, c, cfg);
    double *hd = kiln__malloc((size_t)(c * c) * sizeof *hd), *diag = kiln__malloc((size_t)c * sizeof *diag);
    float *wp = kiln__malloc((size_t)(rows * c) * sizeof *wp), *u = kiln__malloc((size_t)(c * c) * sizeof *u);
    const int64_t bs = cfg->block_size < c ? cfg->block_size : c;
    float *err = kiln__malloc((size_t)(rows * bs) * sizeof *err);
    int32_t *inv = kiln__malloc((size_t)c * sizeof *inv);
    double *rl = kiln__malloc((size_t)rows * sizeof *rl);
    if (!r || !hd || !diag || !wp || !u || !err || !inv || !rl) {
        if (r) kiln__err(KILN_ERR_OOM, "%s: out of memory for a [%lld, %lld] layer", who, (long long)rows,
                         (long long)c);
        kiln_gptq_result_free(r);
        r = NULL;
        goto done;
    }
    /* dead columns: no input ever reached them */
    for (int64_t i = 0; i < c; i++) diag[i] = h->h[i * c + i] == 0.0f ? 1.0 : (double)h->h[i * c + i];
    if (cfg->act_order) {
        diag_col *o = kiln__malloc((size_t)c * sizeof *o);
        if (!o) {
            kiln_gptq_result_free(r);
            r = kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
            goto done;
        }
        for (int64_t i = 0; i < c; i++) o[i] = (diag_col){diag[i], (int32_t)i};
        qsort(o, (size_t)c, sizeof *o, by_diag_desc);
        for (int64_t i = 0; i < c; i++) r->perm[i] = o[i].col;
        free(o);
    }
    for (int64_t k = 0; k < c; k++) inv[r->perm[k]] = (int32_t)k;
    /* W and H in the quantization order; H's upper triangle is the data */
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < c; k++) {
            int32_t j = r->perm[k];
            wp[i * c + k] = h->h[j * c + j] == 0.0f ? 0.0f : w[i * c + j];
        }
    double mean = 0.0;
    for (int64_t i = 0; i < c; i++) mean += diag[i];
    const double damp = (double)cfg->percdamp * mean / (double)c;
    for (int64_t k = 0; k < c; k++) {
        int32_t a = r->perm[k];
        for (int64_t l = k; l < c; l++) {
            int32_t b = r->perm[l];
            hd[k * c + l] = k == l ? diag[a] + damp : (double)(a < b ? h->h[a * c + b] : h->h[b * c + a]);
        }
    }
    if (!hinv_upper(hd, c)) {
        kiln_gptq_result_free(r);
        r = kiln__err(KILN_ERR_NUMERIC, "%s: H + damping is not positive definite (percdamp %g)", who,
                      (double)cfg->percdamp);
        goto done;
    }
    for (int64_t k = 0; k < c; k++)
        for (int64_t l = 0; l < c; l++) u[k * c + l] = l < k ? 0.0f : (float)hd[k * c + l];

    /* the rows' losses summed in row order, whatever the threads */
    double loss = 0.0;
    for (int64_t i1 = 0; i1 < c; i1 += bs) {
        const int64_t i2 = i1 + bs < c ? i1 + bs : c, n = i2 - i1;
        block_job j = {r, u, wp, err, i1, i2, rl};
        kiln__pool_for(rows, 1, rows * n * n > 65536 ? kiln__threads() : 1, block_rows, &j);
        for (int64_t row = 0; row < rows; row++) loss += rl[row];
        /* W[:, i2:] -= Err1 U[i1:i2, i2:] */
        if (i2 < c)
            gemm(false, false, rows, c - i2, n, -1.0f, err, n, u + i1 * c + i2, c, 1.0f, wp + i2, c, kiln__threads());
    }
    if (isnan(loss)) {
        kiln_gptq_result_free(r);
        r = kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
        goto done;
    }
    r->error = loss / 2.0;
    for (int64_t j = 0; j < c; j++) r->g_idx[j] = (int32_t)(inv[j] / r->group_size);
done:
    free(hd);
    free(diag);
    free(wp);
    free(u);
    free(err);
    free(inv);
    free(rl);
    return r;
#endif
}
