/* iq4.c — IQ4_NL and IQ4_XS, ggml's non-linear 4-bit types (GGUF types
 * 20, 23; layouts in quant.h): each code picks one of 16 int8 values
 * (kiln__iq4nl_values); IQ4_NL blocks of 32 with an f16 scale, IQ4_XS
 * super-blocks of 256 whose 8 sub-blocks of 32 take a 6-bit scale ls,
 * x = d (ls - 32) value. Quantized as llama-quantize does without an
 * importance matrix (ggml's quantize_iq4_nl / quantize_iq4_xs: the scale
 * searched over 15 trial reciprocals per block of 32, weights x^2; the
 * same f32 operations, so its blocks byte for byte), decoded through
 * their unpack (qints.c). The dtypes' rows are registered here, at load;
 * the products take Q8_0 (IQ4_NL) and Q8_K (IQ4_XS) activations. */
#include "k_quants.h"

#include <math.h>

#define NTRY 7
#define KL KILN_KL /* blocks of 32 searched at once, one per lane (k_quants.h) */

typedef kiln_kvf vf;
typedef kiln_kvi vi;

/* The index of the value nearest x, the upper one on a tie: the count of
 * the steps j whose midpoint test x passes (written as !(... < ...) so
 * that NaN lands on 15, where a binary search over the table ends). */
static int best_index(float x) {
    const int8_t *v = kiln__iq4nl_values;
    int l = 0;
    for (int j = 1; j < 16; j++) l += !(x - v[j - 1] < v[j] - x);
    return l;
}

/* The value at best_index of each lane (its steps summed: no lookup). */
static vf best_value(vf x) {
    const int8_t *v = kiln__iq4nl_values;
    vi q = (vi){0} + v[0];
    for (int j = 1; j < 16; j++) q += ((x - (float)v[j - 1] < (float)v[j] - x) + 1) * (v[j] - v[j - 1]);
    return KILN_KV_FLOAT(q);
}

/* The scales of KL blocks of 32 (block s at xb + 32 s) into d[s]: for
 * each, the least-squares one of the best of 2 NTRY + 1 trials, weights
 * x^2; 0 for a block of zeros. Each lane's sums run in element order. */
static void block_scales(const float *xb, float *d) {
    vf xt[32], max = {0}, amax = {0}, best = {0}, dv = {0};
    kiln__kv_transpose(32, xb, xt);
    for (int s = 0; s < KL; s++)
        for (int j = 0; j < 32; j++)
            if (fabsf(xt[j][s]) > amax[s]) amax[s] = fabsf(xt[j][s]), max[s] = xt[j][s];
    for (int itry = -NTRY - 1; itry <= NTRY; itry++) {
        /* the first fit at the scale of the largest value, then the trials */
        const vf id = itry < -NTRY ? 1.0f / (-max / (float)kiln__iq4nl_values[0])
                                   : (float)(itry + kiln__iq4nl_values[0]) / max;
        vf sumqx = {0}, sumq2 = {0};
        for (int j = 0; j < 32; j++) {
            const vf q = best_value(id * xt[j]), w = xt[j] * xt[j];
            sumqx += w * q * xt[j];
            sumq2 += w * q * q;
        }
        const vi up = ((vi){0} - (itry < -NTRY)) | ((sumq2 > 0) & (sumqx * sumqx > best * sumq2));
        const vf ds = sumqx / sumq2;
        dv = KILN_KV_SEL(up, ds, dv);
        best = KILN_KV_SEL(up, ds * sumqx, best);
    }
    for (int s = 0; s < KL; s++) d[s] = amax[s] < 1e-15f ? 0.0f : dv[s];
}

/* codes L [32 n] into 16 n bytes: element j low nibble, j + 16 high */
static void pack(const uint8_t *L, int n, uint8_t *qs) {
    for (int s = 0; s < n; s++)
        for (int j = 0; j < 16; j++) qs[16 * s + j] = (uint8_t)(L[32 * s + j] | L[32 * s + j + 16] << 4);
}

static void iq4_nl_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_iq4_nl *y = blocks;
    float xb[KL * KILN_QK] = {0}, d[KL];
    for (int64_t b0 = 0; b0 < n / KILN_QK; b0 += KL) {
        /* KL blocks at once, the last group padded with zero blocks */
        const int nbk = n / KILN_QK - b0 < KL ? (int)(n / KILN_QK - b0) : KL;
        memcpy(xb, x + b0 * KILN_QK, sizeof(float) * (size_t)(nbk * KILN_QK));
        memset(xb + nbk * KILN_QK, 0, sizeof(float) * (size_t)((KL - nbk) * KILN_QK));
        block_scales(xb, d);
        for (int s = 0; s < nbk; s++) {
            uint8_t L[KILN_QK];
            const float id = d[s] ? 1 / d[s] : 0.0f;
            y[b0 + s].d = kiln__f32_to_f16(d[s]);
            for (int j = 0; j < KILN_QK; j++) L[j] = (uint8_t)best_index(id * xb[KILN_QK * s + j]);
            pack(L, 1, y[b0 + s].qs);
        }
    }
}

static void iq4_xs_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_iq4_xs *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        uint8_t L[KILN_QK_K];
        float scales[8], max_scale = 0.0f, amax_scale = 0.0f;
        for (int h = 0; h < 8; h += KL) block_scales(x + 32 * h, scales + h);
        for (int s = 0; s < 8; s++) {
            if (fabsf(scales[s]) > amax_scale) amax_scale = fabsf(scales[s]), max_scale = scales[s];
        }
        /* 6-bit sub-block scales of the unrounded d, the codes again */
        const float d = -max_scale / 32, id = d ? 1 / d : 0.0f;
        y[b].d = kiln__f32_to_f16(d);
        y[b].scales_h = 0;
        memset(y[b].scales_l, 0, sizeof y[b].scales_l);
        for (int s = 0; s < 8; s++) {
            int l = kiln__nearest_int(id * scales[s]);
            l = l < -32 ? -32 : l > 31 ? 31 : l;
            const float dl = d * l, idl = dl ? 1 / dl : 0.0f;
            for (int j = 0; j < 32; j++) L[32 * s + j] = (uint8_t)best_index(idl * x[32 * s + j]);
            l += 32;
            y[b].scales_l[s / 2] |= (uint8_t)((l & 0x0f) << (4 * (s % 2)));
            y[b].scales_h |= (uint16_t)((l >> 4) << (2 * s));
        }
        pack(L, 8, y[b].qs);
    }
}

KILN_QINTS_CODERS(KILN_IQ4_NL, iq4_nl)
KILN_QINTS_CODERS(KILN_IQ4_XS, iq4_xs)

__attribute__((constructor)) static void register_iq4(void) {
    kiln__dtype_register(KILN_IQ4_NL, &(kiln_type_traits){.name = "iq4_nl", .size = sizeof(kiln_block_iq4_nl),
                                                          .blck = KILN_QK, .row_blck = KILN_QK, .get = get_iq4_nl,
                                                          .to_f32 = to_f32_iq4_nl, .from_f32 = iq4_nl_ref,
                                                          .dot_type = KILN_Q8_0});
    kiln__dtype_register(KILN_IQ4_XS, &(kiln_type_traits){.name = "iq4_xs", .size = sizeof(kiln_block_iq4_xs),
                                                          .blck = KILN_QK_K, .row_blck = KILN_QK_K, .get = get_iq4_xs,
                                                          .to_f32 = to_f32_iq4_xs, .from_f32 = iq4_xs_ref,
                                                          .dot_type = KILN_Q8_K});
}
