/* qmatmul_kgemm_neon.h — the packer and tiles of the K types' and the
 * blocks of 32's integer GEMMs (qmatmul_kgemm.h, qmatmul_q32gemm.h) on
 * ARM64, shared by qmatmul_kgemm_neon.c and _neondot.c, which define
 * KG_NAME(x) (the function suffix) and, before including it,
 * KG_NAME(group)(acc, q, x16): acc plus, in int32 lane c, the products of
 * 16 elements of column c (quad L at q + 4 c + 4 NC L) and x16 (quad L:
 * bytes 4L .. 4L + 3). Included once per file, built with its flags.
 *
 * NEON has no unsigned-by-signed dot product below i8mm, so the panel
 * holds the signed codes q (kiln__qints_unpack's values, decoded here by
 * NEON), not q + off as the x86 panels, and each block's isum and summs
 * are the batch-1 NEON kernels' integers (qmatmul_ggml_neon.h) directly.
 * The panel's layout, NC = 16 columns, quads of 4 columns in each 16-byte
 * register:
 *     K types:  q  [64 quads][NC][4] int8   quad q: elements 4q .. 4q + 3
 *               sc [16 groups][NC]  int32   the group's sub-block scale
 *               mn [16 groups][NC]  int32   its min (zeros without)
 *               d  [NC], dm [NC]    f32
 *     32s:      q  [8 quads][NC][4] int8;  d [NC], m [NC] f32 (m: 0 without)
 * Padding columns are zeros. A tile runs 8 columns (two registers) of up
 * to KG_MR rows a pass, the f32 operations the batch-1 kernels' in their
 * order (per block (dx d) * isum, + (dx dm) * summs or + m s with a min;
 * the blocks of 32 in the reference's 8 lanes, one lane at a time, as the
 * x86 tiles), so every row is the batch-1 product's bits.
 *
 * Guest instructions under qemu (not time: no ARM machine here), per row,
 * column and block of Q4_K (Q6_K): the sdot tile 48 (36), the smull one
 * 132 (120), the batch-1 kernels 310 and 359 (474, 523); the pack 695
 * (850) per column and block, once per call; the dequantized panels and
 * f32 GEMM they replace, 428 (482) at 40 rows. */
#include "qmatmul_kgemm.h"
#include "qmatmul_q32gemm.h"
#include "qmatmul_kgemm_tile.h"

#include "../../quant/quant.h"

#include <arm_neon.h>
#include <string.h>

#define KG_MR 4 /* rows of x per pass */
#define KG_KBLOCK (KILN_KGEMM_NC * (KILN_QK_K + 16 * 4 * 2 + 2 * 4))
#define KG_UNROLL _Pragma("GCC unroll 16")
#define KG_INLINE static inline __attribute__((always_inline))

/* bit b of bytes h as 0x10 in each byte */
KG_INLINE uint8x16_t KG_NAME(bit_to_16)(uint8x16_t h, int b) {
    return vandq_u8(vtstq_u8(h, vdupq_n_u8((uint8_t)(1u << b))), vdupq_n_u8(0x10));
}

/* block blk of t's signed codes, kiln__qints_unpack's q (the layouts are
 * described there) */
