/* gemm.c — f32/f64 GEMM entry points. (Scaffolding: OpenBLAS when built
 * with it, else a plain loop; the packed kernels replace the loop.) */
#include "gemm.h"

#ifdef KILN_BLAS
#include <cblas.h>
#endif

#define NAIVE_GEMM(T)                                                                                  \
    for (int64_t i = 0; i < m; i++)                                                                    \
        for (int64_t j = 0; j < n; j++) {                                                              \
            T s = 0;                                                                                   \
            for (int64_t p = 0; p < k; p++) s += (ta ? a[p * lda + i] : a[i * lda + p]) * (tb ? b[j * ldb + p] : b[p * ldb + j]); \
            c[i * ldc + j] = alpha * s + (beta != 0 ? beta * c[i * ldc + j] : 0);                     \
        }

void kiln__sgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads) {
    (void)n_threads;
    NAIVE_GEMM(float)
}

void kiln__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    if (openblas_get_num_threads() != n_threads) openblas_set_num_threads(n_threads);
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
#else
    kiln__sgemm_own(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, n_threads);
#endif
}

void kiln__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads) {
#ifdef KILN_BLAS
    if (openblas_get_num_threads() != n_threads) openblas_set_num_threads(n_threads);
    cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, (int)m, (int)n, (int)k,
                alpha, a, (int)lda, b, (int)ldb, beta, c, (int)ldc);
#else
    (void)n_threads;
    NAIVE_GEMM(double)
#endif
}
