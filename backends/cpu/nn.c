/* nn.c — CPU kernels for softmax, log_softmax, their backward SOFTMAX_GRAD
 * and dropout, and the nn
 * family's kernel-table registration, which calls the helpers of the other
 * nn kernel files (nn_loss.c, nn_norm.c, nn_norm_chan.c, nn_attention.c).
 *
 * f64 rows run in plain double loops (the precision gradient checks need);
 * f32 rows use the run-time chosen row primitives of nn_vec.h. */
#include "internal.h"
#include "nn_kernels.h"
#include "nn_vec.h"
#include "pool.h"

#include <math.h>

/* One row of n values of which the first nv are visible (the causal mask
 * hides the rest). A row with nothing visible gives 0 (softmax) or -inf
 * (log_softmax) everywhere: torch's masked_fill + softmax would give NaN.
 * f64 is max-subtracted and summed in double; f32 goes through the
 * kiln_nn_vec row primitives of the CPU's instruction set. */
static void softmax_row_f64(const double *x, double *y, int64_t nv, int64_t n, bool log_out) {
    double m = -INFINITY, s = 0.0;
    for (int64_t j = 0; j < nv; j++)
        if (x[j] > m) m = x[j];
    if (log_out) {
        for (int64_t j = 0; j < nv; j++) s += exp(x[j] - m);
        double lse = m + log(s);
        for (int64_t j = 0; j < nv; j++) y[j] = x[j] - lse;
        for (int64_t j = nv; j < n; j++) y[j] = -INFINITY;
    } else {
        for (int64_t j = 0; j < nv; j++) s += y[j] = exp(x[j] - m);
        double inv = 1.0 / s;
        for (int64_t j = 0; j < nv; j++) y[j] *= inv;
        for (int64_t j = nv; j < n; j++) y[j] = 0;
    }
}

static void softmax_row_f32(const kiln_nn_vec *v, const float *x, float *y, int64_t nv, int64_t n, bool log_out) {
    if (nv > 0) {
        float m = v->max(x, nv);
        if (log_out) {
            double lse = (double)m + log(v->exp_sum(x, NULL, nv, m));
            float hi = (float)-lse;
            v->add_const(x, y, nv, hi, (float)(-lse - (double)hi));
        }
        else v->scale(y, nv, (float)(1.0 / v->exp_sum(x, y, nv, m)));
    }
    for (int64_t j = nv > 0 ? nv : 0; j < n; j++) y[j] = log_out ? -INFINITY : 0.0f;
}

/* Visible columns of row r: causal row i of the last two dims (mrows x n)
 * sees columns j <= i + (n - mrows). */
static int64_t visible(int64_t r, int64_t n, int64_t mrows, bool causal) {
    int64_t nv = causal ? r % mrows + n - mrows + 1 : n;
    return nv < 0 ? 0 : nv;
}

/* Rows [r0, r1) of the node (arg) over the last axis. */
static void softmax_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    kiln_tensor *node = arg;
    const kiln_tensor *x = node->src[0];
    int64_t n = node->shape[node->ndim - 1];
    bool causal = node->ip[0] != 0, log_out = node->op == KILN_OP_LOG_SOFTMAX, f64 = node->dtype == KILN_F64;
    int64_t mrows = causal ? node->shape[node->ndim - 2] : 1;
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t nv = visible(r, n, mrows, causal);
        if (f64) softmax_row_f64((const double *)x->data + r * n, (double *)node->data + r * n, nv, n, log_out);
        else softmax_row_f32(v, (const float *)x->data + r * n, (float *)node->data + r * n, nv, n, log_out);
    }
}

static kiln_status softmax_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t n = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / n;
    kiln__pool_for(rows, 1, rows * n > KILN_NN_PAR_WORK ? ex->n_threads : 1, softmax_rows, node);
    return KILN_OK;
}

/* SOFTMAX_GRAD (layout in ops/nn.c): per row, softmax gx = y * (gy -
 * sum(gy * y)) over the visible columns and 0 at hidden ones; log_softmax
 * gx = gy - exp(y) * sum(gy) with the sum over the whole row, and gy at
 * hidden columns (their y is -inf). */
static void softmax_grad_row_f64(const double *y, const double *gy, double *gx, int64_t nv, int64_t n, bool log_in) {
    double s = 0.0;
    if (log_in) {
        for (int64_t j = 0; j < n; j++) s += gy[j];
        for (int64_t j = 0; j < nv; j++) gx[j] = gy[j] - exp(y[j]) * s;
    } else {
        for (int64_t j = 0; j < nv; j++) s += gy[j] * y[j];
        for (int64_t j = 0; j < nv; j++) gx[j] = y[j] * (gy[j] - s);
    }
    for (int64_t j = nv; j < n; j++) gx[j] = log_in ? gy[j] : 0;
}

