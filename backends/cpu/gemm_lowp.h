/* gemm_lowp.h — what the bf16 GEMM files share: the packed operand layout
 * both x86 kernels (AMX tiles and AVX512-BF16 vdpbf16ps) read, the packers
 * that build it, the row converters the portable path uses, and the kernels.
 *
 * Packed layout (all bf16, zero padded; Mp, Np, Kp rounded up to 32):
 *   A: 16-row groups, each cut into 32-wide k chunks stored as one 16x32
 *      block (1 KiB, an AMX A tile):  A(i, p) at
 *         ((i/16) * (Kp/32) + p/32) * 512 + (i%16) * 32 + p%32
 *   B: 16-column panels in VNNI pair order, pairs of k rows interleaved
 *      ([Kp/2][16][2] per panel; 32 k rows are one 1 KiB AMX B tile):
 *         B(p, j) at (j/16) * (Kp/2) * 32 + (p/2) * 32 + (j%16) * 2 + p%2
 * so every tile load, and every vdpbf16ps operand, is one contiguous line. */
#ifndef KILN_CPU_GEMM_LOWP_H
#define KILN_CPU_GEMM_LOWP_H

#include "gemm.h"

#define KILN_LOWP_BLOCK 32 /* Mp, Np, Kp are multiples of this */

typedef struct kiln_lowp_packed {
    const uint16_t *a, *b; /* packed as above */
    int64_t m, n, mp, np, kp;
} kiln_lowp_packed;

#if defined(__x86_64__)
/* Pack op(A) (m x k) / op(B) (k x n) of dtype in_dt (bf16, or f32 rounded
 * to bf16 here) into the layout above; dst holds Mp*Kp / Kp*Np elements.
 * gemm_lowp_avx512.c: call only where the CPU has AVX-512 (F/BW/VL).
 * The packers and kernels each run their loop on kiln's pool (pool.h) with
 * up to n_threads threads and return when it is done. */
void kiln__lowp_pack_a_avx512(kiln_dtype in_dt, bool ta, int64_t m, int64_t k, const void *a, int64_t lda,
                              uint16_t *dst, int64_t mp, int64_t kp, int n_threads);
void kiln__lowp_pack_b_avx512(kiln_dtype in_dt, bool tb, int64_t k, int64_t n, const void *b, int64_t ldb,
                              uint16_t *dst, int64_t kp, int64_t np, int n_threads);
/* C (c_dt) = packed A x packed B, only the valid m x n part written. */
void kiln__lowp_kernel_amx(const kiln_lowp_packed *p, kiln_dtype c_dt, void *c, int64_t ldc, int n_threads);
void kiln__lowp_kernel_avx512bf16(const kiln_lowp_packed *p, kiln_dtype c_dt, void *c, int64_t ldc, int n_threads);
/* Row converters (AVX2 + F16C), exact twins of the scalar ones in
 * core/dtype.c (NaN payloads aside). in_dt f32 means "round to bf16". */
void kiln__lowp_row_to_f32_avx2(kiln_dtype in_dt, const void *src, float *dst, int64_t n);
void kiln__lowp_row_from_f32_avx2(kiln_dtype c_dt, const float *src, void *dst, int64_t n);
#endif

#endif
