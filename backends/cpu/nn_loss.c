/* nn_loss.c — the CPU kernels of cross_entropy (per row log-sum-exp minus
 * the label's logit, averaged over the rows whose label is not ignored)
 * and of its fused backward CROSS_ENTROPY_GRAD (layout in ops/nn_loss.c). */
#include "internal.h"
#include "nn_kernels.h"
#include "nn_vec.h"
#include "pool.h"

#include <math.h>

/* -log softmax(x)[label] of one row of c logits, in double. */
#define DEFINE_CE_ROW(T, SUF)                                             \
    static double ce_row_##SUF(const T *x, int64_t c, int32_t label) {    \
        double m = -INFINITY, s = 0.0;                                    \
        for (int64_t j = 0; j < c; j++)                                   \
            if (x[j] > m) m = x[j];                                       \
        for (int64_t j = 0; j < c; j++) s += exp((double)x[j] - m);       \
        return m + log(s) - (double)x[label];                             \
    }
DEFINE_CE_ROW(double, f64)

static double ce_row_f32(const kiln_nn_vec *v, const float *x, int64_t c, int32_t label) {
    float m = v->max(x, c);
    return (double)m + log(v->exp_sum(x, NULL, c, m)) - (double)x[label];
}

/* A data-dependent check, so no kernel reads a logit out of range. */
static kiln_status check_labels(const int32_t *labels, int64_t rows, int64_t c, int32_t ignore) {
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore && (labels[r] < 0 || labels[r] >= c))
            return kiln__errs(KILN_ERR_ARG,
                              "kiln_cross_entropy: label %d of row %lld is outside [0, %lld) and is not "
                              "ignore_index %d",
                              labels[r], (long long)r, (long long)c, ignore);
    return KILN_OK;
}

typedef struct ce_job {
    kiln_tensor *node;
    double *loss; /* per row (forward) */
    double scale; /* gy / count (backward) */
} ce_job;

static void ce_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const ce_job *j = arg;
    const kiln_tensor *x = j->node->src[0];
    const int32_t *labels = j->node->src[1]->data;
    const int64_t c = x->shape[x->ndim - 1];
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t r = r0; r < r1; r++)
        if (labels[r] != (int32_t)j->node->ip[0])
            j->loss[r] = j->node->dtype == KILN_F64 ? ce_row_f64((const double *)x->data + r * c, c, labels[r])
                                                    : ce_row_f32(v, (const float *)x->data + r * c, c, labels[r]);
}

#define CE_STACK_ROWS 1024

/* Every row ignored gives a loss of 0 (torch gives NaN, 0/0): a batch of
 * padding then adds nothing to a running loss, and the backward rule gives
 * it a zero gradient to match. The rows' losses are summed in row order,
 * whatever the threads. */
static kiln_status cross_entropy_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0], *lab = node->src[1];
    const int32_t *labels = lab->data;
    int64_t c = x->shape[x->ndim - 1], rows = kiln_tensor_numel(lab);
    int32_t ignore = (int32_t)node->ip[0];
    kiln_status st = check_labels(labels, rows, c, ignore);
    if (st) return st;
    double stack[CE_STACK_ROWS];
    ce_job j = {node, rows <= CE_STACK_ROWS ? stack : kiln__malloc((size_t)rows * sizeof(double)), 0};
    if (!j.loss) return kiln__errs(KILN_ERR_OOM, "kiln_cross_entropy: out of memory for %lld rows", (long long)rows);
    kiln__pool_for(rows, 1, rows * c > KILN_NN_PAR_WORK ? ex->n_threads : 1, ce_rows, &j);
    double total = 0.0;
    int64_t count = 0;
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore) total += j.loss[r], count++;
    if (j.loss != stack) free(j.loss);
    kiln__types[node->dtype].set(node->data, 0, count ? total / (double)count : 0.0);
    return KILN_OK;
}

/* CROSS_ENTROPY_GRAD: src logits, labels, gy [1]; gx = (softmax(x) -
 * one_hot(label)) * gy / count on kept rows, 0 on ignored ones, count the
 * kept rows (1 when there are none, as the forward's loss of 0). */
static void ce_grad_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const ce_job *j = arg;
    kiln_tensor *node = j->node;
    const kiln_tensor *x = node->src[0];
    const int32_t *labels = node->src[1]->data;
    const int64_t c = x->shape[x->ndim - 1];
    const int32_t ignore = (int32_t)node->ip[0];
    const bool f64 = node->dtype == KILN_F64;
    const double scale = j->scale;
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int32_t l = labels[r];
        if (f64) {
            const double *xr = (const double *)x->data + r * c;
            double *g = (double *)node->data + r * c;
            if (l == ignore) {
                memset(g, 0, (size_t)c * sizeof *g);
                continue;
            }
            double lse = ce_row_f64(xr, c, l) + xr[l];
            for (int64_t j = 0; j < c; j++) g[j] = exp(xr[j] - lse) * scale;
            g[l] -= scale;
        } else {
            const float *xr = (const float *)x->data + r * c;
            float *g = (float *)node->data + r * c;
            if (l == ignore) {
                memset(g, 0, (size_t)c * sizeof *g);
                continue;
            }
            float m = v->max(xr, c);
            double lse = (double)m + log(v->exp_sum(xr, NULL, c, m));
            float hi = (float)lse;
            v->exp_scale(xr, g, c, hi, (float)(lse - (double)hi), (float)scale);
            g[l] -= (float)scale;
        }
    }
}

static kiln_status cross_entropy_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0], *lab = node->src[1], *gyt = node->src[2];
    const int32_t *labels = lab->data;
    int64_t c = x->shape[x->ndim - 1], rows = kiln_tensor_numel(lab), count = 0;
    int32_t ignore = (int32_t)node->ip[0];
    kiln_status st = check_labels(labels, rows, c, ignore);
    if (st) return st;
    for (int64_t r = 0; r < rows; r++) count += labels[r] != ignore;
    ce_job j = {node, NULL, kiln__types[gyt->dtype].get(gyt->data, 0) / (double)(count ? count : 1)};
    kiln__pool_for(rows, 1, rows * c > KILN_NN_PAR_WORK ? ex->n_threads : 1, ce_grad_rows, &j);
    return KILN_OK;
}

void kiln__cpu_register_nn_loss(kiln_cpu_kernel *tab) {
    tab[KILN_OP_CROSS_ENTROPY] = cross_entropy_kernel;
    tab[KILN_OP_CROSS_ENTROPY_GRAD] = cross_entropy_grad_kernel;
}
