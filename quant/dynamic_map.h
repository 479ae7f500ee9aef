/* dynamic_map.h — block-wise 8-bit quantization with the dynamic maps of
 * bitsandbytes' 8-bit optimizers (Dettmers et al., "8-bit Optimizers via
 * Block-wise Quantization"); internal to kiln. A format: the 8-bit
 * optimizers' states (optim/opt8bit.c, optim/galore.c) and NF4_DQ's absmax
 * values (quant/nf4.c) are stored in it, and every backend's kernels read it.
 *
 * A state tensor of n f32 values is stored as n one-byte codes plus one f32
 * absmax per block of KILN__QBLOCK (256) consecutive elements (the last
 * block may be partial). A value is absmax * map[code], where map is one of
 * two 256-entry tables, sorted ascending, built as bitsandbytes'
 * create_dynamic_map(signed, max_exponent_bits=7, total_bits=8) builds them:
 * seven decades 10^-6 .. 10^0; decade i (0..6) holds the midpoints of the
 * 2^i (signed) or 2^(i+1) (unsigned) equal intervals of [0.1, 1], times
 * 10^(i-6). The signed map is +-those 127 values plus 0 and 1.0; the
 * unsigned map is those 254 values plus 0 and 1.0. Neither map has
 * duplicates. Note that the signed map is NOT symmetric: its smallest value
 * is -0.99296875 (the top midpoint), its largest 1.0; the unsigned map spans
 * exactly [0, 1]. The smallest magnitudes are 5.5e-7 (signed) and 3.25e-7
 * (unsigned). The first moment of Adam uses the signed map, the second
 * moment (non-negative) the unsigned one.
 *
 * The maps are computed in f32 the way torch does (linspace, midpoints and
 * the decade scale all rounded to f32), so they should match bitsandbytes
 * bit for bit (not checked against torch itself, which may fuse a
 * multiply-add in linspace); the tests check them against a
 * double-precision construction to 4e-7 relative.
 *
 * Encoding a value x (already divided by its block's absmax) picks the
 * nearest map entry exactly as bitsandbytes' CUDA kernels (dQuantize,
 * quantize_2D in csrc/kernels.cu) do: a 7-step binary search from index 127
 * ends on an even index p, then x is compared with the f32 midpoint
 * (a + b) * 0.5f of p and its neighbour on x's side. A value exactly on that
 * midpoint takes the even index p (round half to even index); the CPU
 * path of bitsandbytes (csrc/common.cpp, quantize_block) would keep the
 * lower index instead, but its optimizers run the CUDA rule. Values
 * beyond the ends clamp to code 0 or 255. NaN takes code 0.
 *
 * Block-wise quantization: absmax = max |x| over the block (NaN ignored, as
 * fmaxf does), codes = encode(x / absmax). A block with absmax 0 (zeros,
 * and NaNs, which absmax ignores) stores the code of 0.0 everywhere and
 * dequantizes to +0, never NaN (bitsandbytes divides 0/0 there and stores
 * code 0, which dequantizes to 0 * map[0], -0 or 0). A block holding +-Inf
 * has absmax Inf: its finite values encode as 0 and dequantize to
 * 0 * Inf = NaN; the Inf itself becomes Inf / Inf = NaN, code 0, and
 * dequantizes to map[0] * Inf (-Inf signed, NaN unsigned). The whole block
 * is poisoned, so a non-finite value in an optimizer state shows up rather
 * than vanishing; callers that want otherwise must screen their inputs.
 *
 *     float map[256];
 *     kiln__dynamic_map(true, map);                    // first moment
 *     int64_t nb = kiln__qblocks(n);                   // blocks of 256
 *     uint8_t *q = malloc(n);
 *     float *absmax = malloc(nb * sizeof(float));
 *     kiln__quantize_blockwise(m, n, map, q, absmax);  // f32 -> 8 bits
 *     ... later ...
 *     kiln__dequantize_blockwise(q, absmax, n, map, m); // 8 bits -> f32
 *
 * Per optimizer step: dequantize, update in f32, quantize again (which
 * takes a fresh absmax per block).
 */
#ifndef KILN_DYNAMIC_MAP_H
#define KILN_DYNAMIC_MAP_H

#include <stdbool.h>
#include <stdint.h>

#define KILN__QBLOCK 256

/* Blocks (and absmax entries) for n elements. */
static inline int64_t kiln__qblocks(int64_t n) { return (n + KILN__QBLOCK - 1) / KILN__QBLOCK; }

/* The signed or unsigned dynamic map, sorted ascending, no duplicates. */
void kiln__dynamic_map(bool is_signed, float out[256]);

/* The index of the map entry nearest x (bitsandbytes' search and tie rule,
 * see above). map must be one of the dynamic maps (or any sorted map). */
uint8_t kiln__dynamic_code(const float map[256], float x);

/* codes[0..n) and absmax[0..kiln__qblocks(n)) from x[0..n). Branch-free
 * count over the 255 midpoint thresholds: ~330 MB/s of f32 input on one
 * core, against ~75 MB/s for the branching search of kiln__dynamic_code. */
void kiln__quantize_blockwise(const float *x, int64_t n, const float map[256], uint8_t *codes, float *absmax);

/* The same quantization, ~2.4x faster again (~800 MB/s), through tables built
 * once per map (kiln__qcoder_init, ~1 ms, 33 KB): for |x| <= 1 the top 16
 * bits of x give a starting code from which `extra` (1 for both dynamic
 * maps) comparisons finish the count. Codes are identical to
 * kiln__quantize_blockwise's. An optimizer keeps one coder per map. */
#define KILN__QKEYS 16257 /* (bits of 1.0f >> 16) + 1: keys of |x| <= 1 */
typedef struct kiln__qcoder {
    float map[256];
    float thr[256];                   /* code(x) = #{k < 255 : x >= thr[k]} */
    uint8_t start[2][KILN__QKEYS];    /* by sign bit and (|x| bits) >> 16 */
    int extra;
    uint8_t zero_code;
} kiln__qcoder;
void kiln__qcoder_init(kiln__qcoder *c, const float map[256]);
void kiln__quantize_blockwise_coder(const float *x, int64_t n, const kiln__qcoder *c, uint8_t *codes,
                                    float *absmax);
/* The code of one value x (already divided by its absmax) through the coder:
 * kiln__dynamic_code's answer, for the SIMD kernels' out-of-table lanes. */
uint8_t kiln__qcoder_code(const kiln__qcoder *c, float x);

/* out[i] = map[codes[i]] * absmax[i / 256] for i in [0, n). */
void kiln__dequantize_blockwise(const uint8_t *codes, const float *absmax, int64_t n, const float map[256],
                                float *out);

#endif
