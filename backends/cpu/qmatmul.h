/* qmatmul.h — the CPU kernels of KILN_OP_QMATMUL, y[m, n] = x[m, k] (f32)
 * . W[n, k]^T with W quantized (PyTorch linear layout), without
 * materializing the f32 W:
 *
 *   - Q8_0 / Q4_0, few rows of x (generation): each row of x is quantized
 *     to int8 per block of 32 as ggml's quantize_row_q8_0 (d = amax / 127
 *     rounded to f16, q = round(x / d)), and each block's dot product is
 *     integer (vpdpbusd, or maddubs + madd on AVX2, sdot on NEON). The
 *     int32 lane sums are exact; each goes to f32 and one fused
 *     multiply-add with the block's d_w d_x into one of 16 f32 lanes,
 *     summed at the end as a tree (the order of halving a zmm,
 *     kiln__qmm_q8_lanes_sum / _q4_). The scalar reference does the same, so
 *     every path is exact against it. Q8_0: 8 lanes per block (lane l =
 *     elements 4l..4l+3), even / odd blocks in lanes 0-7 / 8-15. Q4_0: 4
 *     lanes per block (lane l = elements 4l..4l+3 and 16+4l..16+4l+3, the
 *     low and high nibbles of packed bytes 4l..4l+3), block i in lanes
 *     4 (i & 3)..+3: one conversion and one FMA per 16 packed bytes. With
 *     AVX512-VBMI + GFNI, Q4_0 takes four blocks (72 bytes) per step: one
 *     vpermt2b gathers their 64 packed bytes, an and / a vgf2p8affineqb
 *     split the nibbles, two vpdpbusd against x in a matching layout (the
 *     set's quantize_x writes it) give the 16 lanes, and two rows share
 *     the scales' conversion (qmatmul_vbmi.c).
 *   - NF4 / NF4_DQ, few rows: codes decoded in registers through the
 *     16-entry table (vpermps) and dotted with x in f32, one absmax
 *     multiply per block of 64 (not bit-exact against the scalar order).
 *     On AVX512-VNNI the dots take two blocks per zmm with W's side
 *     unsigned (nibble / w + 128) and x's per-lane sums precomputed
 *     (kiln__qmm_lane_sums) to undo the offset: the same exact lanes.
 *   - 2 .. kiln__qmm_batched_min(t) - 1 rows (batched decoding, serve's
 *     slots): where the level has a rows kernel (kiln_qmm_dotr_i8s: Q8_0
 *     and Q4_0 on AVX2 and AVX-VNNI, qmatmul_rows_x86.h; Q8_0 and Q4_0 on
 *     AVX512-VNNI, not VBMI's Q4_0; AVX-512's Q4_0, qmatmul_avx512.c; with
 *     NEON's dot product, qmatmul_neondot.c; every ggml type from AVX2 up
 *     and on NEON, qmatmul_ggml.h), each row of W is decoded once for up to
 *     KILN_QMM_ROWS_MAX rows of x, each row's result the batch-1
 *     product's bits; otherwise x row by row (VBMI's Q4_0: rows of W in
 *     pairs).
 *   - Many rows (prompt), Q8_0 / Q4_0 from AVX2 up and with NEON's dot
 *     product: the block-scaled integer GEMM of qmatmul_gemm.h (x
 *     quantized the same way, exact int32 block sums, f32 scaling per
 *     block; not the batch-1 products' order).
 *   - ggml's other block types (Q4_1, Q5_0, Q5_1, the K types, IQ4_NL,
 *     IQ4_XS), few rows: x quantized to the type's activation dtype and
 *     ggml's integer dot products (qmatmul_ggml.h; the K types' and
 *     IQ4_XS's x86 kernels: qmatmul_kq.h).
 *   - Many rows, the K types, IQ4_XS, Q4_1, Q5_0, Q5_1 and IQ4_NL from
 *     AVX2 up (IQ4_NL from AVX-VNNI up): the integer GEMM of
 *     qmatmul_kgemm.h / qmatmul_q32gemm.h, each row equal to its batch-1
 *     product bit for bit.
 *   - Many rows otherwise (NF4, NF4_DQ, CPUs without those): a panel of W
 *     rows is dequantized into an L2-sized f32 buffer and multiplied by
 *     kiln's own f32 GEMM.
 *
 * The vector kernels are per SIMD level (qmatmul_avx2.c, qmatmul_avxvnni.c,
 * qmatmul_avx512.c: Q4_0 four blocks a step without VNNI, qmatmul_avx512vnni.c, qmatmul_vbmi.c, qmatmul_neondot.c: ARMv8.2 sdot);
 * the scalar references run for $KILN_SIMD=scalar.
 *
 *     kiln__qmatmul_cpu(KILN_Q4_0, 1, n, k, x, w->data, y, n_threads);
 */
