/* dfp.h — dynamic fixed point (DFP), Das et al. 2018: integers with a
 * shared power-of-two exponent, x = q * 2^e. Internal to kiln.
 *
 * Two granularities, each where it fits:
 *   - the KILN_DFP16 dtype (a storage format in the traits table): blocks of
 *     64 int16 with one exponent each (kiln_block_dfp16, 130 bytes, 16.25
 *     bits per value). kiln tensors have no per-tensor side fields, and the
 *     dtype table is made of self-contained blocks, so the shared exponent
 *     is per block; a block exponent is never worse than a tensor-wide one
 *     (its maximum is at most the tensor's) and costs 1.6% more bytes.
 *   - the DFP GEMM operands (backends/cpu/gemm_dfp.h, quantized by
 *     backends/cpu/coders.h's kiln__dfp_quantize): a whole matrix with
 *     one exponent, as in the paper: the partial sums of all k then share
 *     one scale, so folding them into f32 is one add, not a multiply by a
 *     per-row-and-column product of block scales.
 *
 * Exponent choice (the paper's E_s = E_max - (P - 2)): with amax the
 * largest |x| and E_max its binary exponent (2^E_max <= amax < 2^(E_max+1)),
 * e = E_max - (bits - 2), so amax * 2^-e lies in [2^(bits-2), 2^(bits-1)):
 * the largest value uses the top bit and fits; q = round(x * 2^-e) to
 * nearest even, clamped to +-(2^(bits-1) - 1) (a value rounding up to
 * 2^(bits-1) takes the largest code; -2^(bits-1) is never used, so the
 * range is symmetric). e is clamped to [-127, 127] so 2^-e is an f32
 * normal (a block whose amax is below 2^-113 gets e = -127 and small
 * codes). x * 2^-e is exact (a power of two), so the only error is the
 * rounding: |x - q 2^e| <= 2^(e-1) <= amax * 2^-(bits-1).
 * NaN becomes 0, +-inf the largest code; a block holding inf or NaN gets
 * e from the f32 exponent field 255.
 *
 * Stochastic rounding (option): q = floor(v) + (u < v - floor(v)) with
 * v = x * 2^-e and u = h / 2^24, h the top 24 bits of a 32-bit hash of
 * (seed, element index): reproducible, the same on every path and thread
 * count, and unbiased (E[q] = v up to 2^-24).
 *
 *     kiln_block_dfp16 b[2];
 *     kiln__quantize_dfp16_ref(x, b, 128);              // 2 blocks of 64
 *     kiln__quantize_dfp16_with(kiln__dfp_kernels_scalar(), x, b, 128, true, seed); // stochastic
 */
#ifndef KILN_QUANT_DFP_H
#define KILN_QUANT_DFP_H

#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

#define KILN_QKDFP16 64

typedef struct kiln_block_dfp16 {
    int16_t e; /* x = q * 2^e, e in [-127, 127] */
    int16_t q[KILN_QKDFP16];
} kiln_block_dfp16;
_Static_assert(sizeof(kiln_block_dfp16) == 130, "DFP16 block is 130 bytes");

/* The exponent for a largest magnitude given as f32 bits (sign cleared). */
int kiln__dfp_exponent(uint32_t amax_bits, int bits);
/* 2^e as f32 for e in [-127, 127] (2^-127 is subnormal, still exact). */
float kiln__dfp_pow2(int e);
/* The hash behind stochastic rounding: the seed folded once, then one
 * call per element index. */
uint32_t kiln__dfp_seed_mix(uint64_t seed);
static inline uint32_t kiln__dfp_hash(uint32_t x) { /* lowbias32 (Wellons) */
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* The two loops every path runs, scalar here (the reference) and SIMD in
 * the CPU backend (backends/cpu/coders.h; bit-identical): the largest |x|
 * as f32 bits, and the rounding of x * scale (scale = 2^-e) to codes in
 * [-qmax, qmax]; stochastic when sr, with hashes of mix + index0 + j. */
typedef struct kiln__dfp_kernels {
    uint32_t (*amax_bits)(const float *x, int64_t n);
    void (*round)(const float *x, int64_t n, float scale, int qmax, int16_t *q, bool sr, uint32_t mix,
                  uint32_t index0);
} kiln__dfp_kernels;
const kiln__dfp_kernels *kiln__dfp_kernels_scalar(void);

/* The dtype: n (a multiple of 64) values <-> blocks, the scalar
 * references; _with quantizes through other loops k, rounding
 * stochastically when sr (the CPU's SIMD loops: the same bits). */
void kiln__quantize_dfp16_ref(const float *x, void *blocks, int64_t n);
void kiln__dequantize_dfp16(const void *blocks, float *y, int64_t n);
void kiln__quantize_dfp16_with(const kiln__dfp_kernels *k, const float *x, void *blocks, int64_t n, bool sr,
                               uint64_t seed);

#endif
