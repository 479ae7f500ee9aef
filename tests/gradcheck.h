/* gradcheck.h — finite-difference gradient checks in double precision.
 *
 * gc_check() makes f64 leaves for the inputs, builds the op under test with
 * the caller's function, and compares the gradient that kiln's backward
 * gives for loss = sum(out * R) (R fixed random weights, so every output
 * element counts) with central differences of the same loss.
 *
 *     static kiln_tensor *build(kiln_ctx *ctx, kiln_tensor *const *in, void *arg) {
 *         return kiln_mul(ctx, kiln_transpose(ctx, in[0], 0, 1), in[1]); // non-contiguous input
 *     }
 *     KT_TEST(grad_mul) {
 *         gc_input in[2] = {GC_IN(2, 3, 4), GC_IN(2, 4, 1)};
 *         gc_check("mul", build, NULL, 2, in, 1);
 *     }
 */
#ifndef GRADCHECK_H
#define GRADCHECK_H

#include "kt.h"

typedef kiln_tensor *(*gc_build)(kiln_ctx *ctx, kiln_tensor *const *in, void *arg);

typedef struct gc_input {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    double lo, hi;        /* uniform range; both 0 means [-1, 1] */
    bool no_grad;         /* a constant input */
    bool is_index;        /* an i32 input (no gradient) filled from ivalues or [0, hi) */
    const int32_t *ivalues;
    const double *values; /* fixed f64 values instead of random ones */
} gc_input;

#define GC_IN(nd, ...) ((gc_input){.ndim = (nd), .shape = {__VA_ARGS__}})

/* Fails the current test (kt_fail) with the op name, input and element on
 * a mismatch; returns true when all gradients match. */
bool gc_check(const char *what, gc_build build, void *arg, int n, const gc_input *in, uint64_t seed);

#endif
