/* reduce.c — CPU kernels for sum, max, min and argmax over one axis or
 * over all elements. Contiguous f32 sources take the SIMD tables of
 * vecmath.h: rows (last axis), columns (a leading axis, e.g. a bias
 * gradient [N,D] -> [D], with per-thread partials over row ranges) and
 * whole arrays in fixed chunks (so a whole sum does not depend on the
 * thread count). Other sources and f64 take the portable path (any strides). Sums
 * accumulate in double (the SIMD tables widen each f32 vector). */
#include "bcast.h"
#include "vecmath.h"
#include "pool.h"

#include <math.h>

#define PAR_MIN 32768
#define PANEL 1024       /* columns per column-reduction task */
#define MAX_CHUNKS 4096  /* pieces of a whole-array reduction */

/* A NaN wins; on ties the earlier value stays (argmax's first index). */
static inline bool better(kiln_op op, double v, double best) {
    if (best != best) return false;
    return v != v || (op == KILN_OP_MIN ? v < best : v > best);
}

static bool contiguous(const kiln_tensor *x) {
    int64_t st = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (x->shape[d] != 1 && x->stride[d] != st) return false;
        st *= x->shape[d];
    }
    return true;
}

static void put(kiln_tensor *t, int64_t o, double v, int64_t at) {
    if (t->op == KILN_OP_ARGMAX) ((int32_t *)t->data)[o] = (int32_t)at;
    else ((float *)t->data)[o] = (float)v;
}

/* What the range functions of the contiguous paths read. */
typedef struct red_job {
    kiln_tensor *t;
    const float *x;
    int64_t n, ch, inner, panels, split;
    double *pv;
    int64_t *pi;
} red_job;

static void whole_chunks(void *arg, int64_t c0, int64_t c1, int tid) {
    const red_job *j = arg;
    const kiln_vm *vm = kiln__vm();
    const kiln_op op = j->t->op;
    const float *x = j->x;
    (void)tid;
    for (int64_t c = c0; c < c1; c++) {
        int64_t lo = c * j->ch, len = j->n - lo < j->ch ? j->n - lo : j->ch;
        if (op == KILN_OP_SUM) j->pv[c] = vm->sum(x + lo, len);
        else if (op == KILN_OP_ARGMAX) j->pi[c] = lo + vm->argmax(x + lo, len), j->pv[c] = x[j->pi[c]];
        else j->pv[c] = vm->maxmin(op == KILN_OP_MAX, x + lo, len);
    }
}

/* One run of n values: fixed chunks in parallel, combined in order. */
static void reduce_whole(kiln_tensor *t, const float *x, int64_t n, const kiln_exec *ex) {
    kiln_op op = t->op;
    int64_t ch = (n + MAX_CHUNKS - 1) / MAX_CHUNKS;
    ch = ch < 16384 ? 16384 : (ch + 63) / 64 * 64;
    int64_t nch = (n + ch - 1) / ch;
    double pv[MAX_CHUNKS];
    int64_t pi[MAX_CHUNKS];
    red_job j = {.t = t, .x = x, .n = n, .ch = ch, .pv = pv, .pi = pi};
    kiln__pool_for(nch, 1, n > 4 * PAR_MIN ? ex->n_threads : 1, whole_chunks, &j);
    double v = pv[0];
    int64_t at = op == KILN_OP_ARGMAX ? pi[0] : 0;
    for (int64_t c = 1; c < nch; c++) {
        if (op == KILN_OP_SUM) v += pv[c];
        else if (better(op == KILN_OP_ARGMAX ? KILN_OP_MAX : op, pv[c], v)) v = pv[c], at = op == KILN_OP_ARGMAX ? pi[c] : 0;
    }
    put(t, 0, v, at);
}

/* tasks [k0, k1) of reduce_cols: a panel of columns over a share of the rows */
static void col_tasks(void *arg, int64_t k0, int64_t k1, int tid) {
    const red_job *j = arg;
    const kiln_vm *vm = kiln__vm();
    kiln_tensor *t = j->t;
    const kiln_op op = t->op;
    const int64_t n = j->n, inner = j->inner, panels = j->panels, split = j->split;
    (void)tid;
    for (int64_t task = k0; task < k1; task++) {
        int64_t g = task / split, c = task % split, o = g / panels, j0 = g % panels * PANEL;
        int64_t m = inner - j0 < PANEL ? inner - j0 : PANEL, r0 = c * n / split, r1 = (c + 1) * n / split;
        const float *base = j->x + (o * n + r0) * inner + j0;
        double acc[PANEL];
        int64_t at[PANEL];
        if (op == KILN_OP_SUM) {
            memset(acc, 0, (size_t)m * sizeof *acc);
            vm->col_sum(base, inner, r1 - r0, m, acc);
        } else if (op == KILN_OP_ARGMAX) {
            float best[PANEL];
            for (int64_t e = 0; e < m; e++) best[e] = base[e], at[e] = r0;
            for (int64_t r = 1; r < r1 - r0; r++) {
                const float *row = base + r * inner;
                for (int64_t e = 0; e < m; e++)
                    if ((row[e] != row[e] && best[e] == best[e]) || row[e] > best[e]) best[e] = row[e], at[e] = r0 + r;
            }
            for (int64_t e = 0; e < m; e++) acc[e] = best[e];
        } else {
            float best[PANEL];
            memcpy(best, base, (size_t)m * sizeof *best);
            vm->col_maxmin(op == KILN_OP_MAX, base + inner, inner, r1 - r0 - 1, m, best);
            for (int64_t e = 0; e < m; e++) acc[e] = best[e];
        }
        for (int64_t e = 0; e < m; e++) {
            if (split == 1) put(t, o * inner + j0 + e, acc[e], at[e]);
            else j->pv[task * PANEL + e] = acc[e], j->pi[task * PANEL + e] = at[e];
        }
    }
}