#ifndef KILN_CPU_QMATMUL_H
#define KILN_CPU_QMATMUL_H

#include "internal.h"

/* bytes of W read ahead of the blocks being multiplied: the hardware
 * prefetcher alone leaves one core well below the memory's rate (W streams
 * once, from DRAM, in generation). On the 1.1B llama's Q4_0 generation (2
 * threads, this machine) 1024 gave 0.67x the tokens/s of 4096, 2048 0.85x;
 * 8192 was within noise of 4096, 16384 and 32768 a little slower (all
 * into L1: the kernels that split it go further, QMM_FAR). */
#if defined(__x86_64__) && !defined(QMM_PREFETCH) /* the x86 kernels' */
#define QMM_PREFETCH 4096
#endif

/* The kernels that split their read-ahead (kiln__qmm_prefetch_far_near):
 * W's lines QMM_FAR bytes ahead from memory into L2, and QMM_NEAR ahead
 * from L2 into L1 (a far prefetch into L1 holds one of its few fill
 * buffers for a whole memory latency). Batch-1 products on a 1.1B llama's
 * shapes, 1 thread, Zen 5 at load 200+ (variants alternated in one
 * process, per CPU-second): Q4_0 (VBMI) 1.18-1.25x with 16384 ahead
 * against 4096, 8192 between, 32768 no better. The Q8_0 kernels of
 * AVX512-VNNI and AVX2 (which AVX-VNNI CPUs run too) take the far one
 * only (kiln__qmm_prefetch_far): AVX2's gave the 1.1B llama 1.11x the
 * tokens/s at 1 thread and 1.09x at 2 (KILN_SIMD=avx2 on the Zen 5,
 * quiet; with the near one as well it had measured 1.0x at load 200+).
 * The kernels that compute more per byte (the K types, IQ4_XS, NF4,
 * Q4_1, Q5_0, AVX2's and AVX512-VNNI's Q4_0) were no faster with it and
 * keep QMM_PREFETCH (the K types' and IQ4_XS's were measured while their
 * prefetches had been compiled away: see qmatmul_kq_x86.h). */
#define QMM_FAR 16384
#define QMM_NEAR 512

/* Prefetches the line QMM_FAR ahead of p into L2, QMM_NEAR ahead into L1. */
static inline void kiln__qmm_prefetch_far_near(const void *p) {
    __builtin_prefetch((const char *)p + QMM_NEAR, 0, 3);
    __builtin_prefetch((const char *)p + QMM_FAR, 0, 2);
}

/* Prefetches the line QMM_FAR ahead of p into L2. */
static inline void kiln__qmm_prefetch_far(const void *p) { __builtin_prefetch((const char *)p + QMM_FAR, 0, 2); }

/* Rows of x at or above which the batched paths (integer GEMM or
 * dequantized panels + f32 GEMM) run where t has no rows kernel (or its
 * tiles win from there: kiln__qmm_batched_min). */
#define KILN_QMM_PANEL_MIN_M 8

/* Rows of x at most that one call of a rows kernel takes (the kernels of
 * several rows of x against one row of W, below kiln__qmm_batched_min). */
#define KILN_QMM_ROWS_MAX 4

/* Rows of x from which the types with a rows kernel in qmatmul_ggml.h (the
 * K types, IQ4_XS) take the tiles of qmatmul_kgemm.h (or the panels)
 * instead, on x86 (ARM's rows kernels, not timed on ARM hardware, stop at
 * KILN_QMM_PANEL_MIN_M, where its tiles took over before them). Q4_K /
 * Q6_K, 5632 x 2048, 1 thread, Zen 5 at load 11-50 (per product,
 * alternated): the rows kernels took 0.4-0.45x the tiles' time at
 * 8 rows, 0.6-0.7x at 12, 0.7-0.95x at 16, 0.65-1.0x at 20, 1.2-1.4x at
 * 24. Q8_0's rows kernel was no faster than its GEMM at 8 rows and half
 * as fast at 12, so it keeps KILN_QMM_PANEL_MIN_M. */
