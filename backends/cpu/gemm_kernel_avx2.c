/* gemm_kernel_avx2.c — kiln's f32 GEMM micro-kernel for AVX2 + FMA: a 6 x 16
 * tile of C in 12 ymm accumulators (one broadcast of A per row against two
 * 8-wide vectors of B each step). */
#if defined(__x86_64__)
#include <immintrin.h>

#define GEMV_SUFFIX avx2
#include "gemm_gemv.h"

#define MR 6
#define NR 16

#define ROW(i) __m256 c##i##0 = _mm256_setzero_ps(), c##i##1 = _mm256_setzero_ps();
#define FMA(i)                                                                                                     \
    {                                                                                                              \
        __m256 ai = _mm256_broadcast_ss(a + (i));                                                                  \
        c##i##0 = _mm256_fmadd_ps(ai, b0, c##i##0);                                                                \
        c##i##1 = _mm256_fmadd_ps(ai, b1, c##i##1);                                                                \
    }
#define STORE(i)                                                                                                   \
    {                                                                                                              \
        float *ci = c + (i) * ldc;                                                                                 \
        if (beta == 0) {                                                                                           \
            _mm256_storeu_ps(ci, _mm256_mul_ps(va, c##i##0));                                                      \
            _mm256_storeu_ps(ci + 8, _mm256_mul_ps(va, c##i##1));                                                  \
        } else {                                                                                                   \
            _mm256_storeu_ps(ci, _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci), _mm256_mul_ps(va, c##i##0)));            \
            _mm256_storeu_ps(ci + 8, _mm256_fmadd_ps(vb, _mm256_loadu_ps(ci + 8), _mm256_mul_ps(va, c##i##1)));    \
        }                                                                                                          \
    }
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5)

static void ukr(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta) {
    ALL(ROW)
    for (int64_t p = 0; p < kc; p++) {
        __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
        ALL(FMA)
        a += MR;
        b += NR;
    }
    __m256 va = _mm256_set1_ps(alpha), vb = _mm256_set1_ps(beta);
    ALL(STORE)
}

const kiln__sgemm_kernel kiln__sgemm_kernel_avx2 = {
    "avx2", MR, NR, 256, 72, 1024, ukr, kiln__sgemv_axpy_avx2, kiln__sgemv_dot_avx2,
};
#endif
