/* backend_ops_util.h — the harness behind the cross-backend op table
 * (test_backend_ops.c) and the residency tests (test_backend_residency.c).
 *
 * A case is a name, a builder and a dtype. The builder makes its inputs
 * with the bo_* helpers below (seeded, so both builds see the same values)
 * and returns the output, using only the public API. bo_run_cases() builds
 * each case twice, in a context on the CPU and in one on a device backend,
 * computes both (twice: gradients accumulate, as they do in training), and
 * compares the output and, unless the case is BO_NO_GRAD, the gradient of
 * loss = sum(out * W) (W fixed random weights) for every input made by
 * bo_in. The error is max|dev - cpu| / max(max|cpu|, tiny); a case fails
 * above its threshold, when its device graph ran any node on the CPU
 * (unless BO_MAY_FALL_BACK) or when the validation layer said anything.
 *
 *     static kiln_tensor *b_add_bcast(bo_io *io) {
 *         return kiln_add(io->ctx, bo_in(io, BO_SHAPE(4, 1, 7)), bo_in(io, BO_SHAPE(3, 1)));
 *     }
 *     static const bo_case cases[] = {{"add_bcast", b_add_bcast, KILN_F32, BO_EXACT, 0, NULL}};
 *     KT_TEST(backend_ops_binary) { bo_run_cases("binary", cases, BO_COUNT(cases)); }
 *
 * The device backends are "vulkan" and "cuda", those of them that exist;
 * $KILN_TEST_BACKENDS (e.g. "cpu") replaces that list, which lets the
 * harness check itself against the CPU. Validation is always on: the
 * harness sets KILN_VULKAN_VALIDATE=1 before the first kiln_backend_get.
 */
#ifndef BACKEND_OPS_UTIL_H
#define BACKEND_OPS_UTIL_H

#include "kt.h"

#define BO_MAX_IN 8
#define BO_MAX_BACKENDS 4

/* Thresholds on the normalized error. */
#define BO_EXACT 1e-5 /* f32 ops that round once (copies, +, *, compares) */
#define BO_TRANS 1e-4 /* f32 transcendentals, reductions, matmul, fused layers */
#define BO_HALF 5e-3  /* f16 results (one f16 rounding is ~5e-4 of the value) */
#define BO_BF16 3e-2  /* bf16 results */

enum {
    BO_NO_GRAD = 1 << 0,        /* forward only (integer outputs, no backward rule) */
    BO_MAY_FALL_BACK = 1 << 1,  /* a device may legitimately decline nodes (f64, bf16) */
    /* a device graph with no node on the CPU fuses as the CPU's does (core/fuse.c: as many chain
     * links and products adding into a gradient, at least one), and its
     * output equals the device's own unfused run ($KILN_FUSE=0) bit for
     * bit, its gradients too unless a product adds into one (cuBLAS's
     * beta = 1 may round once where a separate add rounds twice) */
    BO_FUSED = 1 << 2,
};

typedef struct bo_io {
    kiln_ctx *ctx;
    kiln_dtype dt;                 /* the case's dtype, for the bo_* helpers */
    bool grad;                     /* bo_in inputs require grad */
    uint64_t seed;                 /* next fill's seed */
    kiln_tensor *in[BO_MAX_IN];    /* bo_in inputs, whose gradients are compared */
    int n_in;
    const void *arg;               /* the case's arg */
} bo_io;

typedef kiln_tensor *(*bo_build)(bo_io *io);

typedef struct bo_case {
    const char *name;
    bo_build build;
    kiln_dtype dt;
    double tol;      /* forward and gradient threshold */
    unsigned flags;  /* BO_* */
    const void *arg; /* for a builder shared by several cases (io->arg) */
} bo_case;

#define BO_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
/* ndim, shape for the helpers: BO_SHAPE(2, 3, 4) */
#define BO_SHAPE(...) (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]) { __VA_ARGS__ }

/* An input of the case's dtype, uniform in [-1, 1] ([lo, hi]); it requires
 * grad (and its gradient is compared) unless the case is BO_NO_GRAD. */
kiln_tensor *bo_in(bo_io *io, int ndim, const int64_t *shape);
kiln_tensor *bo_in_range(bo_io *io, double lo, double hi, int ndim, const int64_t *shape);
/* The same in another float dtype. */
kiln_tensor *bo_in_dt(bo_io *io, kiln_dtype dt, double lo, double hi, int ndim, const int64_t *shape);
/* A constant (no gradient) of dtype dt, uniform in [lo, hi]. */
kiln_tensor *bo_const(bo_io *io, kiln_dtype dt, double lo, double hi, int ndim, const int64_t *shape);
/* A tensor of dtype dt (float or i32) holding integers uniform in [lo, hi]:
 * labels, indices, 0/1 masks, or float data with ties. With grad, a float
 * one requires grad like bo_in. */
kiln_tensor *bo_ints(bo_io *io, kiln_dtype dt, bool grad, int lo, int hi, int ndim, const int64_t *shape);

/* The device backends to test (at most BO_MAX_BACKENDS). Skips the test
 * when there are none and no Vulkan device exists at all; fails it (and
 * returns 0) when the Vulkan loader sees a device kiln cannot start, or
 * the validation layer is missing. */
int bo_backends(kiln_backend **out);
/* Run every case on every device backend against the CPU. */
void bo_run_cases(const char *family, const bo_case *cases, int n);
/* The same on backend b alone (a table whose tolerances depend on b). */
void bo_run_cases_on(const char *family, const bo_case *cases, int n, kiln_backend *b);

/* Compare a device tensor with its CPU twin: the normalized error above
 * (equal infinities and NaN against NaN match; a lone NaN or infinity is an
 * infinite error). */
double bo_error(const kiln_tensor *dev, const kiln_tensor *cpu);
/* The same on host arrays. */
double bo_error_values(const double *dev, const double *cpu, int64_t n);

#endif
