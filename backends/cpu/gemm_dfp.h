/* gemm_dfp.h — the dynamic fixed point GEMM (Das et al. 2018; formats in
 * quant/dfp.h):
 *
 *     C[m, n] (f32) = 2^ea 2^eb sum_p A[i, p] B[j, p]      (A, B int16)
 *
 * Both operands row-major with k contiguous ("NT", as gemm_i8.h), one
 * exponent each (a whole matrix shares it). The caller states bounds
 * |A| <= amax and |B| <= bmax (kiln__dfp_quantize gives them); they fix the
 * overflow control:
 *
 * INT16 x INT16 products are summed in INT32 (vpdpwssd adds a pair of
 * products to a 32-bit lane, without saturation) over chunks of at most
 * 2 cp consecutive k, cp = floor((2^31 - 1) / (2 amax bmax)) pairs, and each
 * chunk's sum is converted to f32 and added to an f32 accumulator.
 * Proof that no chunk wraps: every partial sum inside a chunk is a sum of
 * at most 2 cp products, each |a b| <= amax bmax, so its magnitude is at
 * most 2 cp amax bmax <= 2^31 - 1. With full-range operands (amax = bmax =
 * 32767) one pair already reaches 2 * 32767^2 = 2,147,352,578 < 2^31 - 1 =
 * 2,147,483,647, so cp = 1: correct but a conversion per pair. The DFP ops
 * quantize to 14 bits (|q| <= 8191): cp = floor(2^31 - 1 / (2 * 8191^2)) =
 * 16 pairs (32 k: 32 * 8191^2 = 2,146,959,392 fits), one conversion and
 * add per 16 vpdpwssd. The result is then (acc * 2^ea) * 2^eb (two
 * multiplies so that ea + eb may leave the f32 exponent range on its own).
 *
 * Every path (scalar reference, AVX512-VNNI) does the same integer chunk
 * sums, the same f32 conversions and adds in the same order, so they are
 * bit-identical, whatever the thread count.
 *
 *     int ea, eb, ma, mb;
 *     kiln__dfp_quantize(x, t * in, 14, xq, &ea, &ma, false, 0);   // [t, in]
 *     kiln__dfp_quantize(w, out * in, 14, wq, &eb, &mb, false, 0); // [out, in]
 *     kiln__gemm_dfp(t, out, in, xq, in, ma, ea, wq, in, mb, eb, y, out, 2);
 */
#ifndef KILN_CPU_GEMM_DFP_H
#define KILN_CPU_GEMM_DFP_H

#include "internal.h"

#include <stdbool.h>
#include <stdint.h>

kiln_status kiln__gemm_dfp(int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda, int amax, int ea,
                           const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc, int n_threads);
/* The same with the scalar reference whatever the CPU (tests). */
kiln_status kiln__gemm_dfp_ref(int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda, int amax, int ea,
                               const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                               int n_threads);
/* The same with either operand stored the other way: a_km, A as [k, m]
 * (lda its row stride, >= m); b_kn, B as [k, n] (ldb >= n). The packers
 * read those layouts directly (no transposed copy). */
kiln_status kiln__gemm_dfp_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a, int64_t lda,
                             int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb, float *c, int64_t ldc,
                             int n_threads);
/* C += the product, each element as C + (the product's value): what an
 * add of the product into C would give, without the product's buffer
 * (a weight gradient's product adding into the gradient, core/fuse.c). */
kiln_status kiln__gemm_dfp_add_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                 int64_t lda, int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb,
                                 float *c, int64_t ldc, int n_threads);
kiln_status kiln__gemm_dfp_ref_t(bool a_km, bool b_kn, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                 int64_t lda, int amax, int ea, const int16_t *b, int64_t ldb, int bmax, int eb,
                                 float *c, int64_t ldc, int n_threads);
/* B = the columns of a convolution, read from the image's codes by B's
 * packer (implicit im2col): cols = im2col_cn(x) [c kh kw, n oh ow] as
 * kiln__dfp_im2col_cn makes them, and B is cols (b_t false: B [k, n], the
 * forward) or cols^T (b_t true: cols [n, k], the weight gradient). Equal
 * to kiln__gemm_dfp_t on the explicit columns bit for bit (the same codes
 * reach the same kernel). x needs one int16 of slack after its last code
 * (the AVX-512 packer gathers 4 bytes per code). */
