/* gemm_kernel_neon.c — kiln's f32 GEMM micro-kernel for ARM64 NEON: an 8 x 12
 * tile of C in 24 q-register accumulators, each step two vectors of A
 * multiplied lane by lane into three vectors of B. */
#if defined(__aarch64__)
#include <arm_neon.h>

#define GEMV_SUFFIX neon
#include "gemm_gemv.h"

#define MR 8
#define NR 12

#define ROW(i) float32x4_t c##i##0 = vdupq_n_f32(0), c##i##1 = vdupq_n_f32(0), c##i##2 = vdupq_n_f32(0);
#define FMA(i, av, l)                                                                                              \
    c##i##0 = vfmaq_laneq_f32(c##i##0, b0, av, l);                                                                 \
    c##i##1 = vfmaq_laneq_f32(c##i##1, b1, av, l);                                                                 \
    c##i##2 = vfmaq_laneq_f32(c##i##2, b2, av, l);
#define STORE1(i, q)                                                                                               \
    {                                                                                                              \
        float *cq = c + (i) * ldc + 4 * (q);                                                                       \
        float32x4_t r = vmulq_n_f32(c##i##q, alpha);                                                               \
        vst1q_f32(cq, beta == 0 ? r : vfmaq_n_f32(r, vld1q_f32(cq), beta));                                        \
    }
#define STORE(i) STORE1(i, 0) STORE1(i, 1) STORE1(i, 2)
#define ALL(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7)

static void ukr(int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c, int64_t ldc, float alpha,
                float beta) {
    ALL(ROW)
    for (int64_t p = 0; p < kc; p++) {
        float32x4_t a0 = vld1q_f32(a), a1 = vld1q_f32(a + 4);
        float32x4_t b0 = vld1q_f32(b), b1 = vld1q_f32(b + 4), b2 = vld1q_f32(b + 8);
        FMA(0, a0, 0) FMA(1, a0, 1) FMA(2, a0, 2) FMA(3, a0, 3)
        FMA(4, a1, 0) FMA(5, a1, 1) FMA(6, a1, 2) FMA(7, a1, 3)
        a += as;
        b += bs;
    }
    ALL(STORE)
}

const kiln__sgemm_kernel kiln__sgemm_kernel_neon = {
    "neon", MR, NR, ukr, kiln__sgemv_axpy_neon, kiln__sgemv_dot_neon, kiln__sgemm_pack_t_scalar, NULL,
};
#endif