#define KILN_QMM_ROWS_TILES_MIN 20

/* The same for the blocks of 32 with a rows kernel (qmatmul_q32_x86.h):
 * 5632 x 2048, W streamed, 1 thread, Zen 5 at load 10-150 (medians of 3
 * alternated runs), rows kernel / tiles: Q4_1 0.75-0.85 at 8 rows, 0.86
 * (AVX2) and 1.06 (AVX512-VNNI) at 10, 0.97-1.19 at 12; Q5_0 0.84-0.93 at
 * 12, 0.97 and 1.11 at 14, 1.02-1.19 at 16; Q5_1 0.88-0.96 at 16, 1.0 and
 * 1.15 at 18; IQ4_NL 0.83-0.93 at 19 (AVX2 has no IQ4_NL tiles: its
 * panels took 3x the rows kernel's time there). One figure per type,
 * between the levels' crossovers. Q8_0 / Q4_0 where no integer GEMM runs
 * them (AVX2, AVX-VNNI: the f32 panels) keep their rows kernels up to
 * KILN_QMM_ROWS_TILES_MIN - 1 (0.57-0.83x the panels' time at 19 rows);
 * where one does (AVX512-VNNI) the GEMM from KILN_QMM_PANEL_MIN_M (the
 * rows kernels took 1.14-1.36x its time at 8 rows). */
#define KILN_QMM_ROWS_TILES_MIN_Q4_1 11
#define KILN_QMM_ROWS_TILES_MIN_Q5_0 14
#define KILN_QMM_ROWS_TILES_MIN_Q5_1 17

/* Rows of x from which t's products take the batched paths for the caps
 * in force (KILN_QMM_PANEL_MIN_M, or a rows kernel's crossover above). */
int64_t kiln__qmm_batched_min(kiln_dtype t);

/* One row of W (nb blocks of 32, ggml layout) against one quantized row of
 * x (xq int8 [32 nb], dx f32 [nb]). */
typedef float kiln_qmm_dot_i8(const void *w, const int8_t *xq, const float *dx, int64_t nb);
/* NF4: nb blocks of 64 whose 32 code bytes are code_stride bytes apart and
 * whose absmax values are absmax_stride floats apart, against x [64 nb]. */
typedef float kiln_qmm_dot_nf4(const uint8_t *codes, int64_t code_stride, const float *absmax,
                               int64_t absmax_stride, int64_t nb, const float *x);

/* The same with xs: per block the 8 lanes' -off * (sum of the lane's 4
 * codes of x), off = 128 for Q8_0 (w + 128 unsigned), 8 for Q4_0 (the
 * nibble unsigned): added to the unsigned-by-signed sums, they leave the
 * exact signed ones (kiln__qmm_lane_sums). */
typedef float kiln_qmm_dot_i8s(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb);

/* The same for two rows of W at once (w0, w1: out[0], out[1]), each row's
 * operations those of the one-row kernel: x's codes are loaded once and
 * the two rows' chains overlap. */
typedef void kiln_qmm_dot2_i8s(const void *w0, const void *w1, const int8_t *xq, const int32_t *xs, const float *dx,
                               int64_t nb, float out[2]);

/* One row of W against rows (1 .. KILN_QMM_ROWS_MAX) quantized rows of x,
 * row q's at xq + 32 nb q, xs + 8 nb q (xs NULL for the sets that take
 * none), dx + nb q: out[q] is the one-row kernel's product with row q, bit
 * for bit, W's blocks decoded once for all of them (the few rows of
 * batched decoding). */
typedef void kiln_qmm_dotr_i8s(const void *w, const int8_t *xq, const int32_t *xs, const float *dx, int64_t nb,
                               int rows, float *out);

