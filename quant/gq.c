/* gq.c — the GQ<b>_<G> dtypes (the GPTQ layout as blocks, quant.h): the
 * chunk packing, the scalar reference quantize (RTN with GPTQ's reference
 * Quantizer, gptq_layout.c, per block) and dequantize. */
#include "quant.h"
#include "gptq.h"

#include <string.h>

static const struct {
    kiln_dtype t;
    int bits, group;
} gq_types[] = {
    {KILN_GQ4_32, 4, 32},  {KILN_GQ4_64, 4, 64},  {KILN_GQ4_128, 4, 128},
    {KILN_GQ3_32, 3, 32},  {KILN_GQ3_64, 3, 64},  {KILN_GQ3_128, 3, 128},
    {KILN_GQ2_32, 2, 32},  {KILN_GQ2_64, 2, 64},  {KILN_GQ2_128, 2, 128},
};
#define N_GQ (int)(sizeof gq_types / sizeof gq_types[0])

int kiln__gq_bits(kiln_dtype t) { return t >= KILN_GQ4_32 && t <= KILN_GQ2_128 ? gq_types[t - KILN_GQ4_32].bits : 0; }
int kiln__gq_group(kiln_dtype t) { return t >= KILN_GQ4_32 && t <= KILN_GQ2_128 ? gq_types[t - KILN_GQ4_32].group : 0; }

kiln_dtype kiln__gq_dtype(int bits, int group) {
    for (int i = 0; i < N_GQ; i++)
        if (gq_types[i].bits == bits && gq_types[i].group == group) return gq_types[i].t;
    return KILN_DTYPE_COUNT;
}

void kiln__gq_pack_chunk(const uint8_t *q, int bits, uint8_t *c) {
    memset(c, 0, (size_t)KILN_GQ_CHUNK_BYTES(bits));
    if (bits == 4) {
        for (int j = 0; j < 16; j++) c[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        return;
    }
    for (int j = 0; j < 32; j++) {
        c[j % 8] |= (uint8_t)((q[j] & 3) << (2 * (j / 8)));
        if (bits == 3) c[8 + j / 8] |= (uint8_t)(((q[j] >> 2) & 1) << (j % 8));
    }
}

/* The stored scale: f16, kept finite and nonzero (a zero scale would make
 * the block all zeros whatever its codes; an overflow, inf). */
static uint16_t scale_f16(float s) {
    uint16_t h = kiln__f32_to_f16(s);
    if ((h & 0x7fffu) == 0) return 0x0001u;       /* smallest subnormal */
    if ((h & 0x7fffu) >= 0x7c00u) return 0x7bffu; /* 65504 */
    return h;
}

void kiln__quantize_gq_ref(kiln_dtype t, const float *x, void *blocks, int64_t n) {
    const int bits = kiln__gq_bits(t), g = kiln__gq_group(t), maxq = (1 << bits) - 1;
    const size_t bsz = kiln__types[t].size;
    uint8_t *out = blocks;
    for (int64_t b = 0; b < n / g; b++, x += g, out += bsz) {
        float s;
        uint8_t z;
        kiln__gptq_fit(x, g, 1, bits, false, &s, &z);
        const uint16_t h = scale_f16(s);
        const float sh = kiln__f16_to_f32(h);
        out[0] = (uint8_t)(h & 0xff);
        out[1] = (uint8_t)(h >> 8);
        out[2] = z;
        for (int c = 0; c < g / KILN_GQ_CHUNK; c++) {
            uint8_t q[KILN_GQ_CHUNK];
            for (int j = 0; j < KILN_GQ_CHUNK; j++) q[j] = kiln__gptq_code(x[c * KILN_GQ_CHUNK + j], sh, z, maxq);
            kiln__gq_pack_chunk(q, bits, out + KILN_GQ_HEAD + c * KILN_GQ_CHUNK_BYTES(bits));
        }
    }
}

void kiln__dequantize_gq_ref(kiln_dtype t, const void *blocks, float *y, int64_t n) {
    const int bits = kiln__gq_bits(t), g = kiln__gq_group(t);
    const size_t bsz = kiln__types[t].size;
    const uint8_t *in = blocks;
    for (int64_t b = 0; b < n / g; b++, in += bsz) {
        const float s = kiln__gq_scale(in);
        const uint8_t z = in[2];
        for (int j = 0; j < g; j++) {
            const uint8_t *c = in + KILN_GQ_HEAD + (j / KILN_GQ_CHUNK) * KILN_GQ_CHUNK_BYTES(bits);
            *y++ = kiln__gptq_dequant((uint8_t)kiln__gq_chunk_code(c, bits, j % KILN_GQ_CHUNK), s, z);
        }
    }
}
