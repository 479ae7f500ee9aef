/* cu_kernels.h — the CUDA kernels' launchers, callable from C. The host
 * files (cu_*.c, compiled by the C compiler against kiln's internal
 * headers) decide what runs and fill these plain structs; the .cu files
 * (compiled by nvcc as C++) know nothing of kiln's tensors. Every launcher
 * queues its work on `stream` and returns the launch's cudaError_t as an
 * int (0: queued). Pointers are device pointers to an operand's first
 * element; strides and sizes count elements.
 *
 *     cu_walk w = ...;   // y = a + b over w, b broadcast with stride 0
 *     int e = kiln__cu_binary(stream, CU_ADD, 0, CU_F32, a, b, y, n, &w);
 */
#ifndef KILN_CU_KERNELS_H
#define KILN_CU_KERNELS_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CU_MAX_DIMS 6 /* KILN_MAX_DIMS */
#define CU_MAX_SRC 3

/* Element dtypes the kernels read and write. */
enum { CU_F32 = 0, CU_F16 = 1, CU_BF16 = 2, CU_I32 = 3, CU_F64 = 4 };

/* Quantized dtypes the kernels decode (k_quant.cu); a GQ dtype is
 * CU_GQ | bits << 8 | group (32, 64, 128), ggml's other types CU_GGML |
 * their KILN_QD_* (quant/ggml_decode.h). CU_NF4_DQ reads the signed
 * dynamic map, loaded once by kiln__cu_nf4_dq_map. */
enum { CU_Q8_0 = 16, CU_Q4_0, CU_NF4, CU_NF4_DQ, CU_DFP16, CU_GGML = 0x800, CU_GQ = 0x1000 };

/* A walk of a contiguous output of nd dims (row-major, shape[]) reading
 * each source k at offset sum_d index[d] * st[k][d] (0 on a broadcast dim). */
typedef struct cu_walk {
    int nd;
    int64_t shape[CU_MAX_DIMS];
    int64_t st[CU_MAX_SRC][CU_MAX_DIMS];
} cu_walk;

/* y[i] = x at walk w, converted from dtype xt to yt (a copy when equal). */
int kiln__cu_copy(void *stream, int xt, const void *x, int yt, void *y, int64_t n, const cu_walk *w);

/* Bits of es-byte elements (2, 4, 8): element i of the walk's shape goes
 * from x at source 0's strides to y at source 1's. */
int kiln__cu_move(void *stream, int es, const void *x, void *y, int64_t n, const cu_walk *w);
/* y[i] = bits (its low es bytes) for i < n. */
int kiln__cu_fill(void *stream, int es, void *y, int64_t n, uint64_t bits);

/* Unary ops numbered by their offset from KILN_OP_NEG (cu_elementwise.c
 * checks the order): computed in double, rounded once to the dtype. */
int kiln__cu_unary(void *stream, int op, double p, int dt, const void *x, void *y, int64_t n, const cu_walk *w);

/* Binary ops: ADD SUB MUL DIV, or CMP with cmp a kiln_cmp_op (1/0). */
enum { CU_ADD = 0, CU_SUB, CU_MUL, CU_DIV, CU_CMP };
int kiln__cu_binary(void *stream, int op, int cmp, int dt, const void *a, const void *b, void *y, int64_t n,
                    const cu_walk *w);
/* A fused element-wise chain (core/chain_prog.c's program, core/backend.h)
 * on f32 or f64 (dt): per output element i, each input's element at the
 * index its kind gives (0 FULL i, 1 SCALAR 0, 2 ROW i % c, 3 CHAN
 * i / inner % chans), then the steps, each rounded to dt as the op's own
 * kernel rounds (so the chain equals its nodes run alone, bit for bit),
 * and only the last value stored to y (contiguous, n elements). */
