/* rows.c — CPU kernels of the index ops: get_rows, scatter_add_rows and
 * one_hot. Sources are contiguous; indices are checked before anything is
 * written, and an index out of range is an error status, not a crash. */
#include "internal.h"
#include "coders.h"
#include "pool.h"

#define PAR_MIN 32768 /* elements below which a kernel stays on one thread */

/* KILN_OK, or an error naming the first index outside [0, v). */
static kiln_status check_indices(const char *who, const int32_t *idx, int64_t n, int64_t v) {
    for (int64_t p = 0; p < n; p++)
        if (idx[p] < 0 || idx[p] >= v)
            return kiln__errs(KILN_ERR_ARG, "%s: index %d at position %lld is outside [0, %lld)", who, (int)idx[p],
                              (long long)p, (long long)v);
    return KILN_OK;
}

typedef struct get_rows_job {
    const kiln_tensor *table, *t;
    const int32_t *idx;
    int64_t d;
} get_rows_job;

static void get_rows_range(void *arg, int64_t p0, int64_t p1, int tid) {
    const get_rows_job *j = arg;
    const kiln_tensor *table = j->table;
    const int64_t d = j->d;
    size_t row_bytes = kiln__elems_bytes(table->dtype, d), oes = kiln__types[j->t->dtype].size;
    /* else a half table widened to f32 */
    bool same = table->dtype == j->t->dtype, quant = kiln__is_quant(table->dtype);
    const char *src = table->data;
    char *dst = j->t->data;
    (void)tid;
    for (int64_t p = p0; p < p1; p++) {
        const char *row = src + (size_t)j->idx[p] * row_bytes;
        char *out = dst + (size_t)(p * d) * oes;
        if (same) memcpy(out, row, (size_t)d * oes);
        else if (quant) kiln__dequantize_row(table->dtype, row, (float *)out, d);
        else kiln__types[table->dtype].to_f32(row, (float *)out, d);
    }
}

static kiln_status get_rows_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    get_rows_job j = {table, t, ix->data, table->shape[1]};
    int64_t v = table->shape[0], n = kiln_tensor_numel(ix);
    kiln_status s = check_indices("kiln_get_rows", j.idx, n, v);
    if (s) return s;
    kiln__pool_for(n, 1, n * j.d > PAR_MIN ? ex->n_threads : 1, get_rows_range, &j);
    return KILN_OK;
}

typedef struct scatter_job {
    const kiln_tensor *rows, *t;
    const int32_t *idx;
    int64_t n, d;
} scatter_job;

/* out[idx[p]] += rows[p] for the columns of groups [g0, g1) of 16: threads
 * take disjoint column ranges, so repeated indices never race. */
#define SCATTER_BODY(T)                                                        \
    do {                                                                       \
        const T *r = j->rows->data;                                            \
        T *o = j->t->data;                                                     \
        for (int64_t p = 0; p < j->n; p++) {                                   \
            const T *src = r + p * j->d;                                       \
            T *dst = o + (int64_t)j->idx[p] * j->d;                            \
            for (int64_t c = c0; c < c1; c++) dst[c] += src[c];                \
        }                                                                      \
    } while (0)

static void scatter_range(void *arg, int64_t g0, int64_t g1, int tid) {
    const scatter_job *j = arg;
    const int64_t c0 = g0 * 16, c1 = g1 * 16 < j->d ? g1 * 16 : j->d;
    (void)tid;
    if (j->t->dtype == KILN_F32) SCATTER_BODY(float);
    else SCATTER_BODY(double);
}
#undef SCATTER_BODY

static kiln_status scatter_add_rows_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *rows = t->src[0], *ix = t->src[1];
    scatter_job j = {rows, t, ix->data, kiln_tensor_numel(ix), t->shape[1]};
    kiln_status s = check_indices("scatter_add_rows", j.idx, j.n, t->shape[0]);
    if (s) return s;
    if (t->dtype != KILN_F32 && t->dtype != KILN_F64)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "scatter_add_rows: no CPU kernel for %s", kiln_dtype_name(t->dtype));
    memset(t->data, 0, kiln_tensor_nbytes(t));
    kiln__pool_for((j.d + 15) / 16, 1, j.n * j.d > PAR_MIN ? ex->n_threads : 1, scatter_range, &j);
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
