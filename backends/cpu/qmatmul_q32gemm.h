/* qmatmul_q32gemm.h — the batched (prompt) path of KILN_OP_QMATMUL for
 * ggml's blocks of 32 that have no GEMM of their own (Q4_1, Q5_0, Q5_1,
 * IQ4_NL): integer products equal to the batch-1 products
 * (qmatmul_ggml.h) row by row, bit for bit, through the K types' driver
 * (qmatmul_kgemm.h: panels of KILN_KGEMM_NC rows of W, each block decoded
 * once per call, tiles of up to KILN_KGEMM_MR rows of x).
 *
 * Each row of x is quantized to the weight's partner as batch 1 does
 * (Q8_1 for Q4_1 and Q5_1, Q8_0 for Q5_0 and IQ4_NL: the same reference
 * coder, block by block) and held as kiln_q32x blocks. Per row i, column
 * j and block b the tile computes the reference's integers and f32
 * operations:
 *
 *     u = q + off >= 0  (off: 16 for Q5_0, 128 for IQ4_NL, else 0)
 *     isum = (sum of u * xq) - off * (sum of xq)       exact in int32
 *     Q8_1:  term = (d dx) * (float)isum + m s
 *     Q8_0:  term = (d dx) * (float)isum
 *
 * and sums the terms in the reference's order: block b into lane b % 8
 * while whole groups of 8 last, the lanes as kiln__qmm_ggml_lanes_sum,
 * then the blocks left over in order. The tile runs one lane at a time
 * (blocks l, l + 8, ...), so that each row holds one f32 sum, not eight.
 *
 * The panel's layout, per block (KILN_Q32GEMM_BLOCK bytes), NC = 16
 * columns side by side in each 64-byte row (one zmm):
 *     u  [8 quads][NC][4]  uint8   quad q: elements 4q .. 4q + 3
 *     d  [NC], m [NC]      f32     (m: zeros without a min)
 * Padding columns are zeros (their outputs are not stored).
 *
 * The tiles: AVX512-VNNI's and AVX-512's on zmm (16 columns, up to 8
 * rows), AVX-VNNI's and AVX2's on ymm (each half of the panel in turn, 4
 * rows a pass); AVX-512's and AVX2's vpmaddubsw is exact for codes up to
 * 128, so IQ4_NL stays off them;
 * NEON's and NEON-dotprod's on a panel of signed codes of their own
 * (qmatmul_kgemm_neon.h). */
#ifndef KILN_CPU_QMATMUL_Q32GEMM_H
#define KILN_CPU_QMATMUL_Q32GEMM_H

#include "qmatmul_kgemm.h"

#define KILN_Q32GEMM_BLOCK (KILN_KGEMM_NC * (32 + 2 * 4))

/* A block of a row of x as the tiles read it. */
typedef struct kiln_q32x {
    int8_t qs[32];
    float d, s;  /* the partner's d and (Q8_1) s as f32; s = 0 for Q8_0 */
    int32_t off; /* off times the sum of qs */
    int32_t pad;
} kiln_q32x;

/* Whether t is one of the blocks of 32 here. */
bool kiln__q32gemm_type(kiln_dtype t);

/* Row x (k elements, whole blocks) for weight dtype t into k / 32 blocks. */
void kiln__q32gemm_quantize(kiln_dtype t, const float *x, kiln_q32x *xa, int64_t k);

/* each NULL when not built */
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512vnni(void);
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avxvnni(void);
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx512(void);
const kiln_kgemm_kernels *kiln__q32gemm_kernels_avx2(void);
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neondot(void);
const kiln_kgemm_kernels *kiln__q32gemm_kernels_neon(void);

#endif
