/* dtype.c — the dtype traits table: size, name and conversions of each
 * element type, and of the quantized block types (quant/quant.h). */
#include "internal.h"
#include "../quant/quant.h"
#include "../quant/dfp.h"

#include <math.h>

/* IEEE half: round to nearest even, overflow to inf, subnormals kept. */
uint16_t kiln__f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u, e = (x >> 23) & 0xffu, m = x & 0x7fffffu;
    if (e == 0xff) return (uint16_t)(sign | 0x7c00u | (m ? 0x200u : 0));
    int32_t he = (int32_t)e - 127 + 15;
    if (he >= 31) return (uint16_t)(sign | 0x7c00u);
    if (he <= 0) {
        if (he < -10) return (uint16_t)sign;
        m |= 0x800000u;
        uint32_t shift = (uint32_t)(14 - he);
        uint32_t hm = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (hm & 1))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t hm = m >> 13, rem = m & 0x1fffu;
    uint32_t h = sign | ((uint32_t)he << 10) | hm;
    if (rem > 0x1000u || (rem == 0x1000u && (hm & 1))) h++; /* may carry into the exponent: correct */
    return (uint16_t)h;
}

float kiln__f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu, x;
    if (e == 0x1f) x = sign | 0x7f800000u | (m << 13);
    else if (e) x = sign | ((e - 15 + 127) << 23) | (m << 13);
    else if (!m) x = sign;
    else { /* subnormal: normalize */
        e = 127 - 15 + 1;
        while (!(m & 0x400u)) { m <<= 1; e--; }
        x = sign | (e << 23) | ((m & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &x, 4);
    return f;
}

uint16_t kiln__f32_to_bf16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 0x40u); /* quiet NaN */
    x += 0x7fffu + ((x >> 16) & 1u);
    return (uint16_t)(x >> 16);
}

float kiln__bf16_to_f32(uint16_t h) {
    uint32_t x = (uint32_t)h << 16;
    float f;
    memcpy(&f, &x, 4);
    return f;
}

static double get_f32(const void *b, int64_t i) { return ((const float *)b)[i]; }
static double get_f64(const void *b, int64_t i) { return ((const double *)b)[i]; }
static double get_f16(const void *b, int64_t i) { return kiln__f16_to_f32(((const uint16_t *)b)[i]); }
static double get_bf16(const void *b, int64_t i) { return kiln__bf16_to_f32(((const uint16_t *)b)[i]); }
static double get_i32(const void *b, int64_t i) { return ((const int32_t *)b)[i]; }

static void set_f32(void *b, int64_t i, double v) { ((float *)b)[i] = (float)v; }
static void set_f64(void *b, int64_t i, double v) { ((double *)b)[i] = v; }
static void set_f16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = kiln__f32_to_f16((float)v); }
static void set_bf16(void *b, int64_t i, double v) { ((uint16_t *)b)[i] = kiln__f32_to_bf16((float)v); }
/* Saturating round-to-nearest; NaN becomes 0. */
static void set_i32(void *b, int64_t i, double v) {
    ((int32_t *)b)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)lrint(v);
}

#define ROW_CONVERTERS(name, T, to, from)                                                                  \
    static void name##_to_f32(const void *s, float *d, int64_t n) {                                        \
        for (int64_t i = 0; i < n; i++) d[i] = to(((const T *)s)[i]);                                       \
    }                                                                                                      \
    static void name##_from_f32(const float *s, void *d, int64_t n) {                                      \
        for (int64_t i = 0; i < n; i++) ((T *)d)[i] = from(s[i]);                                          \
    }
#define ID(x) (x)
#define TO_F64(x) ((double)(x))
#define TO_F32(x) ((float)(x))
static int32_t f32_to_i32(float v) { int32_t r; set_i32(&r, 0, v); return r; }
ROW_CONVERTERS(f32, float, ID, ID)
ROW_CONVERTERS(f64, double, TO_F32, TO_F64)
ROW_CONVERTERS(f16, uint16_t, kiln__f16_to_f32, kiln__f32_to_f16)
ROW_CONVERTERS(bf16, uint16_t, kiln__bf16_to_f32, kiln__f32_to_bf16)
ROW_CONVERTERS(i32, int32_t, TO_F32, f32_to_i32)

