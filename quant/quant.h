/* quant.h — the quantized block dtypes' layouts and their scalar reference
 * quantize/dequantize (one file per format, quant/<type>.c), plus the
 * dequantize dispatcher that picks a SIMD variant (quant/dequant*.c).
 * Internal to kiln. The public description of each format is in
 * include/kiln.h (dtypes); the traits table (core/dtype.c) points here.
 *
 * Every function takes n elements starting on a block boundary, n a
 * multiple of the block. Quantization is always the scalar reference (it
 * runs once per weight); dequantization has SIMD variants that must equal
 * the reference bit for bit (tests/test_quant_types.c).
 *
 *     kiln__quantize_nf4_ref(x, blocks, 128);       // 2 blocks of 64
 *     kiln__dequantize_row(KILN_NF4, blocks, y, 128);
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
/* The 256 absmax values of one NF4_DQ super-block. */
void kiln__nf4_dq_absmax(const kiln_block_nf4_dq *b, float absmax[KILN_NF4_DQ_GROUP]);
float kiln__nf4_dq_block_absmax(const kiln_block_nf4_dq *b, int k);

/* Dequantize n elements of dtype t with the best kernel the CPU caps allow
 * (kiln__cpu_caps(); $KILN_SIMD=scalar gives the references). */
void kiln__dequantize_row(kiln_dtype t, const void *blocks, float *y, int64_t n);

/* SIMD variants (quant/dequant_avx2.c, quant/dequant_avx512.c,
 * quant/dequant_neon.c); the nf4
 * kernel decodes nb blocks of 32 code bytes (contiguous) with absmax[b]. */
typedef struct kiln__dequant_kernels {
    void (*q8_0)(const void *blocks, float *y, int64_t n);
    void (*q4_0)(const void *blocks, float *y, int64_t n);
    void (*nf4_codes)(const uint8_t *codes, const float *absmax, int64_t nb, float *y);
} kiln__dequant_kernels;
const kiln__dequant_kernels *kiln__dequant_kernels_avx2(void);   /* NULL when not built */
const kiln__dequant_kernels *kiln__dequant_kernels_avx512(void); /* NULL when not built */
const kiln__dequant_kernels *kiln__dequant_kernels_neon(void);   /* NULL when not built */

#endif