#define CU_CHAIN_IN 8
#define CU_CHAIN_STEPS 32
typedef struct cu_chain {
    int dt, n_in, n_steps;
    const void *in[CU_CHAIN_IN];
    int kind[CU_CHAIN_IN];
    int op[CU_CHAIN_STEPS];  /* unary: 0..19 from NEG; binary: 32 + CU_ADD.. */
    signed char a[CU_CHAIN_STEPS], b[CU_CHAIN_STEPS], cmp[CU_CHAIN_STEPS]; /* refs: 0 the previous value, 1 + k input k */
    double p[CU_CHAIN_STEPS];
    int64_t n, c, inner, chans;
} cu_chain;
int kiln__cu_chain(void *stream, const cu_chain *c, void *y);

/* y = c != 0 ? a : b; c is f32, f64 or i32 (ct), a, b, y of dtype dt. */
int kiln__cu_where(void *stream, int ct, const void *c, int dt, const void *a, const void *b, void *y, int64_t n,
                   const cu_walk *w);
/* g[i] += d[i] for i < n (both contiguous, dtype dt). */
int kiln__cu_acc(void *stream, int dt, void *g, const void *d, int64_t n);

/* Reductions: each of nout outputs walks `len` elements of x at stride
 * `step`, starting where the outer walk w (source 0, over nout elements)
 * puts it. SUM accumulates in double; MAX/MIN: a NaN wins; ARGMAX: the
 * first largest or first NaN, as an i32 index along the walk. */
enum { CU_RED_SUM = 0, CU_RED_MAX, CU_RED_MIN, CU_RED_ARGMAX };
int kiln__cu_reduce(void *stream, int op, int xt, const void *x, int yt, void *y, int64_t nout, const cu_walk *w,
                    int64_t len, int64_t step);
/* The same over every element of x (walk w over n elements) into y[0]. */
int kiln__cu_reduce_all(void *stream, int op, int xt, const void *x, int yt, void *y, int64_t n, const cu_walk *w);

/* ---- rows (k_nn.cu): dt CU_F32 or CU_F64 (every float operand of a call
 * alike), contiguous, one block per row ---- */

/* softmax / log_softmax over rows of n; causal: row r sees columns
 * j <= r % mrows + n - mrows (a row seeing none gives 0 / -inf). */
int kiln__cu_softmax(void *stream, int dt, int64_t rows, int64_t n, int64_t mrows, int causal, int log_out, const void *x,
                     void *y);
int kiln__cu_softmax_grad(void *stream, int dt, int64_t rows, int64_t n, int64_t mrows, int causal, int log_in,
                          const void *y, const void *gy, void *gx);
/* batch_norm in training mode over x [n, c, s]: y, and with rm, rv (else
 * NULL) the running statistics updated with momentum mom; w, b may be
 * NULL. Its backward: dx, and dw, db where not NULL. */
int kiln__cu_batch_norm(void *stream, int dt, int64_t n, int64_t c, int64_t s, double eps, double mom, const void *x,
                        void *rm, void *rv, const void *w, const void *b, void *y);
int kiln__cu_batch_norm_grad(void *stream, int dt, int64_t n, int64_t c, int64_t s, double eps, const void *x,
                             const void *w, const void *gy, void *dx, void *dw, void *db);
/* layer_norm (rms 0) or rms_norm (rms 1) of rows of c; w, b may be NULL. */
int kiln__cu_norm(void *stream, int dt, int64_t rows, int64_t c, double eps, int rms, const void *x, const void *w,
                  const void *b, void *y);
/* Their backward: dx, and dw / db when not NULL; stats: scratch of 2 rows doubles. */
int kiln__cu_norm_grad(void *stream, int dt, int64_t rows, int64_t c, double eps, int rms, const void *x, const void *w,
                       const void *gy, void *dx, void *dw, void *db, double *stats);
/* Mean cross-entropy over the rows whose label is kept into y[0]; loss:
 * scratch of rows doubles. The backward; cnt: scratch of one double. */
int kiln__cu_cross_entropy(void *stream, int dt, int64_t rows, int64_t c, int32_t ignore, const void *x,
                           const int32_t *labels, void *y, double *loss);