/* ---- quantized block types (layouts and algorithms in quant/) ---- */

/* Element i (counted from a block boundary) of each format, decoded alone. */
static double get_q8_0(const void *b, int64_t i) {
    const kiln_block_q8_0 *x = (const kiln_block_q8_0 *)b + i / KILN_QK8_0;
    return kiln__f16_to_f32(x->d) * (float)x->qs[i % KILN_QK8_0];
}
static double get_q4_0(const void *b, int64_t i) {
    const kiln_block_q4_0 *x = (const kiln_block_q4_0 *)b + i / KILN_QK4_0;
    int j = (int)(i % KILN_QK4_0), h = KILN_QK4_0 / 2;
    int q = j < h ? x->qs[j] & 0x0f : x->qs[j - h] >> 4;
    return (float)(q - 8) * kiln__f16_to_f32(x->d);
}
static int nf4_nibble(const uint8_t *codes, int j) { return j % 2 ? codes[j / 2] & 0x0f : codes[j / 2] >> 4; }
static double get_nf4(const void *b, int64_t i) {
    const kiln_block_nf4 *x = (const kiln_block_nf4 *)b + i / KILN_QKNF4;
    return kiln__nf4_table[nf4_nibble(x->codes, (int)(i % KILN_QKNF4))] * x->absmax;
}
static double get_nf4_dq(const void *b, int64_t i) {
    const kiln_block_nf4_dq *x = (const kiln_block_nf4_dq *)b + i / KILN_QKNF4_DQ;
    int j = (int)(i % KILN_QKNF4_DQ);
    return kiln__nf4_table[nf4_nibble(x->codes, j)] * kiln__nf4_dq_block_absmax(x, j / KILN_QKNF4);
}
static void dq_q8_0(const void *s, float *d, int64_t n) { kiln__dequantize_row(KILN_Q8_0, s, d, n); }
static void dq_q4_0(const void *s, float *d, int64_t n) { kiln__dequantize_row(KILN_Q4_0, s, d, n); }
static void dq_nf4(const void *s, float *d, int64_t n) { kiln__dequantize_row(KILN_NF4, s, d, n); }
static void dq_nf4_dq(const void *s, float *d, int64_t n) { kiln__dequantize_row(KILN_NF4_DQ, s, d, n); }

/* GQ<b>_<G>: element i decoded alone, rows through the dispatcher, and
 * the reference quantizer (quant/gq.c). */
static double get_gq(kiln_dtype t, const void *b, int64_t i) {
    const int bits = kiln__gq_bits(t), g = kiln__gq_group(t);
    const uint8_t *x = (const uint8_t *)b + (size_t)(i / g) * kiln__types[t].size;
    const int j = (int)(i % g);
    const int q = kiln__gq_chunk_code(x + KILN_GQ_HEAD + j / KILN_GQ_CHUNK * KILN_GQ_CHUNK_BYTES(bits), bits,
                                      j % KILN_GQ_CHUNK);
    return (float)(q - x[2]) * kiln__gq_scale(x);
}
#define GQ_TRAITS(T, t)                                                                                    \
    static double get_##t(const void *b, int64_t i) { return get_gq(T, b, i); }                          \
    static void dq_##t(const void *s, float *d, int64_t n) { kiln__dequantize_row(T, s, d, n); }          \
    static void q_##t(const float *s, void *d, int64_t n) { kiln__quantize_gq_ref(T, s, d, n); }
