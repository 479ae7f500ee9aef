/* gemm_kernels.h — what kiln's own f32 GEMM (gemm.c) is built from: one
 * register-blocked micro-kernel per instruction set, the cache blocks
 * derived for it from this CPU's caches (gemm_blocks.c), and the no-packing
 * GEMV-shaped loops that small problems and batch-1 inference take.
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
    int mr, nr; /* micro-tile */
    kiln__sgemm_ukr ukr;
    kiln__sgemv_axpy axpy;
    kiln__sgemv_dot dot;
    kiln__sgemm_pack_t pack_t;
    kiln__sgemm_ukr_rows ukr_rows; /* NULL: edge tiles run the full kernel */
} kiln__sgemm_kernel;

/* Cache sizes in bytes (0: not reported): L1 data and L2 of one core, and
 * one core's share of L3. */
typedef struct kiln__cpu_caches {
    int64_t l1d, l2, l3_per_core;
} kiln__cpu_caches;

/* Cache blocks: a kc x nr panel of B in L1, an mc x kc block of A in L2, a
 * kc x nc block of B in L3 (mc a multiple of mr, nc of nr). */
typedef struct kiln__sgemm_blocks {
    int64_t kc, mc, nc;
} kiln__sgemm_blocks;

/* This CPU's caches (read once), or those a test forced. */
const kiln__cpu_caches *kiln__cpu_caches_get(void);
/* Force the caches the GEMM sizes its blocks for (tests); NULL: this CPU's
 * again. Not thread-safe against running products. */
void kiln__cpu_caches_set(const kiln__cpu_caches *c);
/* K's blocks for caches c (defaults stand in for sizes of 0). */
kiln__sgemm_blocks kiln__sgemm_blocks_derive(const kiln__sgemm_kernel *K, const kiln__cpu_caches *c);
/* K's blocks for this CPU. */
kiln__sgemm_blocks kiln__sgemm_blocks_for(const kiln__sgemm_kernel *K);

/* gemm.c's blocked driver's pieces, shared with gemm_packed_a.c: the
 * kc x nc block of op(B) at row p0, column j0 into NR-wide panels
 * (pb[panel NR kc + p NR + j], zero-padded); and one MR x NR tile of C
 * (mr x nr of it inside C) = alpha A B + beta C, through a scratch tile
 * where the kernel cannot write it in place. */
void kiln__sgemm_pack_b(const kiln__sgemm_kernel *K, bool tb, const float *b, int64_t ldb, int64_t p0, int64_t kc,
                        int64_t j0, int64_t nc, float *pb);
void kiln__sgemm_run_tile(const kiln__sgemm_kernel *K, int64_t kc, const float *pa, int64_t as, const float *pb,
                          int64_t bs, float *c, int64_t ldc, int mr, int nr, float alpha, float beta);

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