static void KG_NAME(codes)(kiln_dtype t, const void *blk, int8_t *q) {
    const uint8x16_t m4 = vdupq_n_u8(0x0f), m3 = vdupq_n_u8(3);
    switch (t) {
    case KILN_Q4_K: case KILN_Q5_K: {
        const uint8_t *qs = t == KILN_Q4_K ? ((const kiln_block_q4_K *)blk)->qs : ((const kiln_block_q5_K *)blk)->qs,
                      *qh = t == KILN_Q5_K ? ((const kiln_block_q5_K *)blk)->qh : NULL;
        for (int j = 0; j < 4; j++)
            for (int i = 0; i < 2; i++) { /* elements 64 j + 16 i + l and + 32 */
                const uint8x16_t b = vld1q_u8(qs + 32 * j + 16 * i);
                uint8x16_t lo = vandq_u8(b, m4), hi = vshrq_n_u8(b, 4);
                if (qh) {
                    const uint8x16_t h = vld1q_u8(qh + 16 * i);
                    lo = vorrq_u8(lo, KG_NAME(bit_to_16)(h, 2 * j)), hi = vorrq_u8(hi, KG_NAME(bit_to_16)(h, 2 * j + 1));
                }
                vst1q_s8(q + 64 * j + 16 * i, vreinterpretq_s8_u8(lo));
                vst1q_s8(q + 64 * j + 32 + 16 * i, vreinterpretq_s8_u8(hi));
            }
        return;
    }
    case KILN_Q6_K: {
        const kiln_block_q6_K *b = blk;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) { /* elements 128 h + 32 r + 16 i + l */
                const uint8x16_t l0 = vld1q_u8(b->ql + 64 * h + 16 * i), l1 = vld1q_u8(b->ql + 64 * h + 32 + 16 * i),
                                 hb = vld1q_u8(b->qh + 32 * h + 16 * i);
                for (int r = 0; r < 4; r++) {
                    const uint8x16_t l = r & 1 ? l1 : l0, lo = r / 2 ? vshrq_n_u8(l, 4) : vandq_u8(l, m4),
                                     hi = vandq_u8(vshlq_u8(hb, vdupq_n_s8((int8_t)(-2 * r))), m3);
                    vst1q_s8(q + 128 * h + 32 * r + 16 * i,
                             vsubq_s8(vreinterpretq_s8_u8(vorrq_u8(lo, vshlq_n_u8(hi, 4))), vdupq_n_s8(32)));
                }
            }
        return;
    }
    case KILN_Q2_K: case KILN_Q3_K: {
        const uint8_t *qs = t == KILN_Q2_K ? ((const kiln_block_q2_K *)blk)->qs : ((const kiln_block_q3_K *)blk)->qs,
                      *hm = t == KILN_Q3_K ? ((const kiln_block_q3_K *)blk)->hmask : NULL;
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) { /* elements 128 h + 32 r + 16 i + l; Q3_K: - 4 where hmask's bit 4h + r is clear */
                const uint8x16_t b = vld1q_u8(qs + 32 * h + 16 * i), hv = hm ? vld1q_u8(hm + 16 * i) : vdupq_n_u8(0);
                for (int r = 0; r < 4; r++) {
                    int8x16_t v = vreinterpretq_s8_u8(vandq_u8(vshlq_u8(b, vdupq_n_s8((int8_t)(-2 * r))), m3));
                    if (hm)
                        v = vsubq_s8(v, vreinterpretq_s8_u8(vbicq_u8(
                                            vdupq_n_u8(4), vtstq_u8(hv, vdupq_n_u8((uint8_t)(1u << (4 * h + r)))))));
                    vst1q_s8(q + 128 * h + 32 * r + 16 * i, v);
                }
            }
        return;
    }
    case KILN_IQ4_XS: {
        const int8x16_t v = vld1q_s8(kiln__iq4nl_values);
        const uint8_t *qs = ((const kiln_block_iq4_xs *)blk)->qs;
        for (int s = 0; s < 8; s++) {
            const uint8x16_t b = vld1q_u8(qs + 16 * s);
            vst1q_s8(q + 32 * s, vqtbl1q_s8(v, vandq_u8(b, m4)));
            vst1q_s8(q + 32 * s + 16, vqtbl1q_s8(v, vshrq_n_u8(b, 4)));
        }
        return;
    }
    default: { /* blocks of 32: element l in qs[l]'s low nibble, 16 + l in its high one, fifth bit e in bit e of qh */
        const uint8_t *qs = t == KILN_Q4_1 ? ((const kiln_block_q4_1 *)blk)->qs
                          : t == KILN_Q5_0 ? ((const kiln_block_q5_0 *)blk)->qs
                          : t == KILN_Q5_1 ? ((const kiln_block_q5_1 *)blk)->qs
                                           : ((const kiln_block_iq4_nl *)blk)->qs;
        const uint8x16_t b = vld1q_u8(qs);
        uint8x16_t lo = vandq_u8(b, m4), hi = vshrq_n_u8(b, 4);
        if (t == KILN_IQ4_NL) {
            const int8x16_t v = vld1q_s8(kiln__iq4nl_values);
            vst1q_s8(q, vqtbl1q_s8(v, lo)), vst1q_s8(q + 16, vqtbl1q_s8(v, hi));
            return;
        }
        if (t != KILN_Q4_1) {
            static const uint8_t bits[16] = {1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128};
            const uint8_t *qh = t == KILN_Q5_0 ? ((const kiln_block_q5_0 *)blk)->qh : ((const kiln_block_q5_1 *)blk)->qh;
            const uint8x16_t sel = vld1q_u8(bits), x10 = vdupq_n_u8(0x10);
            lo = vorrq_u8(lo, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[0]), vdup_n_u8(qh[1])), sel), x10));
            hi = vorrq_u8(hi, vandq_u8(vtstq_u8(vcombine_u8(vdup_n_u8(qh[2]), vdup_n_u8(qh[3])), sel), x10));
        }
        const int8x16_t off = vdupq_n_s8(t == KILN_Q5_0 ? 16 : 0);
        vst1q_s8(q, vsubq_s8(vreinterpretq_s8_u8(lo), off)), vst1q_s8(q + 16, vsubq_s8(vreinterpretq_s8_u8(hi), off));
        return;
    }
    }
}