/* outer x [n rows x inner columns]: each task reduces a panel of columns
 * over a range of rows; with few panels the rows are split across threads
 * and the partials combined in row order. */
static kiln_status reduce_cols(kiln_tensor *t, const float *x, int64_t outer, int64_t n, int64_t inner,
                               const kiln_exec *ex) {
    kiln_op op = t->op;
    int64_t panels = (inner + PANEL - 1) / PANEL, groups = outer * panels, total = outer * n * inner;
    int nth = ex->n_threads > 0 ? ex->n_threads : 1;
    int64_t split = groups < nth && n >= 2 * nth && total > PAR_MIN ? nth : 1;
    double *pv = NULL;
    int64_t *pi = NULL;
    if (split > 1) {
        pv = kiln__malloc((size_t)(split * groups * PANEL) * sizeof *pv);
        pi = kiln__malloc((size_t)(split * groups * PANEL) * sizeof *pi);
        if (!pv || !pi) {
            free(pv), free(pi);
            return kiln__errs(KILN_ERR_OOM, "%s: no memory for per-thread partials", kiln__op_table[op].name);
        }
    }
    red_job j = {.t = t, .x = x, .n = n, .inner = inner, .panels = panels, .split = split, .pv = pv, .pi = pi};
    kiln__pool_for(groups * split, 1, total > PAR_MIN ? nth : 1, col_tasks, &j);
    if (split > 1) {
        kiln_op cmp = op == KILN_OP_ARGMAX ? KILN_OP_MAX : op;
        for (int64_t g = 0; g < groups; g++) {
            int64_t o = g / panels, j0 = g % panels * PANEL, m = inner - j0 < PANEL ? inner - j0 : PANEL;
            for (int64_t j = 0; j < m; j++) {
                double v = pv[g * split * PANEL + j];
                int64_t a = pi[g * split * PANEL + j];
                for (int64_t c = 1; c < split; c++) {
                    double w = pv[(g * split + c) * PANEL + j];
                    if (op == KILN_OP_SUM) v += w;
                    else if (better(cmp, w, v)) v = w, a = pi[(g * split + c) * PANEL + j];
                }
                put(t, o * inner + j0 + j, v, a);
            }
        }
    }
    free(pv);
    free(pi);
    return KILN_OK;
}

static void row_range(void *arg, int64_t o0, int64_t o1, int tid) {
    const red_job *j = arg;
    const kiln_vm *vm = kiln__vm();
    const kiln_op op = j->t->op;
    (void)tid;
    for (int64_t o = o0; o < o1; o++) {
        const float *row = j->x + o * j->n;
        if (op == KILN_OP_SUM) put(j->t, o, vm->sum(row, j->n), 0);
        else if (op == KILN_OP_ARGMAX) put(j->t, o, 0, vm->argmax(row, j->n));
        else put(j->t, o, vm->maxmin(op == KILN_OP_MAX, row, j->n), 0);
    }
}

/* Contiguous f32: whole array, rows, or columns. */
static kiln_status reduce_f32(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *xt = t->src[0];
    const float *x = xt->data;
    int axis = (int)t->ip[0];
    int64_t total = kiln__numel(xt->ndim, xt->shape), outer = 1, inner = 1, n = total;
    if (axis >= 0) {
        n = xt->shape[axis];
        for (int d = 0; d < axis; d++) outer *= xt->shape[d];
        for (int d = axis + 1; d < xt->ndim; d++) inner *= xt->shape[d];
    }
    if (inner > 1) return reduce_cols(t, x, outer, n, inner, ex);
    if (outer == 1) {
        reduce_whole(t, x, n, ex);
        return KILN_OK;
    }
    red_job j = {.t = t, .x = x, .n = n};
    kiln__pool_for(outer, 1, total > PAR_MIN ? ex->n_threads : 1, row_range, &j);
    return KILN_OK;
}

