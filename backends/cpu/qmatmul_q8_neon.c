/* qmatmul_q8_neon.c — x to Q8_0 and Q8_1 (the blocks of 32's activations:
 * of Q8_0, Q4_0, Q5_0 and IQ4_NL, and of Q4_1 and Q5_1) on ARMv8-A's
 * Advanced SIMD, the references' bytes (kiln__quantize_q8_0_ref,
 * kiln__quantize_q8_1_ref, and kiln__qmm_quantize_x's codes and scales):
 * per block the same f32 operations (amax, d = amax / 127, id = 1 / d,
 * x id), roundf as one fcvtas (nearest, ties away from zero) narrowed
 * to the low byte, a code outside -127..127 (x id infinite) 0, Q8_1's s
 * the f16 of d times the codes' sum. A block holding a NaN goes through the reference
 * itself: how a NaN enters the reference's maximum depends on how the
 * compiler vectorized it. */
#include "coders.h"
#include "qmatmul.h"

#if defined(__aarch64__)
#include <arm_neon.h>

/* roundf's codes of v, 0 where they fall outside -127..127 (v infinite:
 * id infinite for a tiny block), the references' rule */
static inline int32x4_t code(float32x4_t v) {
    return vandq_s32(vcvtaq_s32_f32(v), vreinterpretq_s32_u32(vcaltq_f32(v, vdupq_n_f32(127.5f))));
}

/* One block of 32: its codes at q and their sum (*sum), d the unrounded
 * scale; false (nothing written) where x holds a NaN. */
static inline __attribute__((always_inline)) bool block32(const float *x, int8_t *q, float *d, int *sum) {
    float32x4_t v[8], m = vdupq_n_f32(0.0f);
    for (int j = 0; j < 8; j++) v[j] = vld1q_f32(x + 4 * j), m = vmaxq_f32(m, vabsq_f32(v[j])); /* NaN wins */
    const float amax = vmaxvq_f32(m);
    if (amax != amax) return false;
    *d = amax / 127.0f;
    const float id = *d ? 1.0f / *d : 0.0f;
    int16x8_t h[4];
    for (int j = 0; j < 4; j++)
        h[j] = vcombine_s16(vmovn_s32(code(vmulq_n_f32(v[2 * j], id))), vmovn_s32(code(vmulq_n_f32(v[2 * j + 1], id))));
    const int8x16_t q0 = vcombine_s8(vmovn_s16(h[0]), vmovn_s16(h[1])),
                    q1 = vcombine_s8(vmovn_s16(h[2]), vmovn_s16(h[3]));
    vst1q_s8(q, q0), vst1q_s8(q + 16, q1);
    *sum = vaddlvq_s8(q0) + vaddlvq_s8(q1);
    return true;
}

static void quantize_q8_0(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_0 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, x += KILN_QK8_0) {
        float d;
        int sum;
        if (block32(x, y[b].qs, &d, &sum)) y[b].d = kiln__f32_to_f16(d);
        else kiln__quantize_q8_0_ref(x, &y[b], KILN_QK8_0);
    }
}

static void quantize_q8_1(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_1 *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        float d;
        int sum;
        if (block32(x, y[b].qs, &d, &sum)) y[b].d = kiln__f32_to_f16(d), y[b].s = kiln__f32_to_f16((float)sum * d);
        else kiln__quantize_q8_1_ref(x, &y[b], KILN_QK);
    }
}

void kiln__qmm_quantize_x_neon(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off) {
    for (int64_t b = 0; b < n / 32; b++) {
        float d;
        int sum;
        if (block32(x + 32 * b, xq + 32 * b, &d, &sum)) dx[b] = kiln__f16_to_f32(kiln__f32_to_f16(d));
        else kiln__qmm_quantize_x(x + 32 * b, xq + 32 * b, dx + b, 32);
    }
    if (xs) kiln__qmm_lane_sums(xq, xs, n / 32, off);
}

kiln_from_f32_fn *kiln__quantize_q8_0_neon(void) { return quantize_q8_0; }
kiln_from_f32_fn *kiln__quantize_q8_1_neon(void) { return quantize_q8_1; }
#else
kiln_from_f32_fn *kiln__quantize_q8_0_neon(void) { return NULL; }
kiln_from_f32_fn *kiln__quantize_q8_1_neon(void) { return NULL; }
#endif