/* column c's scales of block blk into its panel block's scales (s: past
 * the codes) */
static void KG_NAME(scales)(kiln_dtype t, const char *blk, int c, char *s) {
    float *d = (float *)s;
    if (kiln__types[t].blck == KILN_QK) { /* d, and Q4_1's and Q5_1's m: the block's first f16 */
        const bool min = t == KILN_Q4_1 || t == KILN_Q5_1;
        uint16_t h[2];
        memcpy(h, blk, min ? 4 : 2);
        d[c] = kiln__f16_to_f32(h[0]), d[KILN_KGEMM_NC + c] = min ? kiln__f16_to_f32(h[1]) : 0.0f;
        return;
    }
    kiln_qints u;
    kiln__qints_scales(t, blk, 0, &u);
    int32_t *sc = (int32_t *)s, *mn = sc + 16 * KILN_KGEMM_NC;
    const int sh = u.sub == 32; /* sub-blocks of 16 or 32 */
    for (int g = 0; g < 16; g++) {
        sc[g * KILN_KGEMM_NC + c] = u.sc[g >> sh];
        mn[g * KILN_KGEMM_NC + c] = u.has_min ? u.mn[g >> sh] : 0;
    }
    d = (float *)(mn + 16 * KILN_KGEMM_NC);
    d[c] = u.d, d[KILN_KGEMM_NC + c] = u.has_min ? u.dm : 0.0f;
}

/* columns [0, cols) of W into the layout above, zeros past cols: 4
 * columns' codes at a time, their quads transposed into the panel's rows */
static void KG_NAME(pack)(kiln_dtype t, const char *w, size_t wrow, int cols, int64_t nb, char *panel) {
    const int n = (int)kiln__types[t].blck;
    const size_t block = n == KILN_QK_K ? KG_KBLOCK : KILN_Q32GEMM_BLOCK, bs = kiln__types[t].size;
    memset(panel, 0, (size_t)nb * block);
    for (int c0 = 0; c0 < cols; c0 += 4)
        for (int64_t b = 0; b < nb; b++) {
            char *p = panel + b * block;
            int8_t q[4][KILN_QK_K];
            for (int i = 0; i < 4; i++) {
                if (c0 + i >= cols) {
                    memset(q[i], 0, (size_t)n);
                    continue;
                }
                const char *blk = w + (size_t)(c0 + i) * wrow + (size_t)b * bs;
                KG_NAME(codes)(t, blk, q[i]);
                KG_NAME(scales)(t, blk, c0 + i, p + n * KILN_KGEMM_NC);
            }
            for (int g = 0; g < n / 16; g++) { /* quads 4 g .. 4 g + 3 */
                const int32x4_t a0 = vreinterpretq_s32_s8(vld1q_s8(q[0] + 16 * g)),
                                a1 = vreinterpretq_s32_s8(vld1q_s8(q[1] + 16 * g)),
                                a2 = vreinterpretq_s32_s8(vld1q_s8(q[2] + 16 * g)),
                                a3 = vreinterpretq_s32_s8(vld1q_s8(q[3] + 16 * g));
                const int64x2_t t0 = vreinterpretq_s64_s32(vtrn1q_s32(a0, a1)),
                                t1 = vreinterpretq_s64_s32(vtrn2q_s32(a0, a1)),
                                t2 = vreinterpretq_s64_s32(vtrn1q_s32(a2, a3)),
                                t3 = vreinterpretq_s64_s32(vtrn2q_s32(a2, a3));
                int8_t *o = (int8_t *)p + (4 * g * KILN_KGEMM_NC + c0) * 4;
                vst1q_s8(o, vreinterpretq_s8_s64(vtrn1q_s64(t0, t2)));
                vst1q_s8(o + 4 * KILN_KGEMM_NC, vreinterpretq_s8_s64(vtrn1q_s64(t1, t3)));
                vst1q_s8(o + 8 * KILN_KGEMM_NC, vreinterpretq_s8_s64(vtrn2q_s64(t0, t2)));
                vst1q_s8(o + 12 * KILN_KGEMM_NC, vreinterpretq_s8_s64(vtrn2q_s64(t1, t3)));
            }
        }
}