/* Reduce n values at p[0], p[s], ... */
#define REDUCE_LINE(T, p, n, s, op, out_v, out_i)                                     \
    do {                                                                              \
        if (op == KILN_OP_SUM) {                                                      \
            double acc_ = 0;                                                          \
            for (int64_t k_ = 0; k_ < n; k_++) acc_ += (double)p[k_ * s];             \
            out_v = acc_;                                                             \
        } else { /* max, min, argmax: a NaN wins, as in torch */                      \
            double best_ = (double)p[0];                                              \
            int64_t at_ = 0;                                                          \
            for (int64_t k_ = 1; k_ < n && best_ == best_; k_++) {                    \
                double v_ = (double)p[k_ * s];                                        \
                if (v_ != v_ || (op == KILN_OP_MIN ? v_ < best_ : v_ > best_))        \
                    best_ = v_, at_ = k_;                                             \
            }                                                                         \
            out_v = best_;                                                            \
            out_i = at_;                                                              \
        }                                                                             \
    } while (0)

/* outputs [o0, o1) of a reduction over one axis of any strides */
#define REDUCE_AXIS(T)                                                                          \
    do {                                                                                        \
        const kiln_tensor *t = arg, *x = t->src[0];                                             \
        const kiln_op op = t->op;                                                               \
        const int axis = (int)t->ip[0];                                                         \
        const int64_t n = x->shape[axis];                                                       \
        const T *xs = x->data;                                                                  \
        for (int64_t o = o0; o < o1; o++) {                                                     \
            int64_t off = 0, r = o;                                                             \
            for (int d = x->ndim - 1; d >= 0; d--) {                                            \
                if (d == axis) continue;                                                        \
                off += (r % x->shape[d]) * x->stride[d];                                        \
                r /= x->shape[d];                                                               \
            }                                                                                   \
            double v = 0;                                                                       \
            int64_t bi = 0;                                                                     \
            REDUCE_LINE(T, (xs + off), n, x->stride[axis], op, v, bi);                          \
            if (op == KILN_OP_ARGMAX) ((int32_t *)t->data)[o] = (int32_t)bi;                    \
            else if (t->dtype == KILN_F32) ((float *)t->data)[o] = (float)v;                    \
            else ((double *)t->data)[o] = v;                                                    \
        }                                                                                       \
    } while (0)

static void axis_f32(void *arg, int64_t o0, int64_t o1, int tid) {
    (void)tid;
    REDUCE_AXIS(float);
}

static void axis_f64(void *arg, int64_t o0, int64_t o1, int tid) {
    (void)tid;
    REDUCE_AXIS(double);
}

/* Over all elements: per row of the source, then across rows. */
#define REDUCE_ALL(T)                                                                           \
    do {                                                                                        \
        const T *xs = x->data;                                                                  \
        double acc = op == KILN_OP_SUM ? 0 : (double)xs[0];                                     \
        for (int64_t r = 0; r < it.rows; r++) {                                                 \
            int64_t off;                                                                        \
            kiln_bcast_row(&it, r, &off);                                                     \
            double v = 0;                                                                       \
            int64_t bi = 0;                                                                     \
            REDUCE_LINE(T, (xs + off), it.cols, it.st[0][it.nd - 1], op, v, bi);                \
            (void)bi;                                                                           \
            if (op == KILN_OP_SUM) acc += v;                                                    \
            else if (v != v || (acc == acc && (op == KILN_OP_MIN ? v < acc : v > acc))) acc = v; \
        }                                                                                       \
        if (t->dtype == KILN_F32) ((float *)t->data)[0] = (float)acc;                           \
        else ((double *)t->data)[0] = acc;                                                      \
    } while (0)

static kiln_status reduce_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[0];
    kiln_op op = t->op;
    int axis = (int)t->ip[0];
    int64_t numel = kiln__numel(x->ndim, x->shape);
    if (!numel) { /* a sum over nothing (max, min and argmax refuse an empty axis when made) */
        memset(t->data, 0, kiln_tensor_nbytes(t));
        return KILN_OK;
    }
    if (x->dtype == KILN_F32 && numel > 0 && (axis < 0 || x->shape[axis] > 0) && contiguous(x)) return reduce_f32(t, ex);
    if (axis < 0) {
        kiln_bcast it;
        kiln_bcast_init(&it, x, 1, &t->src[0]);
        if (x->dtype == KILN_F32) REDUCE_ALL(float);
        else REDUCE_ALL(double);
        return KILN_OK;
    }
    int64_t total = kiln__numel(x->ndim, x->shape), nout = total / x->shape[axis];
    kiln__pool_for(nout, 1, total > PAR_MIN ? ex->n_threads : 1, x->dtype == KILN_F32 ? axis_f32 : axis_f64, t);
    return KILN_OK;
}

void kiln__cpu_register_reduce(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SUM] = tab[KILN_OP_MAX] = tab[KILN_OP_MIN] = tab[KILN_OP_ARGMAX] = reduce_kernel;
}
