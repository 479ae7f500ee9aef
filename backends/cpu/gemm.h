/* gemm.h — the CPU backend's matrix multiplies, row-major, BLAS-style:
 *
 *     C[m, n] = alpha * op(A) op(B) + beta * C
 *
 * op(X) is X, or its transpose when ta/tb is set (A is then stored k x m,
 * B n x k); lda/ldb/ldc are row strides in elements. beta == 0 means C is
 * only written, never read (so NaN garbage in C does not leak through).
 * n_threads is how many threads the call may use; 1 runs it on the calling
 * thread, so it is safe inside a parallel region.
 *
 * kiln__sgemm picks OpenBLAS (builds with BLAS=1; single-thread calls,
 * when its kernels are at least as wide as kiln's) or kiln's own packed
 * kernels; kiln__sgemm_own always runs kiln's own (what BLAS=0 builds use,
 * and what tests and `make bench` compare). kiln__gemm_lowp multiplies
 * bf16/f16 operands (or f32 operands rounded to bf16) with f32 accumulation.
 *
 *     kiln__sgemm(false, true, m, n, k, 1.0f, x, k, w, k, 0.0f, y, n, nt); // y = x w^T
 */
#ifndef KILN_CPU_GEMM_H
#define KILN_CPU_GEMM_H

#include "internal.h"

void kiln__sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                 const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads);
void kiln__sgemm_own(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float *a, int64_t lda,
                     const float *b, int64_t ldb, float beta, float *c, int64_t ldc, int n_threads);
void kiln__dgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, const double *a, int64_t lda,
                 const double *b, int64_t ldb, double beta, double *c, int64_t ldc, int n_threads);

/* C[m, n] = A B (A m x k, B k x n row-major) on the calling thread, with
 * A packed once beforehand (gemm_packed_a.c) into
 * kiln__sgemm_packed_a_floats(m, k) floats: for an A that multiplies many
 * B. Its sums run in the order of kiln__sgemm_own's blocked driver. The
 * kernel in force must not change between the packing and the products.
 * The layout, for code that writes A packed: the block of depth pc (kcb
 * deep, the last one shorter) at pc * mp (m rounded up to mr), in it the
 * panel of rows ir.. (a multiple of mr) at ir * kc, and element (i, p) at
 * (p - pc) * mr + i - ir; rows past m are zeros.
 *
 *     kiln__sgemm_pack_a(m, k, a, k, pa);
 *     kiln__sgemm_packed_a(m, n, k, pa, b, n, c, n); // c = a b */
typedef struct kiln__sgemm_packed_layout {
    int64_t mr, kcb, mp;
} kiln__sgemm_packed_layout;
kiln__sgemm_packed_layout kiln__sgemm_packed_a_layout(int64_t m, int64_t k);
size_t kiln__sgemm_packed_a_floats(int64_t m, int64_t k);
void kiln__sgemm_pack_a(int64_t m, int64_t k, const float *a, int64_t lda, float *pa);
void kiln__sgemm_packed_a(int64_t m, int64_t n, int64_t k, const float *pa, const float *b, int64_t ldb, float *c,
                          int64_t ldc);
/* One depth block of that product over B already packed: C[m, n] = (at
 * pc 0) or += (after) A's block pc (kc deep) times B's, whose panel of
 * columns jr.. (a multiple of the kernel's nr) starts at pb + jr * pbs,
 * element (p, j) at (p - pc) * nr + j - jr; the tiles in the blocked
 * driver's order. kiln__sgemm_packed_a runs it on each block of B it
 * packs (pbs = kc), Winograd on its V written in panels (pbs = C). */
void kiln__sgemm_packed_a_block(int64_t m, int64_t n, int64_t pc, int64_t kc, const float *pa, const float *pb,
                                int64_t pbs, float *c, int64_t ldc);

/* C (dtype c_dt: f32, bf16 or f16) = op(A) op(B) with A and B of dtype
 * in_dt (bf16, f16, or f32 to be rounded to bf16), accumulated in f32.
 * Returns KILN_OK or an error with its message set. */
kiln_status kiln__gemm_lowp(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
                            int n_threads);

#endif
