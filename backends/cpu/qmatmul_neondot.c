/* qmatmul_neondot.c — ARMv8.2 dot-product (sdot) kernels of KILN_OP_QMATMUL's
 * batch-1 path (qmatmul.h): a block of 32 is two vdotq_s32 (signed x
 * signed, no offset) giving the reference's lanes of that block (Q8_0:
 * 4 + 4 lanes, elements 4l..4l+3; Q4_0: both into the same 4 lanes, the
 * low and high nibbles of 4 packed bytes each); each goes to f32 and one
 * fused multiply-add with the block's scale into that block's lanes, so
 * the result equals the scalar reference bit for bit.
 * NF4 keeps the scalar reference here. */
#include "qmatmul.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include "../../quant/quant.h"

#include <arm_neon.h>

/* bytes of W read ahead (generation streams W from memory once) */
#define QMM_PREFETCH 2048

typedef struct lanes4 {
    float32x4_t a[4]; /* the 16 lanes in order: Q8_0 even block lanes 0-3, 4-7, odd block lanes 0-3, 4-7;
                       * Q4_0 blocks i & 3 = 0, 1, 2, 3 */
} lanes4;

static inline void block(int8x16_t w0, int8x16_t w1, const int8_t *xq, float d, float32x4_t *lo, float32x4_t *hi) {
    const int32x4_t s0 = vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(xq));
    const int32x4_t s1 = vdotq_s32(vdupq_n_s32(0), w1, vld1q_s8(xq + 16));
    const float32x4_t dv = vdupq_n_f32(d);
    *lo = vfmaq_f32(*lo, vcvtq_f32_s32(s0), dv);
    *hi = vfmaq_f32(*hi, vcvtq_f32_s32(s1), dv);
}

/* Q8_0's lanes summed as kiln__qmm_q8_lanes_sum */
static inline float sum16(const lanes4 *l) {
    float a[16];
    for (int i = 0; i < 4; i++) vst1q_f32(a + 4 * i, l->a[i]);
    return kiln__qmm_q8_lanes_sum(a);
}

static float dot_q8_0_neondot(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q8_0 *b = w;
    lanes4 l = {{vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)}};
    for (int64_t i = 0; i < nb; i++) {
        __builtin_prefetch((const char *)(b + i) + QMM_PREFETCH);
        const int o = 2 * (int)(i & 1);
        block(vld1q_s8(b[i].qs), vld1q_s8(b[i].qs + 16), xq + 32 * i, kiln__f16_to_f32(b[i].d) * dx[i], &l.a[o],
              &l.a[o + 1]);
    }
    return sum16(&l);
}

/* Q4_0: the low nibbles against elements 0-15 and the high ones against
 * 16-31 accumulate into the same 4 int32 lanes (the reference's lanes of
 * the block), then one fma into the lanes of block i & 3. */
static float dot_q4_0_neondot(const void *w, const int8_t *xq, const float *dx, int64_t nb) {
    const kiln_block_q4_0 *b = w;
    const uint8x16_t lo4 = vdupq_n_u8(0x0f);
    const int8x16_t eight = vdupq_n_s8(8);
    lanes4 l = {{vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)}};
    for (int64_t i = 0; i < nb; i++) {
        __builtin_prefetch((const char *)(b + i) + QMM_PREFETCH);
        const uint8x16_t p = vld1q_u8(b[i].qs);
        const int8x16_t w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(p, lo4)), eight);
        const int8x16_t w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(p, 4)), eight);
        const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(xq + 32 * i)), w1, vld1q_s8(xq + 32 * i + 16));
        l.a[i & 3] = vfmaq_f32(l.a[i & 3], vcvtq_f32_s32(s), vdupq_n_f32(kiln__f16_to_f32(b[i].d) * dx[i]));
    }
    float a[16];
    for (int j = 0; j < 4; j++) vst1q_f32(a + 4 * j, l.a[j]);
    return kiln__qmm_q4_lanes_sum(a);
}

const kiln_qmm_kernels *kiln__qmm_kernels_neondot(void) {
    static const kiln_qmm_kernels k = {dot_q8_0_neondot, dot_q4_0_neondot, kiln__qmm_dot_nf4_ref, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_neondot(void) { return NULL; }
#endif
