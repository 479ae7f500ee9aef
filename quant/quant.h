/* quant.h — the quantized block dtypes' layouts and their scalar reference
 * quantize/dequantize (one file per format, quant/<type>.c). Internal to
 * kiln. The public description of each format is in include/kiln.h
 * (dtypes). Each format's file registers its dtype's row of the traits
 * table (core/internal.h: kiln__dtype_register) when the library loads,
 * with these references as its coders, so core knows no format.
 *
 * Every function takes n elements starting on a block boundary, n a
 * multiple of the block. Quantization is always the scalar reference (it
 * runs once per weight); dequantization has SIMD variants in the CPU
 * backend (backends/cpu/coders.h) that must equal the reference bit for
 * bit (tests/test_quant_types.c) and that the backend registers as the
 * dtypes' preferred row decoders.
 *
 *     kiln__quantize_nf4_ref(x, blocks, 128);       // 2 blocks of 64
 *     kiln__dequantize_nf4_ref(blocks, y, 128);
 */
#ifndef KILN_QUANT_H
#define KILN_QUANT_H

#include "internal.h"

#include <stdint.h>

#define KILN_QK8_0 32
#define KILN_QK4_0 32
#define KILN_QKNF4 64
#define KILN_NF4_DQ_GROUP 256                           /* NF4 blocks per super-block */
#define KILN_QKNF4_DQ (KILN_QKNF4 * KILN_NF4_DQ_GROUP) /* 16384 elements */

/* ggml's block_q8_0: x = d * qs[j]. */
typedef struct kiln_block_q8_0 {
    uint16_t d; /* f16 */
    int8_t qs[KILN_QK8_0];
} kiln_block_q8_0;

/* ggml's block_q4_0: element j in the low nibble of qs[j], element j + 16
 * in the high nibble; x = d * (q - 8). */
typedef struct kiln_block_q4_0 {
    uint16_t d; /* f16 */
    uint8_t qs[KILN_QK4_0 / 2];
} kiln_block_q4_0;

/* NF4: element 2j in the high nibble of codes[j], 2j + 1 in the low one;
 * x = absmax * kiln__nf4_table[code]. */
typedef struct kiln_block_nf4 {
    float absmax;
    uint8_t codes[KILN_QKNF4 / 2];
} kiln_block_nf4;

/* NF4 with double quantization: 256 NF4 blocks whose absmax values are
 * absmax_b = dynamic_map_signed[qabsmax[b]] * absmax2 + offset (f32
 * operations in that order, as bitsandbytes' dequantize_blockwise then
 * += offset), codes as NF4's, block b at codes[32 b]. */
typedef struct kiln_block_nf4_dq {
    float offset;  /* mean of the 256 absmax values */
    float absmax2; /* largest |absmax - offset| */
    uint8_t qabsmax[KILN_NF4_DQ_GROUP];
    uint8_t codes[KILN_QKNF4_DQ / 2];
} kiln_block_nf4_dq;

_Static_assert(sizeof(kiln_block_q8_0) == 34, "block_q8_0 is 34 bytes");
_Static_assert(sizeof(kiln_block_q4_0) == 18, "block_q4_0 is 18 bytes");
_Static_assert(sizeof(kiln_block_nf4) == 36, "NF4 block is 36 bytes");
_Static_assert(sizeof(kiln_block_nf4_dq) == 8456, "NF4_DQ super-block is 8456 bytes");

/* GQ<b>_<G> (the GPTQ layout, include/kiln.h): one group of G elements of
 * one row, x = scale * (q - zero), q in [0, 2^b - 1]. The codes come in
 * chunks of 32 elements (G / 32 chunks, 4 b bytes each, chunk c at
 * qs + 4 b c), so that one chunk decodes to 32 bytes in element order
 * with a few SIMD instructions and meets one int8 block of activations:
 *   b = 4: 16 bytes, element j in the low nibble of byte j, j + 16 in the
 *          high nibble (as Q4_0)
 *   b = 2: 8 bytes, element j (j < 8) in bits 0-1 of byte j, j + 8 in
 *          bits 2-3, j + 16 in bits 4-5, j + 24 in bits 6-7
 *   b = 3: the 2-bit plane of the low two bits (8 bytes, as b = 2), then
 *          a 1-bit plane of bit 2 (4 bytes: bit j % 8 of byte j / 8)
 * scale is an f16 (little-endian bytes), zero a byte; no padding. */