int kiln__cu_cross_entropy_grad(void *stream, int dt, int64_t rows, int64_t c, int32_t ignore, const void *x,
                                const int32_t *labels, const void *gy, void *gx, double *cnt);
/* y [n, d] (dtype yt) = rows idx of table [v, d] (dtype tt, strides ts0, ts1). */
int kiln__cu_get_rows(void *stream, int tt, const void *table, int64_t v, int64_t d, int64_t ts0, int64_t ts1,
                      const int32_t *idx, int64_t n, int yt, void *y);
/* y [v, d] = sum of rows [n, d] by idx. */
int kiln__cu_scatter_add_rows(void *stream, int dt, const void *rows, const int32_t *idx, int64_t n, int64_t d,
                              int64_t v, void *y);
/* y [m, n] (dtype yt) = one_hot(labels [m]). */
int kiln__cu_one_hot(void *stream, const int32_t *labels, int64_t m, int64_t n, int yt, void *y);
/* rope of x [rows, d], row r at position pos[r % t] (r % t when pos is NULL). */
int kiln__cu_rope(void *stream, int dt, const void *x, void *y, int64_t rows, int64_t t, int64_t d, int interleaved,
                  const int32_t *pos, double theta, int inverse);
/* Dropout in training: y = uniform01(seed ^ *run G, i) >= p ? x / (1 - p)
 * : 0 (backends/cpu/nn.c, core/rng.c); run, the graph's run number, in
 * device memory, so that a captured launch reads each run's. */
int kiln__cu_dropout(void *stream, int dt, const void *x, void *y, int64_t n, uint64_t seed, const uint64_t *run,
                     double p);
/* ---- attention (k_attention.cu), dt CU_F32 or CU_F64, contiguous;
 * shape = {B, Hq, Hk, T, S, D, Dv}; D, Dv <= 256 ---- */
/* O [B, Hq, T, Dv] and lse [B, Hq, T]. */
int kiln__cu_attention(void *stream, int dt, const int64_t *shape, int causal, double scale, const void *q,
                       const void *k, const void *v, void *o, void *lse);
/* dq, dk, dv from the forward's o and lse and dout; di: scratch of B*Hq*T doubles. */
int kiln__cu_attention_grad(void *stream, int dt, const int64_t *shape, int causal, double scale, const void *q,
                            const void *k, const void *v, const void *o, const void *lse, const void *dout, void *dq,
                            void *dk, void *dv, double *di);
/* kiln_attention_cached: shape = {N, Hq, Hk, B, S, D, Dv} (q [N, Hq, D],
 * k, v [N, Hk, D/Dv], the caches [B, Hk, S, D/Dv]); seq, pos i32 [N] in
 * device memory. The write launch puts the rows' keys and values into the
 * caches (a row outside them writes nothing and is noted in err, int32
 * [6]: 1, row, seq, pos, B, S, unless err[0] is already set); then one of
 * the attentions writes o [N, Hq, Dv] (NaN for a row outside the caches;
 * softcap > 0: scores s capped to softcap tanh(s / softcap)): a block per
 * (row, query head) here, or the tiles of k_attention_cached.cu. */
int kiln__cu_attention_cache_write(void *stream, int dt, const int64_t *shape, const int32_t *seq,
                                   const int32_t *pos, const void *k, const void *v, void *k_cache, void *v_cache,
                                   int32_t *err);
int kiln__cu_attention_cached(void *stream, int dt, const int64_t *shape, int64_t window, double scale,
                              double softcap, const int32_t *seq, const int32_t *pos, const void *q,
                              const void *k_cache, const void *v_cache, void *o);
/* The tiles' key splits for this shape (more than 1 wants nsplit * N*Hq *
 * (Dv + 1) elements of scratch), 0 where the tiles do not take it (D or Dv
 * over 256 in f32, over 128 in f64). */
int kiln__cu_attention_cached_splits(int dt, const int64_t *shape, int64_t window);
int kiln__cu_attention_cached_tiles(void *stream, int dt, const int64_t *shape, int64_t window, double scale,
                                    double softcap, int nsplit, const int32_t *seq, const int32_t *pos,
                                    const void *q, const void *k_cache, const void *v_cache, void *o, void *scratch);
