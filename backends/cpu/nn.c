/* nn.c — CPU kernels for softmax, log_softmax and dropout, and the nn
 * family's kernel-table registration, which calls the helpers of the other
 * nn kernel files (nn_loss.c, nn_norm.c, nn_attention.c).
 *
 * Each kernel's body is written once, as a macro instantiated for float
 * and double; the OpenMP loop around it dispatches on the dtype. */
#include "internal.h"
#include "nn_kernels.h"

#include <math.h>

/* One row of n values of which the first nv are visible (the causal mask
 * hides the rest). Max-subtracted and summed in double. A row with nothing
 * visible gives 0 (softmax) or -inf (log_softmax) everywhere: torch's
 * masked_fill + softmax would give NaN there. */
#define DEFINE_SOFTMAX_ROW(T, SUF)                                                                \
    static void softmax_row_##SUF(const T *x, T *y, int64_t nv, int64_t n, bool log_out) {       \
        double m = -INFINITY, s = 0.0;                                                            \
        for (int64_t j = 0; j < nv; j++)                                                          \
            if (x[j] > m) m = x[j];                                                               \
        if (log_out) {                                                                            \
            for (int64_t j = 0; j < nv; j++) s += exp((double)x[j] - m);                          \
            double lse = m + log(s);                                                              \
            for (int64_t j = 0; j < nv; j++) y[j] = (T)((double)x[j] - lse);                      \
            for (int64_t j = nv; j < n; j++) y[j] = (T)-INFINITY;                                 \
        } else {                                                                                  \
            for (int64_t j = 0; j < nv; j++) {                                                    \
                double e = exp((double)x[j] - m);                                                 \
                s += e;                                                                           \
                y[j] = (T)e;                                                                      \
            }                                                                                     \
            double inv = 1.0 / s;                                                                 \
            for (int64_t j = 0; j < nv; j++) y[j] = (T)(y[j] * inv);                              \
            for (int64_t j = nv; j < n; j++) y[j] = 0;                                            \
        }                                                                                         \
    }
DEFINE_SOFTMAX_ROW(float, f32)
DEFINE_SOFTMAX_ROW(double, f64)

/* Over the last axis. Causal: row i of the last two dims (rows x n) sees
 * columns j <= i + (n - rows). */
static kiln_status softmax_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0];
    int64_t n = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / n;
    bool causal = node->ip[0] != 0, log_out = node->op == KILN_OP_LOG_SOFTMAX, f64 = node->dtype == KILN_F64;
    int64_t mrows = causal ? node->shape[node->ndim - 2] : 1;
#pragma omp parallel for num_threads(ex->n_threads) if (rows * n > KILN_NN_PAR_WORK)
    for (int64_t r = 0; r < rows; r++) {
        int64_t nv = causal ? r % mrows + n - mrows + 1 : n;
        if (nv < 0) nv = 0;
        if (f64) softmax_row_f64((const double *)x->data + r * n, (double *)node->data + r * n, nv, n, log_out);
        else softmax_row_f32((const float *)x->data + r * n, (float *)node->data + r * n, nv, n, log_out);
    }
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
    uint64_t seed = (uint64_t)node->ip[0] ^ (ex->run * 0x9e3779b97f4a7c15ull);
    double p = node->fp[0];
    bool f64 = node->dtype == KILN_F64;
    int64_t chunks = (n + DROPOUT_CHUNK - 1) / DROPOUT_CHUNK;
#pragma omp parallel for num_threads(ex->n_threads) if (n > KILN_NN_PAR_WORK)
    for (int64_t c = 0; c < chunks; c++) {
        int64_t lo = c * DROPOUT_CHUNK, hi = lo + DROPOUT_CHUNK < n ? lo + DROPOUT_CHUNK : n;
        if (f64) dropout_span_f64(x->data, node->data, lo, hi, seed, p);
        else dropout_span_f32(x->data, node->data, lo, hi, seed, p);
    }
    return KILN_OK;
}

void kiln__cpu_register_nn(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SOFTMAX] = softmax_kernel;
    tab[KILN_OP_LOG_SOFTMAX] = softmax_kernel;
    tab[KILN_OP_DROPOUT] = dropout_kernel;
    kiln__cpu_register_nn_loss(tab);
    kiln__cpu_register_nn_norm(tab);
    kiln__cpu_register_nn_attention(tab);
}
