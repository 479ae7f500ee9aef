/* dequant_gq_neon.c — GQ dequantize on ARM64 Advanced SIMD (coders.h): each
 * chunk decoded to two registers of 16 code bytes (element order), widened,
 * minus the zero point, times the scale: the scalar reference's single f32
 * product. */
#include "coders.h"

#if defined(__aarch64__)
#include "gq_neon.h"

static inline void store16(float *y, uint8x16_t q, int16x8_t z, float32x4_t s) {
    const int16x8_t lo = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_low_u8(q))), z);
    const int16x8_t hi = vsubq_s16(vreinterpretq_s16_u16(vmovl_u8(vget_high_u8(q))), z);
    vst1q_f32(y, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo))), s));
    vst1q_f32(y + 4, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(lo))), s));
    vst1q_f32(y + 8, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi))), s));
    vst1q_f32(y + 12, vmulq_f32(vcvtq_f32_s32(vmovl_s16(vget_high_s16(hi))), s));
}

static inline __attribute__((always_inline)) void blocks(const uint8_t *in, const int bits, int group, float *y,
                                                         int64_t nb) {
    const size_t bsz = (size_t)KILN_GQ_BLOCK_BYTES(bits, group);
    for (int64_t b = 0; b < nb; b++, in += bsz) {
        const float32x4_t s = vdupq_n_f32(kiln__gq_scale(in));
        const int16x8_t z = vdupq_n_s16(in[2]);
        for (int c = 0; c < group / KILN_GQ_CHUNK; c++, y += KILN_GQ_CHUNK) {
            const uint8_t *ch = in + KILN_GQ_HEAD + c * KILN_GQ_CHUNK_BYTES(bits);
            store16(y, kiln__gq_decode16(ch, bits, 0), z, s);
            store16(y + 16, kiln__gq_decode16(ch, bits, 1), z, s);
        }
    }
}

static void gq_dequant(const void *in, int bits, int group, float *y, int64_t nb) {
    if (bits == 4) blocks(in, 4, group, y, nb);
    else if (bits == 3) blocks(in, 3, group, y, nb);
    else blocks(in, 2, group, y, nb);
}

kiln__gq_dequant_fn *kiln__gq_dequant_neon(void) { return gq_dequant; }
#else
kiln__gq_dequant_fn *kiln__gq_dequant_neon(void) { return 0; }
#endif
