/* reduce.c — CPU kernels for sum, max, min and argmax over one axis (any
 * source strides) or over all elements. Sums accumulate in double. */
#include "bcast.h"

#include <math.h>

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

#define REDUCE_AXIS(T)                                                                          \
    do {                                                                                        \
        const T *xs = x->data;                                                                  \
        _Pragma("omp parallel for num_threads(ex->n_threads) if (total > 32768)")              \
        for (int64_t o = 0; o < nout; o++) {                                                    \
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
    if (axis < 0) {
        kiln_bcast it;
        kiln_bcast_init(&it, x, 1, &t->src[0]);
        if (x->dtype == KILN_F32) REDUCE_ALL(float);
        else REDUCE_ALL(double);
        return KILN_OK;
    }
    int64_t n = x->shape[axis], total = kiln__numel(x->ndim, x->shape), nout = total / n;
    if (x->dtype == KILN_F32) REDUCE_AXIS(float);
    else REDUCE_AXIS(double);
    return KILN_OK;
}

void kiln__cpu_register_reduce(kiln_cpu_kernel *tab) {
    tab[KILN_OP_SUM] = tab[KILN_OP_MAX] = tab[KILN_OP_MIN] = tab[KILN_OP_ARGMAX] = reduce_kernel;
}
