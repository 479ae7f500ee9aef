/* host_gemm.h — an f32 GEMM on host arrays for the layers above the
 * backends that compute on plain arrays, not graphs (GPTQ's Hessian and
 * column updates, quant/gptq.c), without naming a backend: the CPU backend
 * lends its GEMM when the library loads, as the formats register their
 * dtypes. Not installed.
 *
 * Row-major, BLAS-style:
 *     C[m, n] = alpha * op(A) op(B) + beta * C
 * op(X) the transpose when ta/tb is set, beta == 0 writes C without
 * reading it, n_threads the threads the call may use.
 *
 *     kiln_sgemm_fn *gemm = kiln__host_sgemm(who);
 *     if (!gemm) return kiln_last_status();
 *     gemm(false, true, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n, kiln__threads()); // y = x w^T
 */
#ifndef KILN_HOST_GEMM_H
#define KILN_HOST_GEMM_H

#include "internal.h"

typedef void kiln_sgemm_fn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
                           int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc,
                           int n_threads);

/* The CPU backend's GEMM from now on (NULL: none). */
void kiln__host_sgemm_lend(kiln_sgemm_fn *gemm);
/* The GEMM lent, or NULL with KILN_ERR_UNSUPPORTED naming who when none
 * was (a static link that left the CPU backend out). */
kiln_sgemm_fn *kiln__host_sgemm(const char *who);

#endif
