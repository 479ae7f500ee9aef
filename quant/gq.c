/* gq.c — the GQ<b>_<G> dtypes (the GPTQ layout as blocks, quant.h): the
 * chunk packing, the scalar reference quantize (RTN with GPTQ's reference
 * Quantizer, gptq_layout.c, per block) and dequantize, and their rows in
 * the dtype table. */
#include "quant.h"
#include "gptq.h"

#include <string.h>

/* The nine dtypes: X(bits, group) for each, in the enum's order. */
#define GQ_DTYPES(X) X(4, 32) X(4, 64) X(4, 128) X(3, 32) X(3, 64) X(3, 128) X(2, 32) X(2, 64) X(2, 128)

static const struct {
    kiln_dtype t;
    int bits, group;
} gq_types[] = {
#define GQ_ROW(b, g) {KILN_GQ##b##_##g, b, g},
    GQ_DTYPES(GQ_ROW)
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
    const size_t bsz = KILN_GQ_BLOCK_BYTES(bits, g);
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
    const size_t bsz = KILN_GQ_BLOCK_BYTES(bits, g);
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

/* ---- the dtypes: element i decoded alone, rows ---- */

static double get_gq(kiln_dtype t, const void *b, int64_t i) {
    const int bits = kiln__gq_bits(t), g = kiln__gq_group(t);
    const uint8_t *x = (const uint8_t *)b + (size_t)(i / g) * KILN_GQ_BLOCK_BYTES(bits, g);
    const int j = (int)(i % g);
    const int q = kiln__gq_chunk_code(x + KILN_GQ_HEAD + j / KILN_GQ_CHUNK * KILN_GQ_CHUNK_BYTES(bits), bits,
                                      j % KILN_GQ_CHUNK);
    return (float)(q - x[2]) * kiln__gq_scale(x);
}

#define GQ_CODERS(b, g)                                                                                        \
    static double get_gq##b##_##g(const void *x, int64_t i) { return get_gq(KILN_GQ##b##_##g, x, i); }        \
    static void to_f32_gq##b##_##g(const void *x, float *y, int64_t n) {                                      \
        kiln__dequantize_gq_ref(KILN_GQ##b##_##g, x, y, n);                                                   \
    }                                                                                                          \
    static void from_f32_gq##b##_##g(const float *x, void *y, int64_t n) {                                    \
        kiln__quantize_gq_ref(KILN_GQ##b##_##g, x, y, n);                                                     \
    }
GQ_DTYPES(GQ_CODERS)

__attribute__((constructor)) static void register_gq(void) {
#define GQ_REGISTER(b, g)                                                                                      \
    kiln__dtype_register(KILN_GQ##b##_##g,                                                                     \
                         &(kiln_type_traits){.name = "gq" #b "_" #g, .size = sizeof(kiln_block_gq##b##_##g),  \
                                             .blck = g, .row_blck = g, .get = get_gq##b##_##g,               \
                                             .to_f32 = to_f32_gq##b##_##g, .from_f32 = from_f32_gq##b##_##g,  \
                                             .dot_type = KILN_Q8_0});
    GQ_DTYPES(GQ_REGISTER)
}
