/* nn_attention_neon.c — blocked attention's f32 tile loops for ARM64 NEON:
 * a 4 x 16 register-tiled multiply (scalar columns at the right edge) and
 * a vectorized exp. Twins of nn_attention_loops.c's scalar loops. */
#if defined(__aarch64__)
#include "nn_attention_simd.h"

#include <arm_neon.h>
#include <math.h>

/* exp(x): 2^n * p(r), x = n ln2 + r, |r| <= ln2/2, p the degree-6 Taylor
 * polynomial; below ln(FLT_MIN) the result is 0 (so exp(-inf) = 0). */
static inline float32x4_t exp4(float32x4_t x) {
    uint32x4_t under = vcltq_f32(x, vdupq_n_f32(-87.33654f));
    x = vminq_f32(vmaxq_f32(x, vdupq_n_f32(-87.33654f)), vdupq_n_f32(88.0f));
    float32x4_t n = vrndnq_f32(vmulq_f32(x, vdupq_n_f32(1.44269504f)));
    float32x4_t r = vfmsq_f32(x, n, vdupq_n_f32(0.693145752f));
    r = vfmsq_f32(r, n, vdupq_n_f32(1.42860677e-6f));
    float32x4_t p = vdupq_n_f32(1.0f / 720);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 120), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 24), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f / 6), p, r);
    p = vfmaq_f32(vdupq_n_f32(0.5f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    p = vfmaq_f32(vdupq_n_f32(1.0f), p, r);
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    float32x4_t y = vmulq_f32(p, vreinterpretq_f32_s32(e));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(y), under));
}

static float exp_sum(float *x, int64_t n, float scale, float sub) {
    float32x4_t vs = vdupq_n_f32(scale), vsub = vdupq_n_f32(sub), acc = vdupq_n_f32(0.0f);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) {
        float32x4_t e = exp4(vsubq_f32(vmulq_f32(vld1q_f32(x + j), vs), vsub));
        vst1q_f32(x + j, e);
        acc = vaddq_f32(acc, e);
    }
    float sum = vaddvq_f32(acc);
    if (j < n) {
        float t[4] = {0, 0, 0, 0};
        for (int64_t i = j; i < n; i++) t[i - j] = x[i];
        float32x4_t e = exp4(vsubq_f32(vmulq_f32(vld1q_f32(t), vs), vsub));
        vst1q_f32(t, e);
        for (int64_t i = j; i < n; i++) sum += x[i] = t[i - j];
    }
    return sum;
}

static float row_max(const float *x, int64_t n) {
    float32x4_t m = vdupq_n_f32(-INFINITY);
    int64_t j = 0;
    for (; j + 4 <= n; j += 4) m = vmaxq_f32(m, vld1q_f32(x + j));
    float r = vmaxvq_f32(m);
    for (; j < n; j++)
        if (x[j] > r) r = x[j];
    return r;
}

static inline void store4(float *c, float32x4_t v, bool acc) { vst1q_f32(c, acc ? vaddq_f32(v, vld1q_f32(c)) : v); }

static void gemm(int64_t m, int64_t n, int64_t k, const float *a, int64_t ars, int64_t acs, const float *b, int64_t ldb,
                 float *c, int64_t ldc, bool acc) {
    int64_t n16 = n / 16 * 16;
    for (int64_t j = 0; j < n16; j += 16) {
        const float *bj = b + j;
        int64_t i = 0;
        for (; i + 4 <= m; i += 4) {
            float32x4_t cc[4][4];
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++) cc[r][q] = vdupq_n_f32(0.0f);
            const float *a0 = a + i * ars;
            for (int64_t p = 0; p < k; p++) {
                const float *bp = bj + p * ldb;
                float32x4_t b0 = vld1q_f32(bp), b1 = vld1q_f32(bp + 4), b2 = vld1q_f32(bp + 8), b3 = vld1q_f32(bp + 12);
                float32x4_t av = {a0[p * acs], a0[ars + p * acs], a0[2 * ars + p * acs], a0[3 * ars + p * acs]};
                cc[0][0] = vfmaq_laneq_f32(cc[0][0], b0, av, 0), cc[0][1] = vfmaq_laneq_f32(cc[0][1], b1, av, 0);
                cc[0][2] = vfmaq_laneq_f32(cc[0][2], b2, av, 0), cc[0][3] = vfmaq_laneq_f32(cc[0][3], b3, av, 0);
                cc[1][0] = vfmaq_laneq_f32(cc[1][0], b0, av, 1), cc[1][1] = vfmaq_laneq_f32(cc[1][1], b1, av, 1);
                cc[1][2] = vfmaq_laneq_f32(cc[1][2], b2, av, 1), cc[1][3] = vfmaq_laneq_f32(cc[1][3], b3, av, 1);
                cc[2][0] = vfmaq_laneq_f32(cc[2][0], b0, av, 2), cc[2][1] = vfmaq_laneq_f32(cc[2][1], b1, av, 2);
                cc[2][2] = vfmaq_laneq_f32(cc[2][2], b2, av, 2), cc[2][3] = vfmaq_laneq_f32(cc[2][3], b3, av, 2);
                cc[3][0] = vfmaq_laneq_f32(cc[3][0], b0, av, 3), cc[3][1] = vfmaq_laneq_f32(cc[3][1], b1, av, 3);
                cc[3][2] = vfmaq_laneq_f32(cc[3][2], b2, av, 3), cc[3][3] = vfmaq_laneq_f32(cc[3][3], b3, av, 3);
            }
            for (int r = 0; r < 4; r++)
                for (int q = 0; q < 4; q++) store4(c + (i + r) * ldc + j + 4 * q, cc[r][q], acc);
        }
        for (; i < m; i++) {
            float32x4_t c0 = vdupq_n_f32(0.0f), c1 = c0, c2 = c0, c3 = c0;
            for (int64_t p = 0; p < k; p++) {
                const float *bp = bj + p * ldb;
                float32x4_t x = vdupq_n_f32(a[i * ars + p * acs]);
                c0 = vfmaq_f32(c0, x, vld1q_f32(bp)), c1 = vfmaq_f32(c1, x, vld1q_f32(bp + 4));
                c2 = vfmaq_f32(c2, x, vld1q_f32(bp + 8)), c3 = vfmaq_f32(c3, x, vld1q_f32(bp + 12));
            }
            float *ci = c + i * ldc + j;
            store4(ci, c0, acc), store4(ci + 4, c1, acc), store4(ci + 8, c2, acc), store4(ci + 12, c3, acc);
        }
    }
    /* the last n % 16 columns, fused as the vector lanes are (a decoding
     * step's tile, as wide as a group of heads, gives the same bits as
     * the blocked way's wider one) */
    for (int64_t i = 0; n16 < n && i < m; i++) {
        float *ci = c + i * ldc;
        for (int64_t j = n16; j < n; j++) {
            float s = 0.0f;
            for (int64_t p = 0; p < k; p++) s = fmaf(a[i * ars + p * acs], b[p * ldb + j], s);
            ci[j] = acc ? ci[j] + s : s;
        }
    }
}

const kiln_attn_ops_f32 kiln__attn_ops_f32_neon = {gemm, exp_sum, row_max};
#endif
