/* qmatmul_gemm_neondot.c — the block-scaled int8 GEMM of qmatmul_gemm.h with
 * the ARMv8.2 dot product: W signed (Q8_0's w, Q4_0's nibble against
 * -8 sum(x)), sdot by element: 16 bytes of a column's block hold 4 quads,
 * each multiplied against 4 rows' quads of x (one vector) from its lane.
 * A pass is a group of 16 rows (4 vectors) times 3 columns: 12 int32 and
 * 12 f32 accumulators. Each lane runs kiln__qmm_gemm_ref's f32 operations
 * (vfmaq_f32 is fused), so every output is its bits. */
#include "qmatmul_gemm.h"

#if defined(__aarch64__) && defined(__ARM_FEATURE_DOTPROD)
#include <arm_neon.h>

#define NC KILN_QMM_GEMM_NC
#define CC 3 /* columns a pass */
#define UNROLL _Pragma("GCC unroll 8")

/* a group of 16 rows (xg, dg, sg at its block 0) against CC panel
 * columns (wp, dw at the first) over blocks [b0, b1): out[c][r0 ..] */
static inline __attribute__((always_inline)) void part(const int8_t *xg, const float *dg, const int32_t *sg,
                                                       const uint8_t *wp, const float *dw, int64_t nb, int64_t b0,
                                                       int64_t b1, bool first, float (*out)[32], int r0) {
    float32x4_t f[CC][4];
    UNROLL
    for (int c = 0; c < CC; c++)
        UNROLL
        for (int v = 0; v < 4; v++) f[c][v] = first ? vdupq_n_f32(0.0f) : vld1q_f32(out[c] + r0 + 4 * v);
    for (int64_t b = b0; b < b1; b++) {
        int32x4_t s[CC][4];
        UNROLL
        for (int v = 0; v < 4; v++) {
            const int32x4_t init = vld1q_s32(sg + b * 16 + 4 * v);
            UNROLL
            for (int c = 0; c < CC; c++) s[c][v] = init;
        }
        const int8_t *xb = xg + b * 512;
        UNROLL
        for (int qq = 0; qq < 2; qq++) {
            int8x16_t w[CC];
            UNROLL
            for (int c = 0; c < CC; c++) w[c] = vld1q_s8((const int8_t *)wp + c * nb * 32 + b * 32 + 16 * qq);
#define QUAD(L)                                                                                                \
    UNROLL                                                                                                     \
    for (int v = 0; v < 4; v++) {                                                                              \
        const int8x16_t x = vld1q_s8(xb + (4 * qq + (L)) * 64 + 16 * v);                                       \
        UNROLL                                                                                                 \
        for (int c = 0; c < CC; c++) s[c][v] = vdotq_laneq_s32(s[c][v], x, w[c], (L));                         \
    }
            QUAD(0) QUAD(1) QUAD(2) QUAD(3)
#undef QUAD
        }
        UNROLL
        for (int c = 0; c < CC; c++) {
            const float dc = dw[c * nb + b];
            UNROLL
            for (int v = 0; v < 4; v++)
                f[c][v] = vfmaq_f32(f[c][v], vcvtq_f32_s32(s[c][v]), vmulq_n_f32(vld1q_f32(dg + b * 16 + 4 * v), dc));
        }
    }
    UNROLL
    for (int c = 0; c < CC; c++)
        UNROLL
        for (int v = 0; v < 4; v++) vst1q_f32(out[c] + r0 + 4 * v, f[c][v]);
}

static void tile(const int8_t *xp, const float *da, const int32_t *xs, int rows, const uint8_t *wp, const float *dw,
                 int64_t nb, int64_t b0, int64_t b1, bool first, float out[NC][32]) {
    for (int g = 0; 16 * g < rows; g++)
        for (int c0 = 0; c0 < NC; c0 += CC)
            part(xp + g * nb * 512, da + g * nb * 16, xs + g * nb * 16, wp + c0 * nb * 32, dw + c0 * nb, nb, b0, b1,
                 first, out + c0, 16 * g);
}

const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_neondot(void) {
    static const kiln_qmm_gemm_kernels k = {kiln__qmm_gemm_pack_x, kiln__qmm_gemm_pack_w, tile, tile, 0, false};
    return &k;
}
#else
const kiln_qmm_gemm_kernels *kiln__qmm_gemm_kernels_neondot(void) { return NULL; }
#endif