/* R rows' sums (8 columns each) to y, cols of them */
KG_INLINE void KG_NAME(store)(const int R, float32x4_t acc[][2], float *y, int64_t ldy, int cols) {
    KG_UNROLL
    for (int r = 0; r < R; r++) {
        if (cols == 8) {
            vst1q_f32(y + r * ldy, acc[r][0]), vst1q_f32(y + r * ldy + 4, acc[r][1]);
            continue;
        }
        float o[8];
        vst1q_f32(o, acc[r][0]), vst1q_f32(o + 4, acc[r][1]);
        memcpy(y + r * ldy, o, (size_t)cols * sizeof(float));
    }
}

/* R rows (a constant once inlined) of Q8_K against columns 8h .. 8h + 7
 * of a K panel */
KG_INLINE void KG_NAME(k_rows)(const int R, const char *xa, size_t xrow, const char *panel, int64_t nb, bool has_min,
                               float *y, int64_t ldy, int h, int cols) {
    float32x4_t acc[KG_MR][2];
    KG_UNROLL
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
    for (int64_t b = 0; b < nb; b++) {
        const char *p = panel + b * KG_KBLOCK;
        const int8_t *q = (const int8_t *)p + 32 * h;
        const int32_t *sc = (const int32_t *)(p + KILN_QK_K * KILN_KGEMM_NC) + 8 * h, *mn = sc + 16 * KILN_KGEMM_NC;
        const float *d = (const float *)(mn + 16 * KILN_KGEMM_NC); /* all three from column 8 h */
        const kiln_block_q8_K *xb[KG_MR];
        int32x4_t P[KG_MR][2], C[KG_MR][2];
        KG_UNROLL
        for (int r = 0; r < R; r++) {
            xb[r] = (const kiln_block_q8_K *)(xa + (size_t)r * xrow) + b;
            P[r][0] = P[r][1] = C[r][0] = C[r][1] = vdupq_n_s32(0);
        }
        for (int g = 0; g < 16; g++) {
            const int8_t *qg = q + 16 * g * KILN_KGEMM_NC;
            const int32x4_t s0 = vld1q_s32(sc + g * KILN_KGEMM_NC), s1 = vld1q_s32(sc + g * KILN_KGEMM_NC + 4);
            KG_UNROLL
            for (int r = 0; r < R; r++) {
                const int8x16_t x16 = vld1q_s8(xb[r]->qs + 16 * g);
                P[r][0] = vmlaq_s32(P[r][0], KG_NAME(group)(vdupq_n_s32(0), qg, x16), s0);
                P[r][1] = vmlaq_s32(P[r][1], KG_NAME(group)(vdupq_n_s32(0), qg + 16, x16), s1);
            }
        }
        for (int g = 0; has_min && g < 16; g++) {
            const int32x4_t m0 = vld1q_s32(mn + g * KILN_KGEMM_NC), m1 = vld1q_s32(mn + g * KILN_KGEMM_NC + 4);
            KG_UNROLL
            for (int r = 0; r < R; r++) {
                C[r][0] = vmlaq_n_s32(C[r][0], m0, xb[r]->bsums[g]);
                C[r][1] = vmlaq_n_s32(C[r][1], m1, xb[r]->bsums[g]);
            }
        }
        KG_UNROLL
        for (int r = 0; r < R; r++) {
            const float32x4_t da = vdupq_n_f32(xb[r]->d);
            for (int i = 0; i < 2; i++) {
                const float32x4_t dw = vld1q_f32(d + 4 * i), dmw = vld1q_f32(d + KILN_KGEMM_NC + 4 * i);
                float32x4_t v = vmulq_f32(vmulq_f32(da, dw), vcvtq_f32_s32(P[r][i]));
                if (has_min) v = vaddq_f32(v, vmulq_f32(vmulq_f32(da, dmw), vcvtq_f32_s32(C[r][i])));
                acc[r][i] = vaddq_f32(acc[r][i], v);
            }
        }
    }
    KG_NAME(store)(R, acc, y, ldy, cols);
}

