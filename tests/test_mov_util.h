/* test_mov_util.h — helpers shared by the movement, matmul and rows tests:
 * computing a tensor, reading and comparing its values, filling leaves
 * with known values, and checking that a constructor failed properly. */
#ifndef TEST_MOV_UTIL_H
#define TEST_MOV_UTIL_H

#include "gradcheck.h"

#include <string.h>

/* Add t to a fresh graph and compute it. */
static inline kiln_status mt_compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

/* Compute loss and its backward pass once (gradients land in the leaves). */
static inline kiln_status mt_compute_backward(kiln_ctx *ctx, kiln_tensor *loss) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g && loss ? kiln_graph_add(g, loss) : kiln_last_status();
    if (!s) s = kiln_graph_backward(g, loss);
    return s ? s : kiln_graph_compute(g);
}

/* A deterministic value for element i of a test input (irrational-ish, no repeats). */
static inline double mt_val(int64_t i, int seed) {
    /* two statements: a compiler may fuse a*b + c of one expression into an
     * fma when it folds constants, and the leaves and the references must
     * get the same bits */
    volatile double arg = 0.731 * (double)i;
    arg += 1.37 * seed;
    return sin(arg) * 2.0;
}

/* A leaf of dtype dt filled with mt_val(i, seed). */
static inline kiln_tensor *mt_leaf(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *shape, int seed) {
    kiln_tensor *t = kiln_tensor_new(ctx, dt, ndim, shape);
    if (!t) return NULL;
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    if (!v) return NULL;
    for (int64_t i = 0; i < n; i++) v[i] = mt_val(i, seed);
    kiln_status s = kiln_tensor_set_f64(t, v, n);
    free(v);
    return s ? NULL : t;
}

/* Fail unless t (computed) has the given shape and values within
 * atol + rtol * |want| (both 0: exactly equal). */
static inline void mt_check_close(const char *what, const kiln_tensor *t, int ndim, const int64_t *shape,
                                  const double *want, double atol, double rtol) {
    if (!t || kiln_tensor_ndim(t) != ndim || memcmp(kiln_tensor_shape(t), shape, (size_t)ndim * sizeof *shape)) {
        kt_fail(__FILE__, __LINE__, "%s: missing tensor or wrong shape", what);
        return;
    }
    int64_t n = kiln_tensor_numel(t), worst;
    double *v = malloc((size_t)n * sizeof *v);
    if (!v || kiln_tensor_get_f64(t, v, n)) {
        kt_fail(__FILE__, __LINE__, "%s: cannot read values: %s", what, kiln_last_error());
        free(v);
        return;
    }
    double e = kt_rel_err(v, want, n, atol > 0 || rtol > 0 ? atol : 1e-300, rtol, &worst);
    if (!(e <= 1))
        kt_fail(__FILE__, __LINE__, "%s: element %lld is %.10g, want %.10g", what, (long long)worst, v[worst],
                want[worst]);
    free(v);
}

/* The constructor call returned NULL with status s and a message naming op. */
#define MT_FAILS(expr, s, op)                                                                                  \
    do {                                                                                                       \
        kiln_clear_error();                                                                                    \
        kiln_tensor *mt_r_ = (expr);                                                                           \
        KT_CHECK(!mt_r_, "%s: expected an error", #expr);                                                     \
        KT_CHECK(kiln_last_status() == (s), "%s: status %s, want %s (%s)", #expr,                             \
                 kiln_status_name(kiln_last_status()), kiln_status_name(s), kiln_last_error());               \
        KT_CHECK(strstr(kiln_last_error(), (op)) != NULL, "%s: message '%s' does not name %s", #expr,         \
                 kiln_last_error(), (op));                                                                     \
    } while (0)

/* Row-major multi-index of flat index i in shape (ndim dims). */
static inline void mt_unravel(int64_t i, int ndim, const int64_t *shape, int64_t *idx) {
    for (int d = ndim - 1; d >= 0; d--) {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
}

#endif