#define KILN_GQ_CHUNK 32
#define KILN_GQ_CHUNK_BYTES(bits) (4 * (bits))
#define KILN_GQ_HEAD 3
#define KILN_GQ_BLOCK_BYTES(bits, g) (KILN_GQ_HEAD + (g) / KILN_GQ_CHUNK * KILN_GQ_CHUNK_BYTES(bits))
#define KILN_GQ_BLOCK(bits, g)                                         \
    typedef struct kiln_block_gq##bits##_##g {                         \
        uint8_t d[2]; /* f16 scale */                                  \
        uint8_t zero;                                                  \
        uint8_t qs[(g) / KILN_GQ_CHUNK * KILN_GQ_CHUNK_BYTES(bits)];  \
    } kiln_block_gq##bits##_##g;                                       \
    _Static_assert(sizeof(kiln_block_gq##bits##_##g) == KILN_GQ_BLOCK_BYTES(bits, g), "GQ block size")
KILN_GQ_BLOCK(4, 32);
KILN_GQ_BLOCK(4, 64);
KILN_GQ_BLOCK(4, 128);
KILN_GQ_BLOCK(3, 32);
KILN_GQ_BLOCK(3, 64);
KILN_GQ_BLOCK(3, 128);
KILN_GQ_BLOCK(2, 32);
KILN_GQ_BLOCK(2, 64);
KILN_GQ_BLOCK(2, 128);
_Static_assert(sizeof(kiln_block_gq4_32) == 19 && sizeof(kiln_block_gq4_128) == 67, "GQ4 blocks");
_Static_assert(sizeof(kiln_block_gq3_32) == 15 && sizeof(kiln_block_gq3_128) == 51, "GQ3 blocks");
_Static_assert(sizeof(kiln_block_gq2_32) == 11 && sizeof(kiln_block_gq2_128) == 35, "GQ2 blocks");

/* ggml's other block types, byte for byte (ggml-common.h; GGUF types 3,
 * 6, 7, 9, 10-15, 20, 23): f16 fields are little-endian halves, no
 * padding. Blocks of 32 (Q4_1, Q5_0, Q5_1, Q8_1, IQ4_NL) or of 256, the
 * super-blocks of the K types (Q2_K..Q8_K, IQ4_XS). */
#define KILN_QK 32   /* the blocks of 32 */
#define KILN_QK_K 256 /* the K types' super-blocks */

typedef struct kiln_block_q4_1 { /* x = d q + m, q in [0, 15] */
    uint16_t d, m;
    uint8_t qs[KILN_QK / 2]; /* element j low nibble of qs[j], j + 16 high */
} kiln_block_q4_1;
typedef struct kiln_block_q5_0 { /* x = d (q - 16), q in [0, 31] */
    uint16_t d;
    uint8_t qh[4];           /* bit 4 of element j: bit j of the u32 */
    uint8_t qs[KILN_QK / 2]; /* the low four bits, as Q4_1's */
} kiln_block_q5_0;
typedef struct kiln_block_q5_1 { /* x = d q + m */
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[KILN_QK / 2];
} kiln_block_q5_1;
typedef struct kiln_block_q8_1 { /* activations of Q4_1 / Q5_1 products: x = d q */
    uint16_t d, s; /* s = f16(d * sum of q) */
    int8_t qs[KILN_QK];
} kiln_block_q8_1;
typedef struct kiln_block_q2_K { /* 16 sub-blocks of 16: x = d sc q - dmin m */
    uint8_t scales[KILN_QK_K / 16]; /* sc low nibble, m high nibble */
    uint8_t qs[KILN_QK_K / 4];
    uint16_t d, dmin;
} kiln_block_q2_K;
typedef struct kiln_block_q3_K { /* 16 sub-blocks of 16: x = d (sc - 32) q, q in [-4, 3] */
    uint8_t hmask[KILN_QK_K / 8];
    uint8_t qs[KILN_QK_K / 4];
    uint8_t scales[12]; /* 16 scales of 6 bits */
    uint16_t d;
} kiln_block_q3_K;
typedef struct kiln_block_q4_K { /* 8 sub-blocks of 32: x = d sc q - dmin m */
    uint16_t d, dmin;
    uint8_t scales[12]; /* 8 scales and 8 mins of 6 bits */
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_q4_K;
typedef struct kiln_block_q5_K {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[KILN_QK_K / 8];
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_q5_K;
typedef struct kiln_block_q6_K { /* 16 sub-blocks of 16: x = d sc (q - 32) */
    uint8_t ql[KILN_QK_K / 2];
    uint8_t qh[KILN_QK_K / 4];
    int8_t scales[KILN_QK_K / 16];
    uint16_t d;
} kiln_block_q6_K;
typedef struct kiln_block_q8_K { /* activations of the K products: x = d q */
    float d;
    int8_t qs[KILN_QK_K];
    int16_t bsums[KILN_QK_K / 16]; /* sums of q per 16 */
} kiln_block_q8_K;
typedef struct kiln_block_iq4_nl { /* x = d kiln__iq4nl_values[q] */
    uint16_t d;
    uint8_t qs[KILN_QK / 2];
} kiln_block_iq4_nl;
typedef struct kiln_block_iq4_xs { /* 8 sub-blocks of 32: x = d (ls - 32) values[q] */
    uint16_t d;
    uint16_t scales_h; /* the high 2 bits of the 8 six-bit ls */
    uint8_t scales_l[KILN_QK_K / 64];
    uint8_t qs[KILN_QK_K / 2];
} kiln_block_iq4_xs;
_Static_assert(sizeof(kiln_block_q4_1) == 20 && sizeof(kiln_block_q5_0) == 22 && sizeof(kiln_block_q5_1) == 24 &&
                   sizeof(kiln_block_q8_1) == 36, "ggml's blocks of 32");
_Static_assert(sizeof(kiln_block_q2_K) == 84 && sizeof(kiln_block_q3_K) == 110 && sizeof(kiln_block_q4_K) == 144 &&
                   sizeof(kiln_block_q5_K) == 176 && sizeof(kiln_block_q6_K) == 210 && sizeof(kiln_block_q8_K) == 292,
               "ggml's K blocks");
_Static_assert(sizeof(kiln_block_iq4_nl) == 18 && sizeof(kiln_block_iq4_xs) == 136, "ggml's IQ4 blocks");

/* IQ4_NL's and IQ4_XS's 16 code values (ggml's kvalues_iq4nl). */
extern const int8_t kiln__iq4nl_values[16];

/* One block of these types as integers: what their dequantization and the
 * CPU's integer dot products (ggml's vec_dot_*) share. Element e of the
 * block is x = (d sc[s]) q[e] (+ (dm mn[s]) where has_min), s = e / sub:
 * f32 products in that order, which is ggml's and gguf-py's for every
 * type (the mins' sign is in dm: -dmin for the K types, m for Q4_1 /
 * Q5_1, whose sc and mn are 1). */
typedef struct kiln_qints {
    int8_t q[KILN_QK_K];
    int16_t sc[KILN_QK_K / 16], mn[KILN_QK_K / 16];
    float d, dm;
    int n, sub; /* elements, sub-block length */
    bool has_min;
} kiln_qints;
/* Block i of dtype t (one of the types above) as integers;
 * false for another dtype. */
bool kiln__qints_unpack(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *out);
/* The same without the codes (q left as it was): a SIMD decoder's own. */
bool kiln__qints_scales(kiln_dtype t, const void *blocks, int64_t i, kiln_qints *out);
/* n elements (whole blocks) of such a dtype to f32, through its unpack. */
void kiln__qints_to_f32(kiln_dtype t, const void *blocks, float *y, int64_t n);
/* Element i of such a dtype. */
double kiln__qints_get(kiln_dtype t, const void *blocks, int64_t i);

/* A dtype's to_f32_<t> and get_<t> for its traits, through its unpack. */
#define KILN_QINTS_CODERS(T, t)                                                                           \
    static void to_f32_##t(const void *b, float *y, int64_t n) { kiln__qints_to_f32(T, b, y, n); }         \
    static double get_##t(const void *b, int64_t i) { return kiln__qints_get(T, b, i); }

/* Q4_K / Q5_K's 6-bit scale and min j (< 8) from their 12 bytes (ggml's
 * get_scale_min_k4). */
static inline void kiln__scale_min_k4(int j, const uint8_t *s, int *sc, int *m) {
    *sc = j < 4 ? s[j] & 63 : (s[j + 4] & 0x0f) | (s[j - 4] >> 6) << 4;
    *m = j < 4 ? s[j + 4] & 63 : (s[j + 4] >> 4) | (s[j] >> 6) << 4;
}

/* ggml's rounding helper: the nearest integer of |v| < 2^22, ties to even
 * (the K quantizers' nearest_int). */
static inline int kiln__nearest_int(float v) {
    float f = v + 12582912.0f;
    int32_t i;
    memcpy(&i, &f, 4);
    return (i & 0x007fffff) - 0x00400000;
}

/* The GQ dtypes: bits and group (0 for another dtype). */
int kiln__gq_bits(kiln_dtype t);
int kiln__gq_group(kiln_dtype t);
static inline bool kiln__is_gq(kiln_dtype t) { return kiln__gq_bits(t) != 0; }
/* The dtype of (bits, group), or KILN_DTYPE_COUNT. */
kiln_dtype kiln__gq_dtype(int bits, int group);
/* Code j (< 32) of one chunk. */
static inline int kiln__gq_chunk_code(const uint8_t *c, int bits, int j) {
    if (bits == 4) return j < 16 ? c[j] & 0x0f : c[j - 16] >> 4;
    int q = (c[j % 8] >> (2 * (j / 8))) & 3;
    return bits == 2 ? q : q | ((c[8 + j / 8] >> (j % 8)) & 1) << 2;
}
/* Pack 32 codes into one chunk (4 bits bytes). */
void kiln__gq_pack_chunk(const uint8_t *q, int bits, uint8_t *c);
/* The block's f16 scale as f32. */
static inline float kiln__gq_scale(const uint8_t *block) {
    return kiln__f16_to_f32((uint16_t)(block[0] | block[1] << 8));
}
/* The scalar references of every GQ dtype: n elements, whole blocks. */
void kiln__quantize_gq_ref(kiln_dtype t, const float *x, void *blocks, int64_t n);
void kiln__dequantize_gq_ref(kiln_dtype t, const void *blocks, float *y, int64_t n);

/* The 16 NF4 values, ascending (bitsandbytes' f32 constants), and the 15
 * midpoints between neighbours: code = number of midpoints m with x > m. */
extern const float kiln__nf4_table[16];
extern const float kiln__nf4_mids[15];
uint8_t kiln__nf4_code(float x);

/* Scalar references: x [n] <-> blocks. */
void kiln__quantize_q8_0_ref(const float *x, void *blocks, int64_t n);
void kiln__dequantize_q8_0_ref(const void *blocks, float *y, int64_t n);
void kiln__quantize_q4_0_ref(const float *x, void *blocks, int64_t n);
void kiln__dequantize_q4_0_ref(const void *blocks, float *y, int64_t n);
void kiln__quantize_nf4_ref(const float *x, void *blocks, int64_t n);
void kiln__dequantize_nf4_ref(const void *blocks, float *y, int64_t n);
void kiln__quantize_nf4_dq_ref(const float *x, void *blocks, int64_t n);
void kiln__dequantize_nf4_dq_ref(const void *blocks, float *y, int64_t n);
void kiln__quantize_q4_1_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q5_0_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q5_1_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q8_1_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q2_K_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q3_K_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q4_K_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q5_K_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q6_K_ref(const float *x, void *blocks, int64_t n);
void kiln__quantize_q8_K_ref(const float *x, void *blocks, int64_t n);
/* The 256 absmax values of one NF4_DQ super-block. */
void kiln__nf4_dq_absmax(const kiln_block_nf4_dq *b, float absmax[KILN_NF4_DQ_GROUP]);
float kiln__nf4_dq_block_absmax(const kiln_block_nf4_dq *b, int k);

#endif
