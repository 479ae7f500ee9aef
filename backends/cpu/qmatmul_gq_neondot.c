/* qmatmul_gq_neondot.c — the GQ dot product with the ARMv8.2 dot product
 * (qmatmul_gq.h): each chunk's codes minus the zero point as signed bytes,
 * two sdot (vdotq_s32) against x8 give the 8 int32 lanes of the scheme
 * (lane l = elements 4l..4l+3), fused into the f32 lanes as the reference
 * does, so the result is the reference's bit for bit. */
#include "qmatmul_gq.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include "gq_neon.h"

static inline __attribute__((always_inline)) void chunk(const uint8_t *w, const int bits, const int group,
                                                        const int8_t *xq, const float *dx, int64_t i,
                                                        float32x4_t acc[2]) {
    const int cpb = group / KILN_GQ_CHUNK;
    const uint8_t *b = w + (size_t)(i / cpb) * KILN_GQ_BLOCK_BYTES(bits, group);
    const uint8_t *c = b + KILN_GQ_HEAD + (i % cpb) * KILN_GQ_CHUNK_BYTES(bits);
    const uint8x16_t z = vdupq_n_u8(b[2]);
    const int8x16_t q0 = vreinterpretq_s8_u8(vsubq_u8(kiln__gq_decode16(c, bits, 0), z));
    const int8x16_t q1 = vreinterpretq_s8_u8(vsubq_u8(kiln__gq_decode16(c, bits, 1), z));
    const int32x4_t s0 = vdotq_s32(vdupq_n_s32(0), q0, vld1q_s8(xq + 32 * i));
    const int32x4_t s1 = vdotq_s32(vdupq_n_s32(0), q1, vld1q_s8(xq + 32 * i + 16));
    const float32x4_t d = vdupq_n_f32(kiln__gq_scale(b) * dx[i]);
    acc[0] = vfmaq_f32(acc[0], vcvtq_f32_s32(s0), d);
    acc[1] = vfmaq_f32(acc[1], vcvtq_f32_s32(s1), d);
}

static inline __attribute__((always_inline)) float row(const uint8_t *w, const int bits, const int group,
                                                       const int8_t *xq, const float *dx, int64_t nc) {
    float32x4_t acc[2][2] = {{vdupq_n_f32(0), vdupq_n_f32(0)}, {vdupq_n_f32(0), vdupq_n_f32(0)}};
    for (int64_t i = 0; i < nc; i++) chunk(w, bits, group, xq, dx, i, acc[i & 1]);
    float a[16], s = 0.0f;
    vst1q_f32(a, acc[0][0]), vst1q_f32(a + 4, acc[0][1]), vst1q_f32(a + 8, acc[1][0]), vst1q_f32(a + 12, acc[1][1]);
    for (int l = 0; l < 16; l++) s += a[l];
    return s;
}

static float dot_neondot(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx, int64_t nc) {
#define GQ_CASE(b, g) \
    if (bits == b && group == g) return row(w, b, g, xq, dx, nc);
    GQ_CASE(4, 32) GQ_CASE(4, 64) GQ_CASE(4, 128)
    GQ_CASE(3, 32) GQ_CASE(3, 64) GQ_CASE(3, 128)
    GQ_CASE(2, 32) GQ_CASE(2, 64) GQ_CASE(2, 128)
#undef GQ_CASE
    return kiln__gq_dot_ref(w, bits, group, xq, dx, nc);
}

kiln_gq_dot *kiln__gq_dot_neondot(void) { return dot_neondot; }
#else
kiln_gq_dot *kiln__gq_dot_neondot(void) { return NULL; }
#endif
