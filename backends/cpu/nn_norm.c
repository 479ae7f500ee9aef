/* nn_norm.c — CPU kernels for layer_norm and rms_norm over the last axis
 * and their fused backward kernels LAYER_NORM_GRAD / RMS_NORM_GRAD (layout
 * in ops/nn_norm.c). f64 rows run in double loops; f32 rows use the row
 * primitives of nn_vec.h with row statistics summed in double. */
#include "internal.h"
#include "nn_kernels.h"
#include "nn_vec.h"
#include "pool.h"

#include <math.h>

/* Row statistics: mean (0 for rms_norm) and rstd = 1/sqrt(var + eps),
 * var the biased variance (layer_norm, two passes so it never cancels) or
 * mean(x^2) (rms_norm). */
static void stats_f64(const double *x, int64_t c, double eps, bool rms, double *mean, double *rstd) {
    double m = 0.0, var = 0.0;
    if (!rms) {
        for (int64_t j = 0; j < c; j++) m += x[j];
        m /= (double)c;
    }
    for (int64_t j = 0; j < c; j++) var += (x[j] - m) * (x[j] - m);
    *mean = m;
    *rstd = 1.0 / sqrt(var / (double)c + eps);
}

/* The f32 twin: the mean summed from x[0] (so a row far from 0 keeps its
 * spread) and returned as hi + lo floats. */
static void stats_f32(const kiln_nn_vec *v, const float *x, int64_t c, double eps, bool rms, float *mean,
                      float *mean_lo, float *rstd) {
    double m = rms ? 0.0 : (double)x[0] + v->sum_dev(x, c, x[0]) / (double)c;
    *mean = (float)m;
    *mean_lo = (float)(m - (double)*mean);
    *rstd = (float)(1.0 / sqrt(v->sum_sq_dev(x, c, *mean) / (double)c + eps));
}

static void norm_row_f64(const double *x, const double *w, const double *b, double *y, int64_t c, double eps,
                         bool rms) {
    double mean, rstd;
    stats_f64(x, c, eps, rms, &mean, &rstd);
    for (int64_t j = 0; j < c; j++) {
        double v = (x[j] - mean) * rstd;
        if (w) v *= w[j];
        if (b) v += b[j];
        y[j] = v;
    }
}

/* Rows [r0, r1) of node (arg). layer_norm src: x [, w [, b]] as ip[0] =
 * has_w and ip[1] = has_b say; rms_norm src: x [, w] as ip[0] says. */
static void norm_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    kiln_tensor *node = arg;
    int64_t c = node->shape[node->ndim - 1];
    bool rms = node->op == KILN_OP_RMS_NORM, has_w = node->ip[0] != 0, has_b = !rms && node->ip[1] != 0;
    bool f64 = node->dtype == KILN_F64;
    const void *x = node->src[0]->data, *w = has_w ? node->src[1]->data : NULL;
    const void *b = has_b ? node->src[1 + has_w]->data : NULL;
    double eps = node->fp[0];
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        if (f64) {
            norm_row_f64((const double *)x + r * c, w, b, (double *)node->data + r * c, c, eps, rms);
        } else {
            const float *xr = (const float *)x + r * c;
            float mean, mean_lo, rstd;
            stats_f32(v, xr, c, eps, rms, &mean, &mean_lo, &rstd);
            v->norm_fwd(xr, w, b, (float *)node->data + r * c, c, mean, mean_lo, rstd);
        }
    }
}

static kiln_status norm_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t c = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / c;
    kiln__pool_for(rows, 1, rows * c > KILN_NN_PAR_WORK ? ex->n_threads : 1, norm_rows, node);
    return KILN_OK;
}

/* Rows between flushes of a thread's f32 dw/db sums into its double ones. */
#define NORM_FLUSH_ROWS 32

/* One part's rows [r0, r1) of the backward: dx, and this part's sums
 * of dw = sum(gy * xhat), db = sum(gy) into pw/pb (double, may be NULL). */
static void norm_grad_rows_f64(const double *x, const double *w, const double *gy, double *dx, int64_t r0, int64_t r1,
                               int64_t c, double eps, bool rms, double *pw, double *pb) {
    for (int64_t r = r0; r < r1; r++) {
        const double *xr = x + r * c, *gr = gy + r * c;
        double mean, rstd, sg = 0.0, sgx = 0.0;
        stats_f64(xr, c, eps, rms, &mean, &rstd);
        for (int64_t j = 0; j < c; j++) {
            double xh = (xr[j] - mean) * rstd, g = w ? gr[j] * w[j] : gr[j];
            sg += g;
            sgx += g * xh;
            if (pw) pw[j] += gr[j] * xh;
            if (pb) pb[j] += gr[j];
        }
        double ca = rms ? 0.0 : sg / (double)c, cb = sgx / (double)c;
        for (int64_t j = 0; j < c; j++) {
            double xh = (xr[j] - mean) * rstd, g = w ? gr[j] * w[j] : gr[j];
            dx[r * c + j] = rstd * (g - ca - xh * cb);
        }
    }
}

static void flush_f32(float *acc, double *sum, int64_t c) {
    if (!acc) return;
    for (int64_t j = 0; j < c; j++) sum[j] += acc[j];
    memset(acc, 0, (size_t)c * sizeof *acc);
}