/* ---- FlashAttention-2 style (k_attention_flash.cu): f32, D, Dv <= 128,
 * the same shape, operands and outputs as above ---- */
/* The key splits of a forward (decoding: a few query rows per kv head);
 * more than 1 wants nsplit * B*Hq*T * (Dv + 1) floats of scratch. */
int kiln__cu_flash_splits(const int64_t *shape);
int kiln__cu_flash_attention(void *stream, const int64_t *shape, int causal, double scale, const float *q,
                             const float *k, const float *v, float *o, float *lse, int nsplit, float *scratch);
int kiln__cu_flash_attention_grad(void *stream, const int64_t *shape, int causal, double scale, const float *q,
                                  const float *k, const float *v, const float *o, const float *lse, const float *dout,
                                  float *dq, float *dk, float *dv, double *di);
/* The same on tensor cores (k_attention_flash_tc.cu), mode CU_TC_TF32 or
 * CU_TC_BF16 (the products' inputs rounded to tf32 or bf16, summed in f32),
 * where kiln__cu_flash_tc_fits: D, Dv multiples of 16 up to 128, and for
 * the forward (grad 0) more query rows than decoding's; no split keys. */
enum { CU_TC_TF32 = 1, CU_TC_BF16 = 2 };
int kiln__cu_flash_tc_fits(const int64_t *shape, int grad);
int kiln__cu_flash_attention_tc(void *stream, int mode, const int64_t *shape, int causal, double scale,
                                const float *q, const float *k, const float *v, float *o, float *lse);
int kiln__cu_flash_attention_grad_tc(void *stream, int mode, const int64_t *shape, int causal, double scale,
                                     const float *q, const float *k, const float *v, const float *o,
                                     const float *lse, const float *dout, float *dq, float *dk, float *dv,
                                     double *di);
/* ---- convolution (k_conv.cu): IM2COL / COL2IM of ops/conv.c, f32 or f64
 * (dt), contiguous operands ---- */
typedef struct cu_conv {
    int64_t n, c, h, w, oh, ow; /* image [n, c, h, w], cols grid (or pooled image) oh x ow */
    int64_t kh, kw, sh, sw, ph, pw, dh, dw;
    int cn; /* cols as [c, kh, kw, n, oh, ow] (1) or [n, c, kh, kw, oh, ow] (0) */
    /* DFP only: a convolution's data gradient (ops/dfp.c, ip[2] = 2), the
     * image stored [c, n, h, w] and read with its taps running back:
     * column (b, y, z) of row (ci, ki, kj) at (y sh + ph - ki dh,
     * z sw + pw - kj dw); oh, ow the columns' grid */
    int flip;
} cu_conv;
/* cols = the taps of x (pad where a tap is outside the image). */
int kiln__cu_im2col(void *stream, int dt, const cu_conv *g, const void *x, void *cols, double pad);
/* img = the sum of the taps in cols that fall on each pixel, gathered per
 * pixel in the CPU's order (deterministic, no atomics). */
int kiln__cu_col2im(void *stream, int dt, const cu_conv *g, const void *cols, void *img);
/* The fused max-pool: y [n, c, oh, ow] = each window's max (pad outside,
 * a NaN wins); its backward gx [n, c, h, w] from x, y and gy. */
int kiln__cu_pool_max(void *stream, int dt, const cu_conv *g, const void *x, void *y, double pad);
int kiln__cu_pool_max_grad(void *stream, int dt, const cu_conv *g, const void *x, const void *y, const void *gy,
                           void *gx);
/* ---- DFP matmul (k_dfp.cu): quant/dfp.h's 14-bit codes, one exponent per operand ---- */
/* q = the codes of x [n] (f32); amax receives the largest |x| as f32 bits
 * (set to 0 first: kiln__dfp_quantize's amax_bits, from which the exponent
 * and the overflow bound follow on the device, with no round trip). */