/* block b of a panel of blocks of 32 (columns 8h .. 8h + 7): its term
 * added to each of R rows' sums */
KG_INLINE void KG_NAME(q32_block)(const int R, const char *xa, size_t xrow, const char *panel, int64_t b,
                                  bool has_min, int h, float32x4_t acc[][2]) {
    const char *p = panel + b * KILN_Q32GEMM_BLOCK;
    const int8_t *q = (const int8_t *)p + 32 * h;
    const float *d = (const float *)(p + KILN_QK * KILN_KGEMM_NC) + 8 * h;
    KG_UNROLL
    for (int r = 0; r < R; r++) {
        const kiln_q32x *xb = (const kiln_q32x *)(xa + (size_t)r * xrow) + b;
        const int8x16_t x0 = vld1q_s8(xb->qs), x1 = vld1q_s8(xb->qs + 16);
        for (int i = 0; i < 2; i++) {
            const int32x4_t T = KG_NAME(group)(KG_NAME(group)(vdupq_n_s32(0), q + 16 * i, x0),
                                               q + 16 * KILN_KGEMM_NC + 16 * i, x1);
            const float32x4_t dd = vmulq_f32(vld1q_f32(d + 4 * i), vdupq_n_f32(xb->d));
            float32x4_t v = vmulq_f32(dd, vcvtq_f32_s32(T));
            if (has_min) v = vaddq_f32(v, vmulq_f32(vld1q_f32(d + KILN_KGEMM_NC + 4 * i), vdupq_n_f32(xb->s)));
            acc[r][i] = vaddq_f32(acc[r][i], v);
        }
    }
}

/* R rows against columns 8h .. 8h + 7 of a panel of blocks of 32, one
 * lane of the reference's sums at a time, then its leftover blocks */
KG_INLINE void KG_NAME(q32_rows)(const int R, const char *xa, size_t xrow, const char *panel, int64_t nb,
                                 bool has_min, float *y, int64_t ldy, int h, int cols) {
    const int64_t grouped = nb / 8 * 8;
    float32x4_t lane[8][KG_MR][2], acc[KG_MR][2];
    for (int l = 0; l < 8 && grouped; l++) {
        KG_UNROLL
        for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = vdupq_n_f32(0.0f);
        for (int64_t b = l; b < grouped; b += 8) KG_NAME(q32_block)(R, xa, xrow, panel, b, has_min, h, acc);
        KG_UNROLL
        for (int r = 0; r < R; r++) lane[l][r][0] = acc[r][0], lane[l][r][1] = acc[r][1];
    }
    KG_UNROLL
    for (int r = 0; r < R; r++)
        for (int i = 0; i < 2; i++)
            acc[r][i] = !grouped ? vdupq_n_f32(0.0f)
                                 : vaddq_f32(vaddq_f32(vaddq_f32(lane[0][r][i], lane[4][r][i]),
                                                       vaddq_f32(lane[2][r][i], lane[6][r][i])),
                                             vaddq_f32(vaddq_f32(lane[1][r][i], lane[5][r][i]),
                                                       vaddq_f32(lane[3][r][i], lane[7][r][i])));
    for (int64_t b = grouped; b < nb; b++) KG_NAME(q32_block)(R, xa, xrow, panel, b, has_min, h, acc);
    KG_NAME(store)(R, acc, y, ldy, cols);
}

KG_TILE(KG_NAME(k_tile), KG_NAME(k_rows))
KG_TILE(KG_NAME(q32_tile), KG_NAME(q32_rows))

static const kiln_kgemm_kernels KG_NAME(k_kernels) = {KG_NAME(pack), KG_NAME(k_tile), true, KG_KBLOCK},
                                KG_NAME(q32_kernels) = {KG_NAME(pack), KG_NAME(q32_tile), true, KILN_Q32GEMM_BLOCK};
