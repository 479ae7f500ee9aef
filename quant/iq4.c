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
#include "quant.h"

#include <math.h>

#define NTRY 7

/* The index of the value nearest x (the upper one on a tie). */
static int best_index(float x) {
    const int8_t *v = kiln__iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/* The weighted fit of block xb [32] to the values at reciprocal scale id:
 * sum w q x and sum w q^2 (codes into L when not NULL). */
static void fit(const float *xb, float id, uint8_t *L, float *sumqx, float *sumq2) {
    *sumqx = *sumq2 = 0.0f;
    for (int j = 0; j < 32; j++) {
        const int l = best_index(id * xb[j]);
        const float q = kiln__iq4nl_values[l], w = xb[j] * xb[j];
        if (L) L[j] = (uint8_t)l;
        *sumqx += w * q * xb[j];
        *sumq2 += w * q * q;
    }
}

/* Block xb's scale: the least-squares one of the best of 2 NTRY + 1
 * trials; 0 for a block of zeros (its codes then left as they are). */
static float block_scale(const float *xb, uint8_t *L) {
    float amax = 0.0f, max = 0.0f, sumqx, sumq2;
    for (int j = 0; j < 32; j++)
        if (fabsf(xb[j]) > amax) amax = fabsf(xb[j]), max = xb[j];
    if (amax < 1e-15f) return 0.0f;
    fit(xb, 1 / (-max / kiln__iq4nl_values[0]), L, &sumqx, &sumq2);
    float d = sumqx / sumq2, best = d * sumqx;
    for (int itry = -NTRY; itry <= NTRY; itry++) {
        fit(xb, (itry + kiln__iq4nl_values[0]) / max, NULL, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) d = sumqx / sumq2, best = d * sumqx;
    }
    return d;
}

/* codes L [32 n] into 16 n bytes: element j low nibble, j + 16 high */
static void pack(const uint8_t *L, int n, uint8_t *qs) {
    for (int s = 0; s < n; s++)
        for (int j = 0; j < 16; j++) qs[16 * s + j] = (uint8_t)(L[32 * s + j] | L[32 * s + j + 16] << 4);
}

static void iq4_nl_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_iq4_nl *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK; b++, x += KILN_QK) {
        uint8_t L[KILN_QK];
        const float d = block_scale(x, L), id = d ? 1 / d : 0.0f;
        y[b].d = kiln__f32_to_f16(d);
        for (int j = 0; j < KILN_QK; j++) L[j] = (uint8_t)best_index(id * x[j]);
        pack(L, 1, y[b].qs);
    }
}

static void iq4_xs_ref(const float *x, void *blocks, int64_t n) {
    kiln_block_iq4_xs *y = blocks;
    for (int64_t b = 0; b < n / KILN_QK_K; b++, x += KILN_QK_K) {
        uint8_t L[KILN_QK_K];
        float scales[8], max_scale = 0.0f, amax_scale = 0.0f;
        for (int s = 0; s < 8; s++) {
            scales[s] = block_scale(x + 32 * s, L + 32 * s);
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