int kiln__cu_dfp_quantize(void *stream, const float *x, int64_t n, int16_t *q, uint32_t *amax);
/* c [m, n] (f32) = op(A) op(B) of codes, A [m, k] ([k, m] when ta), B
 * [k, n] ([n, k] when tb); amax[0], amax[1]: the operands' bits from
 * kiln__cu_dfp_quantize. INT32 sums over chunks of 2 cp k (gemm_dfp.h),
 * each converted to f32 and added in order, then * 2^ea * 2^eb: the CPU's
 * results bit for bit. With img non-NULL, B's codes are an image [n, c, h,
 * w] whose conv2d columns (CN layout) B is (cols [c kh kw, n oh ow]; its
 * transpose when tb), gathered on the fly (0 outside the image). acc:
 * c += the product (a gradient it adds into), as the CPU's gemm_dfp_add. */
int kiln__cu_dfp_matmul(void *stream, int64_t m, int64_t n, int64_t k, const int16_t *a, int ta, const int16_t *b,
                        int tb, const cu_conv *img, const uint32_t *amax, float *c, int acc);
/* ---- quantized (k_quant.cu): qt a CU_Q* code, blocks contiguous from a block boundary ---- */
/* y[i] = element i, for i < n. */
int kiln__cu_dequantize(void *stream, int qt, const void *q, float *y, int64_t n);
/* y [n, d] = rows idx of table [v, d]. */
int kiln__cu_qget_rows(void *stream, int qt, const void *table, int64_t v, int64_t d, const int32_t *idx, int64_t n,
                       float *y);
/* The same from a view: y [n / cols, cols], row r's blocks at the byte
 * offset the walk w (source 0: byte strides) gives r over its leading dims. */
int kiln__cu_dequantize_rows(void *stream, int qt, const void *q, float *y, int64_t n, int64_t cols, const cu_walk *w);
/* NF4_DQ's absmax map (kiln__dynamic_map(true), 256 f32 on the host) into
 * device memory, in stream order; returns once it is there. */
int kiln__cu_nf4_dq_map(void *stream, const float *map);
/* y [m, n] = x [m, k] . W^T with W [n, k]. */
int kiln__cu_qmatmul(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k);
/* Many-row products (cu_qgemm.c): y [n] = f16 of elements i0 .. i0 + n - 1
 * of q (W's rows as one run of elements), x [n] f32 to f16; *big (one
 * unsigned, zeroed first) set where a finite value overflows f16. */
int kiln__cu_dequantize_h16(void *stream, int qt, const void *q, int64_t i0, void *y, int64_t n, unsigned *big);
int kiln__cu_f32_h16(void *stream, const float *x, void *y, int64_t n, unsigned *big);
/* kiln__cu_qmatmul's f32 product, run only where *flag is set (decided on the device). */
int kiln__cu_qmatmul_if(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k,
                        const unsigned *flag);
/* The same for Q8_0 and Q4_0 (qt) and m <= CU_QMV_MAX_M by integer dot
 * products, the CPU's batch-1 results bit for bit (k_qmv.cu); xq [m k]
 * and dx [m k / 32] are scratch for x's codes and scales; w even. */
enum { CU_QMV_MAX_M = 7 }; /* KILN_QMM_PANEL_MIN_M - 1: the CPU's batched paths from 8 rows */
int kiln__cu_qmv_i8(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k,
                    int8_t *xq, float *dx);
/* The same for ggml's K types and IQ4_XS (qt a CU_GGML code) against x
 * quantized to Q8_K (k_qmv_k.cu); xq [m k] and dx [m k / 256]; w even. */
int kiln__cu_qmv_q8k(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k,
                     int8_t *xq, float *dx);
/* The same for Q4_1, Q5_0, Q5_1 and IQ4_NL (qt a CU_GGML code) against x
 * quantized to Q8_1 or Q8_0 (k_qmv_32.cu); xq [m k], dx and sx [m k / 32]. */
int kiln__cu_qmv_q32(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k,
                     int8_t *xq, float *dx, float *sx);
