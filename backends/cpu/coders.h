/* coders.h — the CPU backend's SIMD variants of the formats' coders
 * (formats and scalar references in quant/), and the dispatch that picks
 * them by the caps in force (cpu_features.h; $KILN_SIMD=scalar gives the
 * references). Every variant equals its reference bit for bit.
 *
 * The CPU lends these to the rest of the library through the dtype table:
 * when the library loads it registers its row dequantizers (and DFP16's
 * and Q8_K's quantizers, and on ARM Q8_0's and Q8_1's) as the preferred
 * coders of their dtypes (kiln__dtype_prefer_coders), so kiln_tensor_get_f32 and the file
 * loaders' conversions run them without naming the CPU.
 *
 *     kiln__dequantize_row(KILN_NF4, blocks, y, 128);     // 2 blocks of 64
 *     int e, qmax;                                         // one exponent, 14 bits:
 *     kiln__dfp_quantize(x, n, 14, q, &e, &qmax, false, 0);
 */
#ifndef KILN_CPU_CODERS_H
#define KILN_CPU_CODERS_H

#include "../../quant/quant.h"
#include "../../quant/dfp.h"

/* Dequantize n elements of dtype t (whole blocks from a block boundary)
 * with the best kernel the caps allow; a plain type through its traits. */
void kiln__dequantize_row(kiln_dtype t, const void *blocks, float *y, int64_t n);

/* Q8_0, Q4_0 and NF4 (dequant_avx2.c, dequant_avx512.c, dequant_neon.c);
 * the nf4 kernel decodes nb blocks of 32 code bytes (contiguous) with
 * absmax[b]. NULL when not built. */
typedef struct kiln__dequant_kernels {
    void (*q8_0)(const void *blocks, float *y, int64_t n);
    void (*q4_0)(const void *blocks, float *y, int64_t n);
    void (*nf4_codes)(const uint8_t *codes, const float *absmax, int64_t nb, float *y);
} kiln__dequant_kernels;
const kiln__dequant_kernels *kiln__dequant_kernels_avx2(void);
const kiln__dequant_kernels *kiln__dequant_kernels_avx512(void);
const kiln__dequant_kernels *kiln__dequant_kernels_neon(void);

/* nb GQ blocks of (bits, group) (dequant_gq_*.c); NULL when not built. */
typedef void kiln__gq_dequant_fn(const void *blocks, int bits, int group, float *y, int64_t nb);
kiln__gq_dequant_fn *kiln__gq_dequant_avx2(void);
kiln__gq_dequant_fn *kiln__gq_dequant_avx512(void);
kiln__gq_dequant_fn *kiln__gq_dequant_neon(void);

/* x to Q8_0 / Q8_1 (the activations of the blocks of 32's products) on
 * NEON, the references' bytes (qmatmul_q8_neon.c); NULL where not built. */
kiln_from_f32_fn *kiln__quantize_q8_0_neon(void);
kiln_from_f32_fn *kiln__quantize_q8_1_neon(void);

/* DFP's two loops (quant/dfp.h) in dfp_avx2.c, dfp_avx512.c (NULL when
 * not built), and the best of them and the scalar ones the caps allow. */
const kiln__dfp_kernels *kiln__dfp_kernels_avx2(void);
const kiln__dfp_kernels *kiln__dfp_kernels_avx512(void);
const kiln__dfp_kernels *kiln__dfp_kernels_best(void);

/* DFP with one exponent for all n values (the DFP GEMM's operands,
 * gemm_dfp.h), through the best loops, threaded over chunks of 64 Ki:
 * codes within +-(2^(bits-1) - 1), bits in [2, 16]; *e the exponent, *qmax
 * a bound on every |q| (ceil(amax 2^-e) or the limit; the GEMM's overflow
 * bound); stochastic rounding when sr (quant/dfp.h). */
void kiln__dfp_quantize(const float *x, int64_t n, int bits, int16_t *q, int *e, int *qmax, bool sr,
                        uint64_t seed);

#endif