static void softmax_grad_row_f32(const kiln_nn_vec *v, const float *y, const float *gy, float *gx, int64_t nv,
                                 int64_t n, bool log_in) {
    if (log_in) v->log_softmax_bwd(y, gy, gx, nv, (float)v->sum(gy, n));
    else v->softmax_bwd(y, gy, gx, nv, (float)v->dot(gy, y, nv));
    for (int64_t j = nv; j < n; j++) gx[j] = log_in ? gy[j] : 0.0f;
}

static void softmax_grad_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    kiln_tensor *node = arg;
    const kiln_tensor *y = node->src[0], *gy = node->src[1];
    int64_t n = node->shape[node->ndim - 1];
    bool causal = node->ip[0] != 0, log_in = node->ip[1] != 0, f64 = node->dtype == KILN_F64;
    int64_t mrows = causal ? node->shape[node->ndim - 2] : 1;
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t nv = visible(r, n, mrows, causal);
        if (f64)
            softmax_grad_row_f64((const double *)y->data + r * n, (const double *)gy->data + r * n,
                                 (double *)node->data + r * n, nv, n, log_in);
        else
            softmax_grad_row_f32(v, (const float *)y->data + r * n, (const float *)gy->data + r * n,
                                 (float *)node->data + r * n, nv, n, log_in);
    }
}

static kiln_status softmax_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t n = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / n;
    kiln__pool_for(rows, 1, rows * n > KILN_NN_PAR_WORK ? ex->n_threads : 1, softmax_grad_rows, node);
    return KILN_OK;
}

/* Elements [lo, hi): kept with probability 1 - p and scaled by 1/(1-p). */
#define DEFINE_DROPOUT_SPAN(T, SUF)                                                                        \
    static void dropout_span_##SUF(const T *x, T *y, int64_t lo, int64_t hi, uint64_t seed, double p) {  \
        double keep_scale = 1.0 / (1.0 - p);                                                               \
        for (int64_t i = lo; i < hi; i++)                                                                  \
            y[i] = kiln__uniform01(seed, (uint64_t)i) >= p ? (T)(x[i] * keep_scale) : (T)0;                \
    }
DEFINE_DROPOUT_SPAN(float, f32)
DEFINE_DROPOUT_SPAN(double, f64)

#define DROPOUT_CHUNK 4096

typedef struct dropout_job {
    const kiln_tensor *node;
    uint64_t seed;
} dropout_job;

static void dropout_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    const dropout_job *j = arg;
    const kiln_tensor *node = j->node, *x = node->src[0];
    int64_t n = kiln_tensor_numel(node);
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        int64_t lo = c * DROPOUT_CHUNK, hi = lo + DROPOUT_CHUNK < n ? lo + DROPOUT_CHUNK : n;
        if (node->dtype == KILN_F64) dropout_span_f64(x->data, node->data, lo, hi, j->seed, node->fp[0]);
        else dropout_span_f32(x->data, node->data, lo, hi, j->seed, node->fp[0]);
    }
}

/* The mask's stream mixes the op's seed with the graph's run counter: a
 * new mask each compute, the same for every node of one compute (so the
 * backward's dropout of gy matches the forward's). Eval mode copies. */
static kiln_status dropout_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0];
    int64_t n = kiln_tensor_numel(node);
    if (!ex->training) {
        memcpy(node->data, x->data, (size_t)n * kiln__types[node->dtype].size);
        return KILN_OK;
    }
    dropout_job j = {node, (uint64_t)node->ip[0] ^ (ex->run * 0x9e3779b97f4a7c15ull)};
    kiln__pool_for((n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK, 1, n > KILN_NN_PAR_WORK ? ex->n_threads : 1,
                   dropout_chunks, &j);
    return KILN_OK;
}

void kiln__cpu_register_nn(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SOFTMAX] = softmax_kernel;
    tab[KILN_OP_LOG_SOFTMAX] = softmax_kernel;
    tab[KILN_OP_SOFTMAX_GRAD] = softmax_grad_kernel;
    tab[KILN_OP_DROPOUT] = dropout_kernel;
    kiln__cpu_register_nn_loss(tab);
    kiln__cpu_register_nn_norm(tab);
    kiln__cpu_register_nn_norm_chan(tab);
    kiln__cpu_register_nn_attention(tab);
}
