/* qmatmul_ggml.h — KILN_OP_QMATMUL's batch-1 products on the CPU for
 * ggml's block types beyond Q8_0 / Q4_0 (Q4_1, Q5_0, Q5_1, Q8_1 and the
 * types that follow them in kiln_dtype): as ggml's vec_dot_*, each row of
 * x is quantized to the weight's activation dtype (kiln_dtype_dot_type:
 * Q8_0, Q8_1 or Q8_K, with the formats' scalar references, quant/) and
 * each block's product is integer:
 *
 *     isum = sum over sub-blocks s of sc[s] * (sum of q[e] * xq[e] in s)
 *     Q8_0:  y += (d * dx) * isum
 *     Q8_1:  y += (d * dx) * isum + m * sx                (Q4_1, Q5_1)
 *     Q8_K:  y += (dx * d) * isum + (dx * -dmin) * summs  (summs = sum of
 *            mn[s] times x's sum over s, from Q8_K's bsums)
 *
 * with the weight block's integers from its unpack (quant.h kiln_qints),
 * f32 operations in that order, blocks in order into one f32 sum: the
 * scalar reference, kiln__qmm_dot_ggml_ref. The isum are exact int32.
 * The blocks of 32 (Q4_1, Q5_0, Q5_1, IQ4_NL: kiln__qmm_ggml_lanes) sum
 * in an order 8-wide SIMD keeps: while whole groups of 8 blocks last,
 * block i's term goes into lane i % 8; the lanes are then summed as
 * kiln__qmm_ggml_lanes_sum does, and the blocks left over (nb % 8) are
 * added to that in order. A chain of one f32 add per block would hold a
 * kernel to the adder's latency: about 40% of their streaming speed.
 * Rows of x from kiln__qmm_batched_min(t) (qmatmul.h) take the integer
 * GEMM of qmatmul_kgemm.h where it runs t, else the panel path of
 * qmatmul.c (dequantized W, f32 GEMM).
 *
 * Per-ISA kernels, each equal to the reference bit for bit, go into the
 * dispatch of qmatmul_ggml.c (kiln__qmm_ggml_kernel) beside it, one slot
 * per dtype: Q4_K, Q5_K, Q6_K, Q3_K, Q2_K and IQ4_XS on x86
 * (qmatmul_kq.h); Q4_1, Q5_0, Q5_1 and IQ4_NL on AVX2, AVX-VNNI and
 * AVX512-VNNI (qmatmul_q32_*.c); every type on NEON and NEON-dotprod
 * (qmatmul_ggml_neon*.c). Their rows kernels (below) take a few rows of x
 * at once: the K types and IQ4_XS on x86 (qmatmul_kq.h), the blocks of 32
 * from AVX2 up, every type on NEON and NEON-dotprod.
 *
 *     if (kiln__qmm_ggml_handles(t)) s = kiln__qmatmul_ggml_cpu(t, 1, n, k, x, w, y, n_threads);
 */
#ifndef KILN_CPU_QMATMUL_GGML_H
#define KILN_CPU_QMATMUL_GGML_H

#include "internal.h"

/* One row of W (nb blocks) against one row of x quantized to the
 * weight's activation dtype (xa: nb blocks' worth of its elements). */
typedef float kiln_qmm_dot_ggml(const void *w, const void *xa, int64_t nb);

/* One row of W against rows (1 .. KILN_QMM_ROWS_MAX, qmatmul.h) rows of x
 * quantized as above, row q's at xa + q * xrow: out[q] is the one-row kernel's
 * product with row q, bit for bit, each weight block decoded once for all
 * of them (the few rows of batched decoding: serve's slots). */
typedef void kiln_qmm_dot_ggml_rows(const void *w, const void *xa, size_t xrow, int rows, int64_t nb, float *out);

/* The scalar reference for weight dtype t. */
float kiln__qmm_dot_ggml_ref(kiln_dtype t, const void *w, const void *xa, int64_t nb);
/* Whether t's blocks sum in 8 lanes, and the lanes' sum:
 * ((l0 + l4) + (l2 + l6)) + ((l1 + l5) + (l3 + l7)). */
bool kiln__qmm_ggml_lanes(kiln_dtype t);
float kiln__qmm_ggml_lanes_sum(const float l[8]);

/* The kernels of one SIMD level for weight dtype t, NULL where the level
 * has none for t or is not built (cpu_features.h). */
kiln_qmm_dot_ggml *kiln__qmm_ggml_avx2(kiln_dtype t);
kiln_qmm_dot_ggml *kiln__qmm_ggml_avxvnni(kiln_dtype t);
kiln_qmm_dot_ggml *kiln__qmm_ggml_avx512vnni(kiln_dtype t);
kiln_qmm_dot_ggml *kiln__qmm_ggml_neon(kiln_dtype t);
kiln_qmm_dot_ggml *kiln__qmm_ggml_neondot(kiln_dtype t);
/* Their rows kernels: the blocks of 32 on x86 (the K types': qmatmul_kq.h),
 * every type on ARM. */
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx2(kiln_dtype t);
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avxvnni(kiln_dtype t);
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_avx512vnni(kiln_dtype t);
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neon(kiln_dtype t);
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_neondot(kiln_dtype t);

/* The rows kernel of the level kiln__qmm_ggml_kernel(t) chooses, NULL
 * where that level has none for t (the driver then runs x row by row). */
kiln_qmm_dot_ggml_rows *kiln__qmm_ggml_rows_kernel(kiln_dtype t);

/* Whether the products of weight dtype t run here. */
bool kiln__qmm_ggml_handles(kiln_dtype t);

/* The kernel the CPU's caps in force choose for weight dtype t (tests). */
kiln_qmm_dot_ggml *kiln__qmm_ggml_kernel(kiln_dtype t);

/* y[m, n] = x[m, k] . W^T, W contiguous [n, k] of dtype t; threaded over
 * W's rows. */
kiln_status kiln__qmatmul_ggml_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w,
                                   float *y, int n_threads);

#endif
