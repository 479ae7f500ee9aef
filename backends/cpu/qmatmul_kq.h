/* qmatmul_kq.h — x86 kernels of the batch-1 products of ggml's K types and
 * IQ4_XS (qmatmul_ggml.h), against Q8_K activations: each equal to the
 * scalar reference kiln__qmm_dot_ggml_ref bit for bit. A block's integer
 * sums (isum over its sub-blocks, and the mins' summs) are exact in
 * int32 lanes in any order; each block then takes the reference's f32
 * operations in its order, (dx d) isum + (dx -dmin) summs, added to one
 * f32 sum block after block.
 *
 * The codes meet x as unsigned bytes (maddubs; IQ4_XS's signed values by
 * the sign trick, Q6_K's q + 32 with 32 sc times Q8_K's bsums taken off
 * per block), the int16 pairs are multiplied by the sub-block's scale and
 * summed into int32 lanes: madd + add on AVX2 and AVX-512 without VNNI,
 * one vpdpwssd on AVX-VNNI (VEX) and AVX512-VNNI (EVEX), one file per level
 * from one body (qmatmul_kq_x86.h; Q4_K, Q5_K and Q6_K on zmm from
 * AVX-512 up: qmatmul_kq_zmm.h).
 *
 *     kiln_qmm_dot_ggml *dot = kiln__qmm_kq_kernel(KILN_Q4_K);  // NULL: none for the caps in force
 */
#ifndef KILN_CPU_QMATMUL_KQ_H
#define KILN_CPU_QMATMUL_KQ_H

#include "qmatmul_ggml.h"

typedef struct kiln_kq_kernels {
    kiln_qmm_dot_ggml *q4_K, *q5_K, *q6_K, *iq4_xs, *q2_K, *q3_K;
    /* x to Q8_K, kiln__quantize_q8_K_ref's bytes */
    void (*quantize_q8_K)(const float *x, void *blocks, int64_t n);
    /* the same products for a few rows of x at once (qmatmul_ggml.h) */
    kiln_qmm_dot_ggml_rows *q4_K_rows, *q5_K_rows, *q6_K_rows, *iq4_xs_rows, *q2_K_rows, *q3_K_rows;
} kiln_kq_kernels;

/* The sets per level; NULL when not built. */
const kiln_kq_kernels *kiln__kq_kernels_avx2(void);
const kiln_kq_kernels *kiln__kq_kernels_avxvnni(void);
const kiln_kq_kernels *kiln__kq_kernels_avx512(void);
const kiln_kq_kernels *kiln__kq_kernels_avx512vnni(void);

/* The kernel the caps in force choose for weight dtype t; NULL where none
 * does (another dtype, or a CPU without AVX2). */
kiln_qmm_dot_ggml *kiln__qmm_kq_kernel(kiln_dtype t);
/* Its rows kernel (qmatmul_ggml.h), NULL where none. */
kiln_qmm_dot_ggml_rows *kiln__qmm_kq_rows_kernel(kiln_dtype t);

/* x [n] to Q8_K through the best quantizer the caps in force allow (the
 * CPU registers it as Q8_K's preferred coder, coders.c); that quantizer,
 * NULL for the scalar reference; NEON's (qmatmul_q8k_neon.c), NULL where
 * not built. */
void kiln__quantize_q8_K(const float *x, void *blocks, int64_t n);
kiln_from_f32_fn *kiln__quantize_q8_K_kernel(void);
kiln_from_f32_fn *kiln__quantize_q8_K_neon(void);

#endif
