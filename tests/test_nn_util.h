/* test_nn_util.h — helpers shared by the nn family's tests (test_nn*.c):
 * running a PyTorch fixture case through a kiln op, comparing values, and
 * checking that a constructor failed with the right status and message. */
#ifndef TEST_NN_UTIL_H
#define TEST_NN_UTIL_H

#include "fixture.h"
#include "gradcheck.h"

#include <string.h>

/* Builds the op of a fixture case from its inputs, in the order of the
 * names given to nnt_fixture (index inputs are i32 leaves). */
typedef kiln_tensor *(*nnt_build)(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in);

/* Run case `name` of `path` with float inputs of dtype dt: compare y with
 * the fixture (atol = rtol = tol) and, when grad_tol > 0, the gradient of
 * sum(y * gy) for every float input with the fixture's g<input> (tolerance
 * grad_tol). inputs: NULL-terminated names; "pos" and "labels" are i32;
 * a float input without g<input> in the fixture is a constant.
 * Fails the test (kt_fail) with the case, tensor and element on a mismatch. */
void nnt_fixture(const char *path, const char *name, const char *const *inputs, nnt_build build, kiln_dtype dt,
                 double tol, double grad_tol);

/* Largest mismatch of n values against want (equal infinities and NaN against NaN match);
 * fails the test naming what when it exceeds atol + rtol * |want|. */
bool nnt_close(const char *what, const double *got, const double *want, int64_t n, double atol, double rtol);

/* t's values as doubles (t must have been computed); NULL on failure. The
 * caller frees. */
double *nnt_values(const kiln_tensor *t);
/* Whether two files hold the same bytes (false when either is missing). */
bool nnt_same_file(const char *a, const char *b);
/* A malloc'd copy of every byte of the n tensors, *size of them (NULL when
 * out of memory): what a test compares before and after training. */
char *nnt_snapshot(kiln_tensor *const *t, int n, size_t *size);

/* Deterministic token ids (or labels) in [0, n) into the i32 tensor t, varied by salt. */
void nnt_fill_ints(kiln_tensor *t, int n, uint32_t salt);

/* Compute y in a graph of its own and return its values as nnt_values
 * does; NULL (the failure recorded) when y is NULL or the compute fails. */
double *nnt_eval(kiln_ctx *ctx, kiln_tensor *y);

/* y, gx and gw of sum(conv2d(x, w) * r), as nnt_values (out[i] malloc'd,
 * num[i] elements), for x of shape xs and w of shape ws in dtype dt,
 * x, w and r uniform in [-1, 1] (seeds 1, 2, 3), at `threads` threads. */
void nnt_conv_grads(kiln_dtype dt, const int64_t *xs, const int64_t *ws, const kiln_conv2d_params *p, int threads,
                    double *out[3], int64_t num[3]);

/* A constructor's result was NULL with status s and a message naming op. */
#define NNT_FAILS(expr, s, op)                                                                                 \
    do {                                                                                                       \
        kiln_clear_error();                                                                                    \
        kiln_tensor *nnt_r_ = (expr);                                                                          \
        KT_CHECK(!nnt_r_, "%s: expected an error", #expr);                                                    \
        KT_CHECK(kiln_last_status() == (s), "%s: status %s, want %s (%s)", #expr,                             \
                 kiln_status_name(kiln_last_status()), kiln_status_name(s), kiln_last_error());               \
        KT_CHECK(strstr(kiln_last_error(), (op)) != NULL, "%s: message '%s' does not name %s", #expr,         \
                 kiln_last_error(), (op));                                                                     \
    } while (0)

#endif
