/* qmatmul_q8k_neon.c — x to Q8_K (the K products' activations, batch 1
 * and prompts) on ARMv8-A's Advanced SIMD, kiln__quantize_q8_K_ref's bytes:
 * the same f32 operations (iscale x, then ggml's nearest_int by its magic
 * number, the bits taken as they are, so NaN's and inf's codes are the
 * reference's too), the clamp at 127 and the int8 truncation, bsums per 16.
 * Under qemu it takes about 6 guest instructions an element, the scalar
 * reference 25: once per row of x, so a few percent of a product at most
 * (of 2048 columns, about 1%). */
#include "qmatmul_kq.h"

#if defined(__aarch64__)
#include "../../quant/quant.h"

#include <arm_neon.h>
#include <math.h>
#include <string.h>

static void quantize_q8_K(const float *x, void *blocks, int64_t n) {
    kiln_block_q8_K *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        /* amax as the reference's "|x| > amax" (maxnm: a NaN never wins) */
        float32x4_t m = vdupq_n_f32(0.0f);
        for (int j = 0; j < KILN_QK_K; j += 4) m = vmaxnmq_f32(m, vabsq_f32(vld1q_f32(x + j)));
        const float amax = vmaxnmvq_f32(m);
        memset(&y[b], 0, sizeof y[b]);
        if (!amax) continue;
        int j = 0; /* max: the first x of magnitude amax */
        while (!vmaxvq_u32(vceqq_f32(vabsq_f32(vld1q_f32(x + j)), vdupq_n_f32(amax)))) j += 4;
        while (fabsf(x[j]) != amax) j++;
        const float iscale = -127.0f / x[j];
        const float32x4_t is = vdupq_n_f32(iscale), magic = vdupq_n_f32(12582912.0f);
        for (int g = 0; g < KILN_QK_K / 16; g++) {
            int16x4_t h[4];
            for (int i = 0; i < 4; i++) {
                const float32x4_t f = vaddq_f32(vmulq_f32(is, vld1q_f32(x + 16 * g + 4 * i)), magic);
                const int32x4_t v = vsubq_s32(vandq_s32(vreinterpretq_s32_f32(f), vdupq_n_s32(0x007fffff)),
                                              vdupq_n_s32(0x00400000));
                h[i] = vmovn_s32(vminq_s32(v, vdupq_n_s32(127)));
            }
            const int8x16_t q = vcombine_s8(vmovn_s16(vcombine_s16(h[0], h[1])), vmovn_s16(vcombine_s16(h[2], h[3])));
            vst1q_s8(y[b].qs + 16 * g, q);
            y[b].bsums[g] = vaddlvq_s8(q);
        }
        y[b].d = 1 / iscale;
    }
}

kiln_from_f32_fn *kiln__quantize_q8_K_neon(void) { return quantize_q8_K; }
#else
kiln_from_f32_fn *kiln__quantize_q8_K_neon(void) { return NULL; }
#endif
