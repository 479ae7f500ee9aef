/* dequant_neon.c — dequantize kernels on ARM64 Advanced SIMD (coders.h): 4
 * lanes; the NF4 table's 64 bytes are looked up with one tbl of four
 * registers per 4 values. Each value is the scalar reference's single f32
 * product. */
#include "coders.h"

#if defined(__aarch64__)
#include <arm_neon.h>

static void q8_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q8_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK8_0; b++, y += KILN_QK8_0) {
        const float32x4_t d = vdupq_n_f32(kiln__f16_to_f32(x[b].d));
        for (int j = 0; j < KILN_QK8_0; j += 8) {
            int16x8_t q = vmovl_s8(vld1_s8(x[b].qs + j));
            vst1q_f32(y + j, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(q))), d));
            vst1q_f32(y + j + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(q))), d));
        }
    }
}

/* 16 nibbles (u8 lanes 0..15) minus 8, times d, to y[0..16). */
static void q4_store16(float *y, uint8x16_t q, float32x4_t d) {
    int16x8_t lo = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(q))), vdupq_n_s16(8));
    int16x8_t hi = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(q))), vdupq_n_s16(8));
    vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), d));
    vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), d));
    vst1q_f32(y + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), d));
    vst1q_f32(y + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), d));
}

static void q4_0(const void *blocks, float *y, int64_t n) {
    const kiln_block_q4_0 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QK4_0; b++, y += KILN_QK4_0) {
        const float32x4_t d = vdupq_n_f32(kiln__f16_to_f32(x[b].d));
        uint8x16_t v = vld1q_u8(x[b].qs);
        q4_store16(y, vandq_u8(v, vdupq_n_u8(0x0f)), d);
        q4_store16(y + 16, vshrq_n_u8(v, 4), d);
    }
}

/* 16 codes (in element order) through the table, times a. */
static void nf4_store16(float *y, uint8x16_t codes, const uint8x16x4_t *tab, float32x4_t a) {
    static const uint8_t rep[4][16] = {{0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3},
                                       {4, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 7, 7, 7, 7},
                                       {8, 8, 8, 8, 9, 9, 9, 9, 10, 10, 10, 10, 11, 11, 11, 11},
                                       {12, 12, 12, 12, 13, 13, 13, 13, 14, 14, 14, 14, 15, 15, 15, 15}};
    static const uint8_t byte[16] = {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3};
    const uint8x16_t c4 = vshlq_n_u8(codes, 2), bytes = vld1q_u8(byte);
    for (int k = 0; k < 4; k++) {
        uint8x16_t idx = vaddq_u8(vqtbl1q_u8(c4, vld1q_u8(rep[k])), bytes);
        float32x4_t v = vreinterpretq_f32_u8(vqtbl4q_u8(*tab, idx));
        vst1q_f32(y + 4 * k, vmulq_f32(v, a));
    }
}

static void nf4_codes(const uint8_t *codes, const float *absmax, int64_t nb, float *y) {
    const uint8_t *t = (const uint8_t *)kiln__nf4_table;
    const uint8x16x4_t tab = {{vld1q_u8(t), vld1q_u8(t + 16), vld1q_u8(t + 32), vld1q_u8(t + 48)}};
    for (int64_t b = 0; b < nb; b++, codes += KILN_QKNF4 / 2, y += KILN_QKNF4) {
        const float32x4_t a = vdupq_n_f32(absmax[b]);
        for (int h = 0; h < 2; h++) {
            uint8x16_t v = vld1q_u8(codes + 16 * h);
            /* element 2j is byte j's high nibble */
            uint8x16x2_t e = vzipq_u8(vshrq_n_u8(v, 4), vandq_u8(v, vdupq_n_u8(0x0f)));
            nf4_store16(y + 32 * h, e.val[0], &tab, a);
            nf4_store16(y + 32 * h + 16, e.val[1], &tab, a);
        }
    }
}

static const kiln__dequant_kernels k = {q8_0, q4_0, nf4_codes};
const kiln__dequant_kernels *kiln__dequant_kernels_neon(void) { return &k; }
#else
const kiln__dequant_kernels *kiln__dequant_kernels_neon(void) { return 0; }
#endif
