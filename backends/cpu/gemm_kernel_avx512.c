/* gemm_kernel_avx512.c — kiln's f32 GEMM micro-kernel for AVX-512: a 14 x 32
 * tile of C in 28 zmm accumulators, each step one broadcast of A per row
 * against two 16-wide vectors of B (FMA-bound: 28 FMAs per 16 loads). */
#if defined(__x86_64__)
#include <immintrin.h>

#define GEMV_SUFFIX avx512
#include "gemm_gemv.h"

#ifndef MR
#define MR 14
#endif
#define NR 32

#define ROW(i) __m512 c##i##0 = _mm512_setzero_ps(), c##i##1 = _mm512_setzero_ps();
#define FMA(i)                                                                                                     \
    {                                                                                                              \
        __m512 ai = _mm512_set1_ps(ak[i]);                                                                         \
        c##i##0 = _mm512_fmadd_ps(ai, b0, c##i##0);                                                                \
        c##i##1 = _mm512_fmadd_ps(ai, b1, c##i##1);                                                                \
    }
#define STORE(i)                                                                                                   \
    {                                                                                                              \
        float *ci = c + (i) * ldc;                                                                                 \
        if (beta == 0) {                                                                                           \
            _mm512_storeu_ps(ci, _mm512_mul_ps(va, c##i##0));                                                      \
            _mm512_storeu_ps(ci + 16, _mm512_mul_ps(va, c##i##1));                                                 \
        } else {                                                                                                   \
            _mm512_storeu_ps(ci, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci), _mm512_mul_ps(va, c##i##0)));            \
            _mm512_storeu_ps(ci + 16, _mm512_fmadd_ps(vb, _mm512_loadu_ps(ci + 16), _mm512_mul_ps(va, c##i##1)));  \
        }                                                                                                          \
    }
#if MR == 14
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13)
#else
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#endif
#define PREFETCH_C(i) _mm_prefetch((const char *)(c + (i) * ldc), _MM_HINT_T0), _mm_prefetch((const char *)(c + (i) * ldc + 31), _MM_HINT_T0);
#define STEP(off)                                                                                                  \
    {                                                                                                              \
        __m512 b0 = _mm512_loadu_ps(b + (off) * NR), b1 = _mm512_loadu_ps(b + (off) * NR + 16);                    \
        const float *ak = a + (off) * MR;                                                                          \
        ALL(FMA)                                                                                                   \
    }

static void ukr(int64_t kc, const float *a, const float *b, float *c, int64_t ldc, float alpha, float beta) {
    ALL(ROW)
    if (beta != 0) {
        ALL(PREFETCH_C)
    }
    int64_t p = 0;
    for (; p + 2 <= kc; p += 2) {
        _mm_prefetch((const char *)(b + 8 * NR), _MM_HINT_T0);
        _mm_prefetch((const char *)(b + 8 * NR + 16), _MM_HINT_T0);
        STEP(0)
        STEP(1)
        a += 2 * MR;
        b += 2 * NR;
    }
    if (p < kc) {
        STEP(0)
    }
    __m512 va = _mm512_set1_ps(alpha), vb = _mm512_set1_ps(beta);
    ALL(STORE)
}

const kiln__sgemm_kernel kiln__sgemm_kernel_avx512 = {
    "avx512", MR, NR, 256, 112, 1024, ukr, kiln__sgemv_axpy_avx512, kiln__sgemv_dot_avx512,
};
#endif