GQ_TRAITS(KILN_GQ4_32, gq4_32)
GQ_TRAITS(KILN_GQ4_64, gq4_64)
GQ_TRAITS(KILN_GQ4_128, gq4_128)
GQ_TRAITS(KILN_GQ3_32, gq3_32)
GQ_TRAITS(KILN_GQ3_64, gq3_64)
GQ_TRAITS(KILN_GQ3_128, gq3_128)
GQ_TRAITS(KILN_GQ2_32, gq2_32)
GQ_TRAITS(KILN_GQ2_64, gq2_64)
GQ_TRAITS(KILN_GQ2_128, gq2_128)
static double get_dfp16(const void *b, int64_t i) {
    const kiln_block_dfp16 *x = (const kiln_block_dfp16 *)b + i / KILN_QKDFP16;
    return (double)x->q[i % KILN_QKDFP16] * kiln__dfp_pow2(x->e);
}
static void dq_dfp16(const void *s, float *d, int64_t n) { kiln__dequantize_dfp16(s, d, n); }

#define PLAIN(nm, sz, fl, t) {nm, sz, fl, get_##t, set_##t, t##_to_f32, t##_from_f32, 1, 1}
#define QUANT(nm, T, blk, rowblk, t, q) {nm, sizeof(T), false, get_##t, NULL, dq_##t, q, blk, rowblk}

const kiln_type_traits kiln__types[KILN_DTYPE_COUNT] = {
    [KILN_F32] = PLAIN("f32", 4, true, f32),
    [KILN_F64] = PLAIN("f64", 8, true, f64),
    [KILN_F16] = PLAIN("f16", 2, true, f16),
    [KILN_BF16] = PLAIN("bf16", 2, true, bf16),
    [KILN_I32] = PLAIN("i32", 4, false, i32),
    [KILN_Q8_0] = QUANT("q8_0", kiln_block_q8_0, KILN_QK8_0, KILN_QK8_0, q8_0, kiln__quantize_q8_0_ref),
    [KILN_Q4_0] = QUANT("q4_0", kiln_block_q4_0, KILN_QK4_0, KILN_QK4_0, q4_0, kiln__quantize_q4_0_ref),
    [KILN_NF4] = QUANT("nf4", kiln_block_nf4, KILN_QKNF4, KILN_QKNF4, nf4, kiln__quantize_nf4_ref),
    [KILN_NF4_DQ] = QUANT("nf4_dq", kiln_block_nf4_dq, KILN_QKNF4_DQ, KILN_QKNF4, nf4_dq, kiln__quantize_nf4_dq_ref),
#define GQ(b, g) [KILN_GQ##b##_##g] = QUANT("gq" #b "_" #g, kiln_block_gq##b##_##g, g, g, gq##b##_##g, q_gq##b##_##g)
    GQ(4, 32), GQ(4, 64), GQ(4, 128),
    GQ(3, 32), GQ(3, 64), GQ(3, 128),
    GQ(2, 32), GQ(2, 64), GQ(2, 128),
#undef GQ
    [KILN_DFP16] = QUANT("dfp16", kiln_block_dfp16, KILN_QKDFP16, KILN_QKDFP16, dfp16, kiln__quantize_dfp16),
};

const char *kiln_dtype_name(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].name : "?"; }
size_t kiln_dtype_size(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].size : 0; }
int64_t kiln_dtype_block(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT ? kiln__types[t].blck : 0; }
bool kiln_dtype_is_quantized(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT && kiln__is_quant(t); }

bool kiln__quant_shape_ok(const char *who, kiln_dtype t, int ndim, const int64_t *shape) {
    char buf[96];
    const kiln_type_traits *tr = &kiln__types[t];
    if (ndim < 1 || shape[ndim - 1] % tr->row_blck || kiln__numel(ndim, shape) % tr->blck) {
        if (tr->row_blck == tr->blck)
            kiln__err(KILN_ERR_SHAPE, "%s: a %s tensor needs its last dimension a multiple of %lld, not %s", who,
                      tr->name, (long long)tr->blck, kiln__dims_str(ndim, shape, buf));
        else
            kiln__err(KILN_ERR_SHAPE,
                      "%s: a %s tensor needs its last dimension a multiple of %lld and its size a multiple of %lld, "
                      "not %s", who, tr->name, (long long)tr->row_blck, (long long)tr->blck,
                      kiln__dims_str(ndim, shape, buf));
        return false;
    }
    return true;
}