static void norm_grad_rows_f32(const kiln_nn_vec *v, const float *x, const float *w, const float *gy, float *dx,
                               int64_t r0, int64_t r1, int64_t c, double eps, bool rms, float *fw, float *fb,
                               double *pw, double *pb) {
    for (int64_t r = r0; r < r1; r++) {
        const float *xr = x + r * c, *gr = gy + r * c;
        float mean, mean_lo, rstd;
        double sg, sgx;
        stats_f32(v, xr, c, eps, rms, &mean, &mean_lo, &rstd);
        v->norm_bwd_sums(xr, gr, w, c, mean, mean_lo, rstd, fw, fb, &sg, &sgx);
        float ca = rms ? 0.0f : (float)(sg / (double)c), cb = (float)(sgx / (double)c);
        v->norm_bwd_dx(xr, gr, w, dx + r * c, c, mean, mean_lo, rstd, ca, cb);
        if ((r - r0) % NORM_FLUSH_ROWS == NORM_FLUSH_ROWS - 1 || r == r1 - 1) {
            flush_f32(fw, pw, c);
            flush_f32(fb, pb, c);
        }
    }
}

/* Parts the backward's rows are split into: each sums its own dw/db, and
 * the parts' sums are added in order, so the result depends on the shape
 * only, not on the threads. */
#define NORM_PART_WORK 16384 /* elements a part at least */
#define NORM_MAX_PARTS 32

typedef struct norm_grad_job {
    kiln_tensor *node;
    int64_t rows, c, nacc, parts;
    double *psum;
    float *facc;
} norm_grad_job;

static void norm_grad_parts(void *arg, int64_t p0, int64_t p1, int tid) {
    const norm_grad_job *j = arg;
    kiln_tensor *node = j->node;
    const kiln_tensor *xt = node->src[0];
    bool rms = node->op == KILN_OP_RMS_NORM_GRAD, has_w = node->ip[0] != 0, has_b = !rms && node->ip[1] != 0;
    const void *w = has_w ? node->src[1]->data : NULL, *gy = node->src[1 + has_w]->data;
    const int64_t c = j->c, nacc = j->nacc;
    const double eps = node->fp[0];
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        int64_t r0 = j->rows * p / j->parts, r1 = j->rows * (p + 1) / j->parts;
        double *pw = has_w ? j->psum + p * nacc * c : NULL, *pb = has_b ? j->psum + (p * nacc + has_w) * c : NULL;
        if (node->dtype == KILN_F64) {
            norm_grad_rows_f64(xt->data, w, gy, node->data, r0, r1, c, eps, rms, pw, pb);
        } else {
            float *fw = has_w ? j->facc + p * nacc * c : NULL;
            float *fb = has_b ? j->facc + (p * nacc + has_w) * c : NULL;
            norm_grad_rows_f32(kiln__nn_vec(), xt->data, w, gy, node->data, r0, r1, c, eps, rms, fw, fb, pw, pb);
        }
    }
}

/* LAYER_NORM_GRAD / RMS_NORM_GRAD: src x [, w], gy; one packed output dx
 * [rows * C] then dw [C] (has_w) then db [C] (has_b). */
static kiln_status norm_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *xt = node->src[0];
    bool rms = node->op == KILN_OP_RMS_NORM_GRAD, has_w = node->ip[0] != 0, has_b = !rms && node->ip[1] != 0;
    bool f64 = node->dtype == KILN_F64;
    int64_t c = xt->shape[xt->ndim - 1], rows = kiln_tensor_numel(xt) / c;
    norm_grad_job j = {node, rows, c, has_w + has_b, rows * c / NORM_PART_WORK, NULL, NULL};
    if (j.parts > NORM_MAX_PARTS) j.parts = NORM_MAX_PARTS;
    if (j.parts > rows) j.parts = rows;
    if (j.parts < 1) j.parts = 1;
    size_t es = kiln__types[node->dtype].size;
    char *out = node->data;
    if (j.nacc) {
        j.psum = kiln__calloc((size_t)(j.parts * j.nacc * c), sizeof *j.psum);
        j.facc = f64 ? NULL : kiln__calloc((size_t)(j.parts * j.nacc * c), sizeof *j.facc);
        if (!j.psum || (!f64 && !j.facc)) {
            free(j.psum);
            free(j.facc);
            return kiln__errs(KILN_ERR_OOM, "%s: out of memory for %lld parts' sums of %lld columns",
                              kiln__op_table[node->op].name, (long long)j.parts, (long long)c);
        }
    }
    kiln__pool_for(j.parts, 1, rows * c > KILN_NN_PAR_WORK ? ex->n_threads : 1, norm_grad_parts, &j);
    for (int64_t k = 0; k < j.nacc; k++) {
        void *dst = out + (size_t)((rows + k) * c) * es;
        for (int64_t e = 0; e < c; e++) {
            double s = 0.0;
            for (int64_t p = 0; p < j.parts; p++) s += j.psum[(p * j.nacc + k) * c + e];
            if (f64) ((double *)dst)[e] = s;
            else ((float *)dst)[e] = (float)s;
        }
    }
    free(j.psum);
    free(j.facc);
    return KILN_OK;
}

void kiln__cpu_register_nn_norm(kiln_cpu_kernel *tab) {
    tab[KILN_OP_LAYER_NORM] = norm_kernel;
    tab[KILN_OP_RMS_NORM] = norm_kernel;
    tab[KILN_OP_LAYER_NORM_GRAD] = norm_grad_kernel;
    tab[KILN_OP_RMS_NORM_GRAD] = norm_grad_kernel;
}