typedef struct kiln_dfp_image {
    const int16_t *x;
    int64_t n, c, h, w, oh, ow;
    int64_t g[8]; /* kh, kw, sh, sw, ph, pw, dh, dw */
    /* cs, ns: the strides of a channel and of an image in x (0: h w and
     * c h w, x as [n, c, h, w]). flip: the taps of a transposed
     * convolution at stride 1 (a convolution's data gradient from the
     * output gradient x, [c = its channels, n, h, w] with cs = n h w,
     * ns = h w): column (b, y, z) of row (c, i, j) reads x at
     * (y + ph - i dh, z + pw - j dw), 0 outside; oh, ow the gradient's
     * size. */
    int64_t cs, ns;
    bool flip;
} kiln_dfp_image;
kiln_status kiln__gemm_dfp_conv_t(bool a_km, bool b_t, int64_t m, int64_t n, int64_t k, const int16_t *a,
                                  int64_t lda, int amax, int ea, const kiln_dfp_image *img, int bmax, int eb, float *c,
                                  int64_t ldc, int n_threads);

/* Pairs of k per INT32 chunk for the bounds (at least 1). */
int64_t kiln__gemm_dfp_chunk_pairs(int amax, int bmax);

/* im2col of int16 codes in conv2d's CN layout: x [n, c, h, w] -> cols
 * [c, kh, kw, n, oh, ow] (g: kh, kw, sh, sw, ph, pw, dh, dw as in
 * ops/conv.c), out-of-image taps 0; the f32 IM2COL kernel's loop
 * (backends/cpu/conv.c) on codes, so quantize then gather equals gather
 * then quantize whenever the exponent is the same. */
void kiln__dfp_im2col_cn(const int16_t *x, int64_t n, int64_t c, int64_t h, int64_t w, const int64_t *g, int64_t oh,
                         int64_t ow, int16_t *cols, int n_threads);

/* Packed operands (zero padded to mp x kp, np x kp, kp even):
 *   A: groups of KILN_DFP_MR rows, k pair by k pair: the pair (2p, 2p+1) of
 *      row i at ((i/MR) * (kp/2) + p) * MR + i%MR, as 32-bit words (one
 *      broadcast per row and pair);
 *   B: 16-column panels of k pairs, [np/16][kp/2][16][2] int16 (one zmm
 *      per pair of a panel). */
#define KILN_DFP_MR 6
typedef struct kiln_dfp_packed {
    const int16_t *a, *b;
    int64_t m, n, k, mp, np, kp, cp; /* cp: pairs per chunk */
    float sa, sb;                 /* 2^ea, 2^eb */
    bool acc;                     /* C += the product */
} kiln_dfp_packed;

/* The tables the columns' packer reads (x86 only; built on every CPU): tap (r, j) of
 * cols (row r = c kh kw, column j = n oh ow) is x[cofs[j] + rofs[r]] when
 * 0 <= ci[j] + ri[r] < h and 0 <= cj[j] + rj[r] < w, else 0; the tables
 * run past the last row and column (to a multiple of 16, and even) with
 * entries that fail the test. */
typedef struct kiln_dfp_taps {
    const int32_t *rofs, *ri, *rj, *cofs, *ci, *cj;
    int32_t h, w;
    int32_t period; /* kh kw: rows r and r + period have the same ri, rj */
} kiln_dfp_taps;

/* The packers and kernels below each run their loop on kiln's pool
 * (pool.h) with up to n_threads threads and return when it is done. */
#if defined(__x86_64__)
void kiln__gemm_dfp_kernel_avx512vnni(const kiln_dfp_packed *p, float *c, int64_t ldc, int n_threads);
/* A's first full pairs (k / 2) of KILN_DFP_MR rows into a tile (d); rows
 * from live on are padding (0). */
void kiln__gemm_dfp_pack_a_rows_avx512(const int16_t *const src[KILN_DFP_MR], int live, int64_t full, int16_t *d);
/* B's packer. */
void kiln__gemm_dfp_pack_b_avx512(bool kn, int64_t n, int64_t k, const int16_t *b, int64_t ldb, int16_t *dst,
                                  int64_t np, int64_t kp, int n_threads);
/* The columns' packer (the tables above). */
void kiln__gemm_dfp_pack_b_im2col_avx512(bool b_t, int64_t n, int64_t k, const int16_t *x, const kiln_dfp_taps *t,
                                         int16_t *dst, int64_t np, int64_t kp, int n_threads);
/* The kernel with the columns packed inside it (the tables above): each
 * unit packs its 64-column block into its thread's buffer, bufs + pool tid
 * * stride (n_threads of them; stride >= min(np, 64) * kp int16); p->b
 * unused. */
void kiln__gemm_dfp_kernel_im2col_avx512vnni(const kiln_dfp_packed *p, float *c, int64_t ldc, bool b_t,
                                             const int16_t *x, const kiln_dfp_taps *t, int16_t *bufs,
                                             int64_t stride, int n_threads);
#endif

#endif
