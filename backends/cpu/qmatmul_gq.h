/* qmatmul_gq.h — the fused quantized matmul (KILN_OP_QMATMUL) for the GQ
 * dtypes (the GPTQ layout, quant/quant.h) with few rows of x
 * (generation); with KILN_QMM_PANEL_MIN_M rows or more qmatmul.c's panel
 * path dequantizes W through kiln__dequantize_row (coders.h) like every
 * other type.
 *
 * Each row of x is quantized to int8 per block of 32 (ggml's Q8_0 rule,
 * kiln__qmm_quantize_x), which meets one 32-element chunk of W's codes.
 * Per chunk, w = q - zero (|w| <= 2^b - 1) against x8 is an integer dot
 * product: vpdpbusd (AVX512-VNNI on ymm, or AVX-VNNI) or maddubs + madd
 * (AVX2) of |w| (unsigned) against sign(x8, w), or two sdot of w against
 * x8 (ARMv8.2 dot product), 8 int32 lanes (lane l
 * sums elements 4l..4l+3). Chunk i's lanes go to accumulator i & 1 as
 * fma(lane, scale * dx, acc) and the 16 lanes are summed in order, as in
 * the Q4_0 path; the scalar reference does the same, so each kernel is
 * exact against it. This is y += scale dx (sum q x8 - zero sum x8) per
 * chunk, with the zero folded into the codes.
 *
 *     kiln__qmatmul_gq_cpu(KILN_GQ4_128, 1, n, k, x, w->data, y, n_threads);
 */
#ifndef KILN_CPU_QMATMUL_GQ_H
#define KILN_CPU_QMATMUL_GQ_H

#include "internal.h"

/* One row of W (nc chunks of 32 in GQ blocks of (bits, group)) against one
 * quantized row of x (xq int8 [32 nc], dx f32 [nc]). */
typedef float kiln_gq_dot(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx, int64_t nc);

float kiln__gq_dot_ref(const uint8_t *w, int bits, int group, const int8_t *xq, const float *dx, int64_t nc);
kiln_gq_dot *kiln__gq_dot_avx2(void);      /* NULL when not built */
kiln_gq_dot *kiln__gq_dot_avx512vnni(void); /* EVEX vpdpbusd on ymm; NULL when not built */
kiln_gq_dot *kiln__gq_dot_avxvnni(void);   /* VEX vpdpbusd; NULL when not built */
kiln_gq_dot *kiln__gq_dot_neondot(void);   /* ARMv8.2 sdot; NULL when not built */
/* The kernel the CPU caps in force allow (the reference for scalar). */
kiln_gq_dot *kiln__gq_dot_best(void);

/* y[m, n] = x[m, k] . W^T for a contiguous GQ W [n, k], threaded. */
kiln_status kiln__qmatmul_gq_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w,
                                 float *y, int n_threads);

#endif
