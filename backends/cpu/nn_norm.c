/* nn_norm.c — CPU kernels for layer_norm and rms_norm over the last axis.
 * Row statistics are accumulated in double for both dtypes. */
#include "internal.h"
#include "nn_kernels.h"

#include <math.h>

/* y = (x - mean) / sqrt(var + eps) * w + b over one row of c values (w, b
 * may be NULL); two passes, so the variance never cancels. */
#define DEFINE_LAYER_NORM_ROW(T, SUF)                                                                 \
    static void layer_norm_row_##SUF(const T *x, const T *w, const T *b, T *y, int64_t c, double eps) { \
        double mean = 0.0, var = 0.0;                                                                 \
        for (int64_t j = 0; j < c; j++) mean += x[j];                                                 \
        mean /= (double)c;                                                                            \
        for (int64_t j = 0; j < c; j++) var += ((double)x[j] - mean) * ((double)x[j] - mean);         \
        double rstd = 1.0 / sqrt(var / (double)c + eps);                                              \
        for (int64_t j = 0; j < c; j++) {                                                             \
            double v = ((double)x[j] - mean) * rstd;                                                  \
            if (w) v *= w[j];                                                                         \
            if (b) v += b[j];                                                                         \
            y[j] = (T)v;                                                                              \
        }                                                                                             \
    }
DEFINE_LAYER_NORM_ROW(float, f32)
DEFINE_LAYER_NORM_ROW(double, f64)

/* y = x / sqrt(mean(x^2) + eps) * w over one row (w may be NULL). */
#define DEFINE_RMS_NORM_ROW(T, SUF)                                                         \
    static void rms_norm_row_##SUF(const T *x, const T *w, T *y, int64_t c, double eps) {  \
        double ss = 0.0;                                                                    \
        for (int64_t j = 0; j < c; j++) ss += (double)x[j] * x[j];                          \
        double r = 1.0 / sqrt(ss / (double)c + eps);                                        \
        for (int64_t j = 0; j < c; j++) y[j] = (T)(w ? (double)x[j] * r * w[j] : (double)x[j] * r); \
    }
DEFINE_RMS_NORM_ROW(float, f32)
DEFINE_RMS_NORM_ROW(double, f64)

/* src: x [, w [, b]] as ip[0] = has_w and ip[1] = has_b say. */
static kiln_status layer_norm_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t c = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / c;
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0, f64 = node->dtype == KILN_F64;
    const void *x = node->src[0]->data, *w = has_w ? node->src[1]->data : NULL;
    const void *b = has_b ? node->src[1 + has_w]->data : NULL;
    double eps = node->fp[0];
#pragma omp parallel for num_threads(ex->n_threads) if (rows * c > KILN_NN_PAR_WORK)
    for (int64_t r = 0; r < rows; r++) {
        if (f64) layer_norm_row_f64((const double *)x + r * c, w, b, (double *)node->data + r * c, c, eps);
        else layer_norm_row_f32((const float *)x + r * c, w, b, (float *)node->data + r * c, c, eps);
    }
    return KILN_OK;
}

/* src: x [, w] as ip[0] = has_w says. */
static kiln_status rms_norm_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t c = node->shape[node->ndim - 1], rows = kiln_tensor_numel(node) / c;
    bool f64 = node->dtype == KILN_F64;
    const void *x = node->src[0]->data, *w = node->ip[0] ? node->src[1]->data : NULL;
    double eps = node->fp[0];
#pragma omp parallel for num_threads(ex->n_threads) if (rows * c > KILN_NN_PAR_WORK)
    for (int64_t r = 0; r < rows; r++) {
        if (f64) rms_norm_row_f64((const double *)x + r * c, w, (double *)node->data + r * c, c, eps);
        else rms_norm_row_f32((const float *)x + r * c, w, (float *)node->data + r * c, c, eps);
    }
    return KILN_OK;
}

void kiln__cpu_register_nn_norm(kiln_cpu_kernel *tab) {
    tab[KILN_OP_LAYER_NORM] = layer_norm_kernel;
    tab[KILN_OP_RMS_NORM] = rms_norm_kernel;
}
