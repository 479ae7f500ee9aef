/* gemm_kernel_scalar.c — kiln's portable f32 GEMM micro-kernel (4 x 8 tile of
 * plain C the compiler may vectorize for the baseline ISA), the one every
 * SIMD variant is tested against, and the kernel choice by CPU caps. */
#include "cpu_features.h"

#define GEMV_SUFFIX scalar
#include "gemm_gemv.h"

#define MR 4
#define NR 8

static void ukr(int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c, int64_t ldc, float alpha,
                float beta) {
    float acc[MR][NR] = {{0}};
    for (int64_t p = 0; p < kc; p++) {
        for (int i = 0; i < MR; i++) {
            float ai = a[i];
#pragma omp simd
            for (int j = 0; j < NR; j++) acc[i][j] += ai * b[j];
        }
        a += as;
        b += bs;
    }
    for (int i = 0; i < MR; i++) {
        float *ci = c + i * ldc;
        for (int j = 0; j < NR; j++) ci[j] = beta == 0 ? alpha * acc[i][j] : alpha * acc[i][j] + beta * ci[j];
    }
}

void kiln__sgemm_pack_t_scalar(const float *src, int64_t ld, int rows, int64_t kc, int w, float *dst) {
    for (int i = 0; i < w; i++) {
        if (i < rows) {
            const float *s = src + i * ld;
            for (int64_t p = 0; p < kc; p++) dst[p * w + i] = s[p];
        } else
            for (int64_t p = 0; p < kc; p++) dst[p * w + i] = 0;
    }
}

const kiln__sgemm_kernel kiln__sgemm_kernel_scalar = {
    "scalar", MR, NR, ukr, kiln__sgemv_axpy_scalar, kiln__sgemv_dot_scalar, kiln__sgemm_pack_t_scalar, NULL,
};

const kiln__sgemm_kernel *kiln__sgemm_kernel_pick(void) {
    const kiln_cpu_caps *c = kiln__cpu_caps();
#if defined(__x86_64__)
    if (kiln__cpu_avx512(c)) return &kiln__sgemm_kernel_avx512;
    if (kiln__cpu_avx2(c)) return &kiln__sgemm_kernel_avx2;
#elif defined(__aarch64__)
    if (kiln__cpu_neon(c)) return &kiln__sgemm_kernel_neon;
#endif
    (void)c;
    return &kiln__sgemm_kernel_scalar;
}