typedef struct kiln_qmm_kernels {
    kiln_qmm_dot_i8 *q8_0, *q4_0;
    kiln_qmm_dot_nf4 *nf4;
    kiln_qmm_dot_i8s *q8_0s, *q4_0s; /* NULL where the kernels take no xs */
    /* kiln__qmm_quantize_x and (xs non-NULL) kiln__qmm_lane_sums in one
     * pass, the same values; NULL: the scalar ones run. With off == 8
     * (Q4_0) a set may write xq / xs in its own Q4_0 layout instead (the
     * same codes; xs per its lanes), read only by its q4_0s / q4_0s2. */
    void (*quantize_x)(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off);
    kiln_qmm_dot2_i8s *q8_0s2, *q4_0s2; /* NULL: row by row */
    kiln_qmm_dotr_i8s *q8_0sr, *q4_0sr; /* NULL: x row by row, or rows in pairs */
} kiln_qmm_kernels;

/* xs for a quantized row of x (32 nb codes): xs[8 b + l] = -off * sum of
 * xq[32 b + 4 l .. 32 b + 4 l + 3]. */
void kiln__qmm_lane_sums(const int8_t *xq, int32_t *xs, int64_t nb, int32_t off);

/* The sets per level (cpu_features.h); NULL when not built. */
const kiln_qmm_kernels *kiln__qmm_kernels_avx2(void);
const kiln_qmm_kernels *kiln__qmm_kernels_avxvnni(void);
const kiln_qmm_kernels *kiln__qmm_kernels_avx512(void);
const kiln_qmm_kernels *kiln__qmm_kernels_avx512vnni(void);
const kiln_qmm_kernels *kiln__qmm_kernels_vbmi(void);
const kiln_qmm_kernels *kiln__qmm_kernels_neondot(void);
/* NEON's quantize_x (aarch64 only; qmatmul_q8_neon.c), NEON-dotprod's. */
void kiln__qmm_quantize_x_neon(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off);

/* Q8_0's 16 lanes (even blocks' 0-7, odd blocks' 8-15) summed by halving,
 * as a zmm holding them in order is reduced: a[l] + a[l + 8], then those
 * j and j + 4, then (0 + 2) + (1 + 3). */
static inline float kiln__qmm_q8_lanes_sum(const float a[16]) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = a[l] + a[l + 8];
    for (int j = 0; j < 4; j++) q[j] = h[j] + h[j + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}

/* Q4_0's 16 lanes (block b's lane l at 4 b + l) summed as a tree: per
 * block (l0 + l2) + (l1 + l3), then (B0 + B2) + (B1 + B3), the order of
 * halving a zmm whose lane 4 l + b holds them (qmatmul_vbmi.c): four
 * shuffles and adds there instead of 16 dependent scalar adds per row. */
static inline float kiln__qmm_q4_lanes_sum(const float a[16]) {
    float bs[4];
    for (int b = 0; b < 4; b++) bs[b] = (a[4 * b] + a[4 * b + 2]) + (a[4 * b + 1] + a[4 * b + 3]);
    return (bs[0] + bs[2]) + (bs[1] + bs[3]);
}

/* The scalar references. */
float kiln__qmm_dot_q8_0_ref(const void *w, const int8_t *xq, const float *dx, int64_t nb);
float kiln__qmm_dot_q4_0_ref(const void *w, const int8_t *xq, const float *dx, int64_t nb);
float kiln__qmm_dot_nf4_ref(const uint8_t *codes, int64_t code_stride, const float *absmax, int64_t absmax_stride,
                            int64_t nb, const float *x);

/* ggml's Q8_0 rule for activations: n (a multiple of 32) values to int8
 * codes and one f32 scale (an f16 value) per block. */
void kiln__qmm_quantize_x(const float *x, int8_t *xq, float *dx, int64_t n);

/* kiln__qmm_quantize_x and (xs non-NULL) kiln__qmm_lane_sums through the
 * quantize_x of the set the caps in force pick, as the batch-1 products
 * quantize each row of x (with off == 8, in that set's Q4_0 layout). */
void kiln__qmm_quantize_x_simd(const float *x, int8_t *xq, float *dx, int32_t *xs, int64_t n, int32_t off);

/* y[m, n] = x[m, k] . W^T; w is the first byte of a contiguous quantized
 * [n, k] matrix (k a multiple of the block). Threaded (n_threads). */
kiln_status kiln__qmatmul_cpu(kiln_dtype t, int64_t m, int64_t n, int64_t k, const float *x, const void *w, float *y,
                              int n_threads);

#endif
