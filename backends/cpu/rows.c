/* rows.c — CPU kernels of the index ops: get_rows, scatter_add_rows and
 * one_hot. Sources are contiguous; indices are checked before anything is
 * written, and an index out of range is an error status, not a crash. */
#include "internal.h"
#include "../../quant/quant.h"

#define PAR_MIN 32768 /* elements below which a kernel stays on one thread */

/* KILN_OK, or an error naming the first index outside [0, v). */
static kiln_status check_indices(const char *who, const int32_t *idx, int64_t n, int64_t v) {
    for (int64_t p = 0; p < n; p++)
        if (idx[p] < 0 || idx[p] >= v)
            return kiln__errs(KILN_ERR_ARG, "%s: index %d at position %lld is outside [0, %lld)", who, (int)idx[p],
                              (long long)p, (long long)v);
    return KILN_OK;
}

static kiln_status get_rows_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    const int32_t *idx = ix->data;
    int64_t v = table->shape[0], d = table->shape[1], n = kiln_tensor_numel(ix);
    kiln_status s = check_indices("kiln_get_rows", idx, n, v);
    if (s) return s;
    size_t row_bytes = kiln__elems_bytes(table->dtype, d), oes = kiln__types[t->dtype].size;
    bool same = table->dtype == t->dtype, quant = kiln__is_quant(table->dtype); /* else a half table widened to f32 */
    const char *src = table->data;
    char *dst = t->data;
#pragma omp parallel for num_threads(ex->n_threads) if (n * d > PAR_MIN)
    for (int64_t p = 0; p < n; p++) {
        const char *row = src + (size_t)idx[p] * row_bytes;
        char *out = dst + (size_t)(p * d) * oes;
        if (same) memcpy(out, row, (size_t)d * oes);
        else if (quant) kiln__dequantize_row(table->dtype, row, (float *)out, d);
        else kiln__types[table->dtype].to_f32(row, (float *)out, d);
    }
    return KILN_OK;
}

/* out[idx[p]] += rows[p] for columns [c0, c1): threads take disjoint column
 * ranges, so repeated indices never race. */
#define SCATTER_BODY(T)                                                 \
    do {                                                                \
        const T *r = rows->data;                                        \
        T *o = t->data;                                                 \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (par)") \
        for (int64_t c = 0; c < chunks; c++) {                          \
            int64_t c0 = c * d / chunks, c1 = (c + 1) * d / chunks;     \
            for (int64_t p = 0; p < n; p++) {                           \
                const T *src = r + p * d;                               \
                T *dst = o + (int64_t)idx[p] * d;                       \
                for (int64_t j = c0; j < c1; j++) dst[j] += src[j];     \
            }                                                           \
        }                                                               \
    } while (0)

static kiln_status scatter_add_rows_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *rows = t->src[0], *ix = t->src[1];
    const int32_t *idx = ix->data;
    int64_t v = t->shape[0], d = t->shape[1], n = kiln_tensor_numel(ix);
    kiln_status s = check_indices("scatter_add_rows", idx, n, v);
    if (s) return s;
    memset(t->data, 0, kiln_tensor_nbytes(t));
    bool par = n * d > PAR_MIN && d >= 2 * ex->n_threads;
    int64_t chunks = par ? ex->n_threads : 1;
    if (t->dtype == KILN_F32) SCATTER_BODY(float);
    else if (t->dtype == KILN_F64) SCATTER_BODY(double);
    else return kiln__errs(KILN_ERR_UNSUPPORTED, "scatter_add_rows: no CPU kernel for %s", kiln_dtype_name(t->dtype));
    return KILN_OK;
}

static kiln_status one_hot_kernel(kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const int32_t *labels = t->src[0]->data;
    int64_t n = t->ip[0], m = kiln_tensor_numel(t->src[0]);
    memset(t->data, 0, kiln_tensor_nbytes(t)); /* all-zero bits are 0 in every float dtype */
    for (int64_t p = 0; p < m; p++)
        if (labels[p] >= 0 && labels[p] < n) kiln__types[t->dtype].set(t->data, p * n + labels[p], 1.0);
    return KILN_OK;
}

void kiln__cpu_register_rows(kiln_cpu_kernel *tab) {
    tab[KILN_OP_GET_ROWS] = get_rows_kernel;
    tab[KILN_OP_SCATTER_ADD_ROWS] = scatter_add_rows_kernel;
    tab[KILN_OP_ONE_HOT] = one_hot_kernel;
}