/* x [nblk 32] to int8 codes xq and f16-rounded scales dx as the CPU's
 * Q8_0; with sx non-NULL, Q8_1's f16 sums s too (k_qmv.cu). */
void kiln__cu_quantize_x32(void *stream, const float *x, int8_t *xq, float *dx, float *sx, int64_t nblk);

/* ---- optimizer steps (k_optim.cu): in place, contiguous; h is the hyper
 * leaf (f32) on the device (optim/sgd.c, adam.c, lion.c give its layout);
 * the arrays f32, or f64 when f64 ---- */
int kiln__cu_sgd(void *stream, int f64, void *p, const void *grad, void *buf, int64_t n, const float *h, int nesterov,
                 int first);
int kiln__cu_adam(void *stream, int f64, void *p, const void *grad, void *m, void *v, void *vmax, int64_t n,
                  const float *h, int decoupled);
int kiln__cu_lion(void *stream, int f64, void *p, const void *grad, void *m, int64_t n, const float *h);
/* The 8-bit steps: codes (a byte per element) and one absmax per 256
 * elements per state; maps: the signed then the unsigned map [512]. */
int kiln__cu_adam8(void *stream, float *p, const float *grad, void *mq, float *ma, void *vq, float *va, const float *maps,
                   int64_t n, const float *h, int decoupled);
int kiln__cu_lion8(void *stream, float *p, const float *grad, void *mq, float *ma, const float *maps, int64_t n,
                   const float *h);
int kiln__cu_sgd8(void *stream, float *p, const float *grad, void *bq, float *ba, const float *maps, int64_t n,
                  const float *h, int nesterov, int first);

/* ---- low-rank optimizer steps (k_optim_lowrank.cu; the GEMMs are cuBLAS,
 * cu_optim_lowrank.c): f32, contiguous; h is the hyper leaf on the device ---- */
/* GaLore: sc[0] = -(lr sqrt(bc2) / bc1) * scale, sc[1] = 1, sc[2] = eps
 * (bnb: eps sqrt(bc2)), from h and the step number in it (h[5], h[6]). */
int kiln__cu_galore_scalars(void *stream, const float *h, double scale, int bnb, float *sc);
/* Adam on R [n] in place (R becomes N), f32 moments or 8-bit states (codes
 * a byte per element, absmax per 256, maps [512]); eps = sc[2]. */
int kiln__cu_lowrank_adam(void *stream, float *r, float *m, float *v, int64_t n, const float *h, const float *sc);
int kiln__cu_lowrank_adam8(void *stream, float *r, void *mq, void *vq, float *ma, float *va, const float *maps,
                           int64_t n, const float *h, const float *sc);
/* w *= 1 - lr wd (as w + w * -(lr wd)) when wd > 0. */
int kiln__cu_galore_decay(void *stream, float *w, int64_t n, const float *h);
/* APOLLO: P [np] of the projector, hashed_seed = kiln__hash64(proj_seed),
 * inv = 1 / sqrt(rank). */
int kiln__cu_apollo_projector(void *stream, float *P, int64_t np, uint64_t hashed_seed, double inv);
/* The moments of R in place and S [3, nch] (double): per channel |Rt|^2,
 * |R|^2, |G_c|^2; p, G [m, n], R [m, rank] (right) or [rank, n]. */
int kiln__cu_apollo_moments(void *stream, const float *G, const float *R, float *em, float *ev, const float *h,
                            double *S, int64_t m, int64_t n, int64_t rank, int right);
/* F [nch + 1]: each channel's factor of G and the decay; prev [1] (f64)
 * updated; the step number read from h (h[5], h[6]). */
int kiln__cu_apollo_norm(void *stream, const double *S, int64_t nch, const float *h, double *prev, float *F,
                         double sqrt_scale, int mini);
/* p = p * F[nch] + F[channel] * G. */
int kiln__cu_apollo_update(void *stream, float *p, const float *G, const float *F, int64_t m, int64_t n, int right);

#ifdef __cplusplus
}
#endif

#endif
