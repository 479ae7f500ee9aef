/* nn_loss.c — the CPU kernel of cross_entropy: per row log-sum-exp minus
 * the label's logit, averaged over the rows whose label is not ignored. */
#include "internal.h"
#include "nn_kernels.h"

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
DEFINE_CE_ROW(float, f32)
DEFINE_CE_ROW(double, f64)

/* Every row ignored gives a loss of 0 (torch gives NaN, 0/0): a batch of
 * padding then adds nothing to a running loss, and the backward rule gives
 * it a zero gradient to match. */
static kiln_status cross_entropy_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *x = node->src[0], *lab = node->src[1];
    const int32_t *labels = lab->data;
    int64_t c = x->shape[x->ndim - 1], rows = kiln_tensor_numel(lab);
    int32_t ignore = (int32_t)node->ip[0];
    bool f64 = node->dtype == KILN_F64;
    /* data-dependent check first, so the sum below never reads out of range */
    for (int64_t r = 0; r < rows; r++)
        if (labels[r] != ignore && (labels[r] < 0 || labels[r] >= c))
            return kiln__errs(KILN_ERR_ARG,
                              "kiln_cross_entropy: label %d of row %lld is outside [0, %lld) and is not "
                              "ignore_index %d",
                              labels[r], (long long)r, (long long)c, ignore);
    double total = 0.0;
    int64_t count = 0;
#pragma omp parallel for num_threads(ex->n_threads) if (rows * c > KILN_NN_PAR_WORK) reduction(+ : total, count)
    for (int64_t r = 0; r < rows; r++) {
        if (labels[r] == ignore) continue;
        total += f64 ? ce_row_f64((const double *)x->data + r * c, c, labels[r])
                     : ce_row_f32((const float *)x->data + r * c, c, labels[r]);
        count++;
    }
    kiln__types[node->dtype].set(node->data, 0, count ? total / (double)count : 0.0);
    return KILN_OK;
}

void kiln__cpu_register_nn_loss(kiln_cpu_kernel *tab) { tab[KILN_OP_CROSS_ENTROPY] = cross_entropy_kernel; }
