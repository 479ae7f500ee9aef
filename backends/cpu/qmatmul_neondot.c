/* qmatmul_neondot.c — ARMv8.2 dot-product (sdot) kernels of KILN_OP_QMATMUL's
 * batch-1 path (qmatmul.h): a block of 32 is two vdotq_s32 (signed x
 * signed, no offset) giving the reference's lanes of that block (Q8_0:
 * 4 + 4 lanes, elements 4l..4l+3; Q4_0: both into the same 4 lanes, the
 * low and high nibbles of 4 packed bytes each); each goes to f32 and one
 * fused multiply-add with the block's scale into that block's lanes, so
 * the result equals the scalar reference bit for bit. The rows kernels
 * (a few rows of x) load each block of W once for all the rows, each row's
 * lanes its own. NF4 keeps the scalar reference here. */
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

#define RMAX KILN_QMM_ROWS_MAX
#define ZERO4 ((lanes4){{vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)}})

/* The rows kernels: one row of W against R (1 .. KILN_QMM_ROWS_MAX) rows
 * of x, row q's codes at xq + 32 nb q and scales at dx + nb q. Each block
 * of W is loaded (Q4_0: decoded) once, each row's lanes are its own, so
 * out[q] is the same whatever R; the one-row kernels are these with one
 * row. The blocks go in steps of 2 (Q8_0) or 4 (Q4_0) so that each
 * block's lanes are named, not indexed: registers. */

/* Q8_0's block i into lanes o, o + 1 of each row */
static inline __attribute__((always_inline)) void q8_0_step(int R, const kiln_block_q8_0 *b, int64_t i,
                                                            const int8_t *xq, const float *dx, int64_t nb,
                                                            lanes4 *l, int o) {
    __builtin_prefetch((const char *)(b + i) + QMM_PREFETCH);
    const int8x16_t w0 = vld1q_s8(b[i].qs), w1 = vld1q_s8(b[i].qs + 16);
    const float dw = kiln__f16_to_f32(b[i].d);
#pragma GCC unroll 4
    for (int q = 0; q < R; q++)
        block(w0, w1, xq + 32 * (nb * q + i), dw * dx[nb * q + i], &l[q].a[o], &l[q].a[o + 1]);
}

static inline __attribute__((always_inline)) void q8_0_rows(int R, const kiln_block_q8_0 *b, const int8_t *xq,
                                                            const float *dx, int64_t nb, float *out) {
    lanes4 l[RMAX];
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) l[q] = ZERO4;
    int64_t i = 0;
    for (; i + 2 <= nb; i += 2) q8_0_step(R, b, i, xq, dx, nb, l, 0), q8_0_step(R, b, i + 1, xq, dx, nb, l, 2);
    if (i < nb) q8_0_step(R, b, i, xq, dx, nb, l, 0);
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) out[q] = sum16(&l[q]);
}

/* Q4_0's block i into lanes j of each row: the low nibbles against
 * elements 0-15 and the high ones against 16-31 accumulate into the same
 * 4 int32 lanes (the reference's lanes of the block), then one fma. */
static inline __attribute__((always_inline)) void q4_0_step(int R, const kiln_block_q4_0 *b, int64_t i,
                                                            const int8_t *xq, const float *dx, int64_t nb,
                                                            lanes4 *l, int j) {
    __builtin_prefetch((const char *)(b + i) + QMM_PREFETCH);
    const uint8x16_t p = vld1q_u8(b[i].qs);
    const int8x16_t w0 = vsubq_s8(vreinterpretq_s8_u8(vandq_u8(p, vdupq_n_u8(0x0f))), vdupq_n_s8(8));
    const int8x16_t w1 = vsubq_s8(vreinterpretq_s8_u8(vshrq_n_u8(p, 4)), vdupq_n_s8(8));
    const float dw = kiln__f16_to_f32(b[i].d);
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) {
        const int8_t *x = xq + 32 * (nb * q + i);
        const int32x4_t s = vdotq_s32(vdotq_s32(vdupq_n_s32(0), w0, vld1q_s8(x)), w1, vld1q_s8(x + 16));
        l[q].a[j] = vfmaq_f32(l[q].a[j], vcvtq_f32_s32(s), vdupq_n_f32(dw * dx[nb * q + i]));
    }
}

static inline __attribute__((always_inline)) void q4_0_rows(int R, const kiln_block_q4_0 *b, const int8_t *xq,
                                                            const float *dx, int64_t nb, float *out) {
    lanes4 l[RMAX];
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) l[q] = ZERO4;
    int64_t i = 0;
    for (; i + 4 <= nb; i += 4) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) q4_0_step(R, b, i + j, xq, dx, nb, l, j);
    }
#pragma GCC unroll 3
    for (int j = 0; j < 3; j++)
        if (i + j < nb) q4_0_step(R, b, i + j, xq, dx, nb, l, j);
#pragma GCC unroll 4
    for (int q = 0; q < R; q++) {
        float a[16];
        for (int j = 0; j < 4; j++) vst1q_f32(a + 4 * j, l[q].a[j]);
        out[q] = kiln__qmm_q4_lanes_sum(a);
    }
}

/* the kernels of one and of 1 .. KILN_QMM_ROWS_MAX rows (xs unused: sdot
 * is signed by signed), one copy per row count so that the rows' lanes
 * are registers */
#define QMM_KERNELS(t)                                                                                            \
    static float dot_##t##_neondot(const void *w, const int8_t *xq, const float *dx, int64_t nb) {                \
        float out;                                                                                                \
        t##_rows(1, w, xq, dx, nb, &out);                                                                         \
        return out;                                                                                               \
    }                                                                                                             \
    static void dotr_##t##_neondot(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb, \
                                   int rows, float *out) {                                                        \
        (void)xs;                                                                                                 \
        switch (rows) {                                                                                           \
        case 1: t##_rows(1, w, xq, dx, nb, out); break;                                                           \
        case 2: t##_rows(2, w, xq, dx, nb, out); break;                                                           \
        case 3: t##_rows(3, w, xq, dx, nb, out); break;                                                           \
        default: t##_rows(4, w, xq, dx, nb, out); break;                                                          \
        }                                                                                                         \
    }
_Static_assert(KILN_QMM_ROWS_MAX == 4, "QMM_KERNELS' cases");
QMM_KERNELS(q8_0)
QMM_KERNELS(q4_0)

const kiln_qmm_kernels *kiln__qmm_kernels_neondot(void) {
    static const kiln_qmm_kernels k = {.q8_0 = dot_q8_0_neondot, .q4_0 = dot_q4_0_neondot,
                                       .nf4 = kiln__qmm_dot_nf4_ref, .quantize_x = kiln__qmm_quantize_x_neon,
                                       .q8_0sr = dotr_q8_0_neondot, .q4_0sr = dotr_q4_0_neondot};
    return &k;
}
#else
const kiln_qmm_kernels *kiln__qmm_kernels_neondot(void) { return NULL; }
#endif
