/* dfp16.c — dynamic fixed point (dfp.h): the exponent choice, the scalar
 * reference loops, and the KILN_DFP16 dtype's block quantize/dequantize
 * built on them, its row of the traits table registered at load. (The
 * SIMD loops are the CPU backend's: backends/cpu/coders.h.) */
#include "dfp.h"

#include <math.h>
#include <string.h>

int kiln__dfp_exponent(uint32_t amax_bits, int bits) {
    /* f32 exponent field E_max + 127 (0 for zero and subnormals: those get
     * the floor -127); amax < 2^(E_max + 1) so amax 2^-e < 2^(bits-1) */
    int e = (int)((amax_bits >> 23) & 0xffu) - 127 - (bits - 2);
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

float kiln__dfp_pow2(int e) { return ldexpf(1.0f, e); }

uint32_t kiln__dfp_seed_mix(uint64_t seed) {
    return kiln__dfp_hash((uint32_t)seed ^ kiln__dfp_hash((uint32_t)(seed >> 32) + 0x9e3779b9u));
}

static uint32_t amax_bits_scalar(const float *x, int64_t n) {
    uint32_t m = 0; /* integer max of |x| bits: NaN above inf, as on every path */
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, x + i, 4);
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    return m;
}

static void round_scalar(const float *x, int64_t n, float scale, int qmax, int16_t *q, bool sr, uint32_t mix,
                         uint32_t index0) {
    const float hi = (float)qmax;
    for (int64_t i = 0; i < n; i++) {
        float v = x[i] * scale, r;
        if (v != v) v = 0.0f;
        if (sr) {
            float f = floorf(v), u = (float)(kiln__dfp_hash(mix + index0 + (uint32_t)i) >> 8) * 0x1p-24f;
            r = u < v - f ? f + 1.0f : f;
        } else
            r = rintf(v); /* to nearest even (the default rounding mode) */
        r = r > hi ? hi : r < -hi ? -hi : r;
        q[i] = (int16_t)r;
    }
}

static const kiln__dfp_kernels scalar_kernels = {amax_bits_scalar, round_scalar};
const kiln__dfp_kernels *kiln__dfp_kernels_scalar(void) { return &scalar_kernels; }

void kiln__quantize_dfp16_with(const kiln__dfp_kernels *k, const float *x, void *blocks, int64_t n, bool sr,
                               uint64_t seed) {
    kiln_block_dfp16 *y = blocks;
    uint32_t mix = kiln__dfp_seed_mix(seed);
    for (int64_t b = 0; b < n / KILN_QKDFP16; b++, x += KILN_QKDFP16) {
        int e = kiln__dfp_exponent(k->amax_bits(x, KILN_QKDFP16), 16);
        y[b].e = (int16_t)e;
        k->round(x, KILN_QKDFP16, kiln__dfp_pow2(-e), 32767, y[b].q, sr, mix, (uint32_t)(b * KILN_QKDFP16));
    }
}

void kiln__quantize_dfp16_ref(const float *x, void *blocks, int64_t n) {
    kiln__quantize_dfp16_with(&scalar_kernels, x, blocks, n, false, 0);
}

/* q 2^e is exact in f32 (|q| < 2^15, e >= -127: a multiple of 2^-127),
 * so the compiler's vectorization of this loop is the SIMD path. */
void kiln__dequantize_dfp16(const void *blocks, float *y, int64_t n) {
    const kiln_block_dfp16 *x = blocks;
    for (int64_t b = 0; b < n / KILN_QKDFP16; b++, y += KILN_QKDFP16) {
        const float s = kiln__dfp_pow2(x[b].e);
        for (int j = 0; j < KILN_QKDFP16; j++) y[j] = (float)x[b].q[j] * s;
    }
}

static double get_dfp16(const void *b, int64_t i) {
    const kiln_block_dfp16 *x = (const kiln_block_dfp16 *)b + i / KILN_QKDFP16;
    return (double)x->q[i % KILN_QKDFP16] * kiln__dfp_pow2(x->e);
}

__attribute__((constructor)) static void register_dfp16(void) {
    kiln__dtype_register(KILN_DFP16, &(kiln_type_traits){.name = "dfp16", .size = sizeof(kiln_block_dfp16),
                                                         .blck = KILN_QKDFP16, .row_blck = KILN_QKDFP16,
                                                         .get = get_dfp16, .to_f32 = kiln__dequantize_dfp16,
                                                         .from_f32 = kiln__quantize_dfp16_ref});
}
