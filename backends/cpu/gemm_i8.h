/* gemm_i8.h — the integer GEMM quantized kernels call:
 *
 *     C[m, n] (int32) = A[m, k] (int8) x B[n, k]^T (int8)
 *
 * Both operands are row-major with k contiguous ("NT": a quantized weight
 * matrix [out, in] against activations [tokens, in]); lda/ldb/ldc are row
 * strides in elements. C is only written. The sums are exact in int32 up to
 * k = 2^17 (|a b| <= 2^14); beyond that they wrap modulo 2^32, the same on
 * every path. n_threads is how many threads the call may use (1 runs on the
 * calling thread, so it is safe inside a parallel region). Every path gives
 * bit-identical results, whatever the thread count.
 *
 *     // y[t, o] = sum_i x[t, i] w[o, i]   (x: tokens x in, w: out x in)
 *     kiln_status s = kiln__gemm_s8(tokens, out, in, x, in, w, in, y, out, n_threads);
 *
 * The path is chosen at run time (cpu_features.h): AMX-INT8 tiles
 * (tdpbssd), AVX512-VNNI, AVX-VNNI (ymm, gemm_i8_avxvnni.c), ARM64 dotprod (sdot), plain NEON
 * widening multiplies, or portable scalar C.
 *
 * Below the entry point: the packed operand layouts the SIMD kernels read
 * (packers in gemm_i8.c), and the kernels. */
#ifndef KILN_CPU_GEMM_I8_H
#define KILN_CPU_GEMM_I8_H

#include "internal.h"
#include "pool.h"

kiln_status kiln__gemm_s8(int64_t m, int64_t n, int64_t k, const int8_t *a, int64_t lda, const int8_t *b,
                          int64_t ldb, int32_t *c, int64_t ldc, int n_threads);

/* Packed operands (zero padded to mp x kp and np x kp; the zeros add nothing):
 *   A: groups of R rows, each cut into G-wide k chunks stored as an R x G
 *      block:  A(i, p) at ((i/R) * (kp/G) + p/G) * R*G + (i%R) * G + p%G
 *      (AMX: R 16, G 64, one block = one A tile; VNNI: R 6, G 4, a k quad of
 *      the R rows is R consecutive 32-bit broadcasts; NEON dotprod: R 4,
 *      G 16; plain NEON: R 2, G 4). For the VNNI paths every byte has 128
 *      added (xor 0x80), as vpdpbusd multiplies unsigned by signed bytes.
 *   B: 16-column panels of k quads ("VNNI quad order"), [np/16][kp/4][16][4]:
 *         B(j, p) at (j/16) * (kp/4) * 64 + (p/4) * 64 + (j%16) * 4 + p%4
 *      (64 k of a panel is one 1 KiB AMX B tile; one k quad of a panel is
 *      one zmm, two ymm or four NEON q registers).
 *   colsum (VNNI paths): 128 * sum_p B(j, p) per column, subtracted from
 *      the unsigned-by-signed sums to undo the +128 on A; the VNNI kernels
 *      compute it from packed B (the packers here are portable C). */
typedef struct kiln_s8_packed {
    const int8_t *a, *b;
    int32_t *colsum; /* np entries (VNNI paths, filled by their kernel), or NULL */
    int64_t m, n, mp, np, kp;
} kiln_s8_packed;

/* A k quad of a packed A row (4 bytes) as one int32, for a broadcast. */
static inline int32_t kiln__s8_quad(const int8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}

#define KILN_S8_AMX_MR 32 /* rows and columns of one AMX step (2 x 2 tiles) */
#define KILN_S8_VNNI_MR 6
#define KILN_S8_NEONDOT_MR 4
#define KILN_S8_NEON_MR 2

/* Kernels: C = packed A x packed B, only the valid m x n part written,
 * their units of work (a column block against a group of gs row tiles) run
 * on kiln's pool with up to n_threads threads. What a unit loop reads: */
typedef struct kiln_s8_units {
    const kiln_s8_packed *p;
    int32_t *c;
    int64_t ldc, gs, nbw; /* row tiles per unit; columns per unit (VNNI) */
    const void *tile;     /* the VNNI tile function */
} kiln_s8_units;
#if defined(__x86_64__)
void kiln__gemm_s8_kernel_amx(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads);
void kiln__gemm_s8_kernel_avx512vnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads);
void kiln__gemm_s8_kernel_avxvnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads);
/* The VNNI kernels' shared loop (gemm_i8_tiles_avx2.c): tile(...) makes
 * rows x cols (<= 6 x 16 np) of C += an A tile x np B panels over quads k
 * quads (B panels ps bytes apart), starting from -colsum when first, else
 * from C; nbw is the columns per unit of work (16 np). */
typedef void kiln_s8_vnni_tile(const int8_t *a, const int8_t *b, int64_t quads, int64_t ps, int np,
                               const int32_t *cs, bool first, int32_t *c, int64_t ldc, int64_t rows, int64_t cols);
void kiln__gemm_s8_drive_vnni(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads, int nbw,
                              kiln_s8_vnni_tile *tile);
#endif
#if defined(__aarch64__)
void kiln__gemm_s8_kernel_neondot(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads);
void kiln__gemm_s8_kernel_neon(const kiln_s8_packed *p, int32_t *c, int64_t ldc, int n_threads);
#endif

#endif
