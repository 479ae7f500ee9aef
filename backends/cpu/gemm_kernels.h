/* gemm_kernels.h — what kiln's own f32 GEMM (gemm.c) is built from: one
 * register-blocked micro-kernel per instruction set, the block sizes tuned
 * for it, and the no-packing GEMV-shaped loops that small problems and
 * batch-1 inference take.
 *
 * A micro-kernel multiplies an MR x kc panel of A stored column by column
 * (a[p*as + i]; as == MR when packed) by a kc x NR panel of B stored row by
 * row (b[p*bs + j]; bs == NR when packed), so an unpacked A^T or B is read
 * in place, and stores C[i*ldc + j] = alpha*acc + beta*C, never reading C
 * when beta == 0. It computes a whole MR x NR tile (or, with ukr_rows, the
 * first rows of one); the driver handles narrower edges. */
#ifndef KILN_CPU_GEMM_KERNELS_H
#define KILN_CPU_GEMM_KERNELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef void (*kiln__sgemm_ukr)(int64_t kc, const float *a, int64_t as, const float *b, int64_t bs, float *c,
                                int64_t ldc, float alpha, float beta);
/* The same for only the first rows (1..MR) rows of the tile (optional). */
typedef void (*kiln__sgemm_ukr_rows)(int rows, int64_t kc, const float *a, int64_t as, const float *b, int64_t bs,
                                     float *c, int64_t ldc, float alpha, float beta);

/* y[j] = alpha * sum_p x[p] * M[p*ldm + j] + beta*y[j], j < n (rows of M are
 * contiguous along y: the "axpy" form) */
typedef void (*kiln__sgemv_axpy)(int64_t n, int64_t k, float alpha, const float *x, const float *m, int64_t ldm,
                                 float beta, float *y);
/* y[j] = alpha * sum_p x[p] * M[j*ldm + p] + beta*y[j*incy], j < n (the "dot" form) */
typedef void (*kiln__sgemv_dot)(int64_t n, int64_t k, float alpha, const float *x, const float *m, int64_t ldm,
                                float beta, float *y, int64_t incy);

/* dst[p*w + i] = src[i*ld + p] for i < rows, p < kc, and 0 for rows <= i < w:
 * the transposing copy that packs A (not transposed) and B (transposed). */
typedef void (*kiln__sgemm_pack_t)(const float *src, int64_t ld, int rows, int64_t kc, int w, float *dst);

typedef struct kiln__sgemm_kernel {
    const char *name;
    int mr, nr;     /* micro-tile */
    int kc, mc, nc; /* cache blocks: kc x nr B panel in L1, mc x kc A block in L2, kc x nc B block in L3 */
    kiln__sgemm_ukr ukr;
    kiln__sgemv_axpy axpy;
    kiln__sgemv_dot dot;
    kiln__sgemm_pack_t pack_t;
    kiln__sgemm_ukr_rows ukr_rows; /* NULL: edge tiles run the full kernel */
} kiln__sgemm_kernel;

void kiln__sgemm_pack_t_scalar(const float *src, int64_t ld, int rows, int64_t kc, int w, float *dst);

/* The kernel for the caps in force (kiln__cpu_caps()). */
const kiln__sgemm_kernel *kiln__sgemm_kernel_pick(void);

extern const kiln__sgemm_kernel kiln__sgemm_kernel_scalar;
#if defined(__x86_64__)
extern const kiln__sgemm_kernel kiln__sgemm_kernel_avx2, kiln__sgemm_kernel_avx512;
void kiln__sgemm_pack_t_avx2(const float *src, int64_t ld, int rows, int64_t kc, int w, float *dst);
#endif
#if defined(__aarch64__)
extern const kiln__sgemm_kernel kiln__sgemm_kernel_neon;
#endif

/* kiln's own f64 GEMM (what BLAS=0 builds run; safe inside parallel
 * regions with n_threads == 1, unlike OpenBLAS). */
void kiln__dgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                     const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads);

#endif
