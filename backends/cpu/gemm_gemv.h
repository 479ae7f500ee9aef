/* gemm_gemv.h — the GEMV-shaped loops (gemm_kernels.h: axpy and dot forms)
 * written once in plain C with `omp simd`, included by each kernel file so
 * each instruction set gets its own vectorized copy. Define GEMV_SUFFIX
 * (e.g. avx2) before including. */
#include "gemm_kernels.h"

#define GEMV_CAT2(a, b) a##_##b
#define GEMV_CAT(a, b) GEMV_CAT2(a, b)
#define GEMV_AXPY GEMV_CAT(kiln__sgemv_axpy, GEMV_SUFFIX)
#define GEMV_DOT GEMV_CAT(kiln__sgemv_dot, GEMV_SUFFIX)

/* C11 mode compiles a*b + c as two roundings (no contraction), so the
 * fused multiply-add is asked for where the ISA has one (not in the
 * reductions: clang cannot vectorize an fmaf reduction). */
#if defined(__FMA__) || defined(__aarch64__)
#include <math.h>
#define GEMV_FMA(x, y, z) fmaf(x, y, z)
#else
#define GEMV_FMA(x, y, z) ((x) * (y) + (z))
#endif

/* Columns of y kept hot while four rows of M at a time stream past. */
#define GEMV_JB 256

static void GEMV_AXPY(int64_t n, int64_t k, float alpha, const float *x, const float *m, int64_t ldm, float beta,
                      float *y) {
    float acc[GEMV_JB];
    for (int64_t j0 = 0; j0 < n; j0 += GEMV_JB) {
        int64_t jn = n - j0 < GEMV_JB ? n - j0 : GEMV_JB;
        const float *mj = m + j0;
#pragma omp simd
        for (int64_t j = 0; j < jn; j++) acc[j] = 0;
        int64_t p = 0;
        for (; p + 4 <= k; p += 4) {
            const float *m0 = mj + p * ldm, *m1 = m0 + ldm, *m2 = m1 + ldm, *m3 = m2 + ldm;
            float x0 = x[p], x1 = x[p + 1], x2 = x[p + 2], x3 = x[p + 3];
#pragma omp simd
            for (int64_t j = 0; j < jn; j++) acc[j] = GEMV_FMA(x3, m3[j], GEMV_FMA(x2, m2[j], GEMV_FMA(x1, m1[j], GEMV_FMA(x0, m0[j], acc[j]))));
        }
        for (; p < k; p++) {
            const float *m0 = mj + p * ldm;
            float x0 = x[p];
#pragma omp simd
            for (int64_t j = 0; j < jn; j++) acc[j] = GEMV_FMA(x0, m0[j], acc[j]);
        }
        float *yj = y + j0;
        if (beta == 0) {
#pragma omp simd
            for (int64_t j = 0; j < jn; j++) yj[j] = alpha * acc[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < jn; j++) yj[j] = alpha * acc[j] + beta * yj[j];
        }
    }
}

static inline float GEMV_CAT(gemv_dot1, GEMV_SUFFIX)(int64_t k, const float *x, const float *r) {
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int64_t p = 0; p < k; p++) s += x[p] * r[p];
    return s;
}

static void GEMV_DOT(int64_t n, int64_t k, float alpha, const float *x, const float *m, int64_t ldm, float beta,
                     float *y, int64_t incy) {
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        const float *r0 = m + j * ldm, *r1 = r0 + ldm, *r2 = r1 + ldm, *r3 = r2 + ldm;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
        for (int64_t p = 0; p < k; p++) {
            float xp = x[p];
            s0 += xp * r0[p];
            s1 += xp * r1[p];
            s2 += xp * r2[p];
            s3 += xp * r3[p];
        }
        float s[4] = {s0, s1, s2, s3};
        for (int q = 0; q < 4; q++) {
            float *yq = y + (j + q) * incy;
            *yq = beta == 0 ? alpha * s[q] : alpha * s[q] + beta * *yq;
        }
    }
    for (; j < n; j++) {
        float s = GEMV_CAT(gemv_dot1, GEMV_SUFFIX)(k, x, m + j * ldm);
        float *yq = y + j * incy;
        *yq = beta == 0 ? alpha * s : alpha * s + beta * *yq;
    }
}

