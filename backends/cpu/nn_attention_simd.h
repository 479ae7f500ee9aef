/* nn_attention_simd.h — the small loops blocked (flash) attention is
 * built from, and the blocked forward/backward entry points.
 *
 * The drivers (nn_attention_flash.c) only ever multiply small tiles
 * (at most KILN_ATTN_BLOCK rows/columns by the head size), take row
 * maxima and exponentiate rows; those three loops come in variants:
 * scalar f64 (gradient checks), scalar f32 and f32 for AVX2, AVX-512 and
 * NEON (nn_attention_avx2.c, _avx512.c, _neon.c), picked per call from
 * kiln__cpu_caps(). */
#ifndef KILN_NN_ATTENTION_SIMD_H
#define KILN_NN_ATTENTION_SIMD_H

#include "internal.h"

/* Rows of queries and columns of keys per tile. */
#define KILN_ATTN_BLOCK 64

/*  gemm:    C[m, n] = A[m, k] B[k, n] (+ C when acc); A's element (i, p) is
 *           a[i * ars + p * acs] (ars = lda, acs = 1 row-major; swapped
 *           for a transposed A), B and C row-major with row strides ldb,
 *           ldc; never reads C when !acc.
 *  exp_sum: x[j] = exp(x[j] * scale - sub) for j < n (exp(-inf) = 0);
 *           returns the sum of the new x.
 *  max:     the largest of x[0..n-1], n >= 1. */
#define KILN_ATTN_OPS(T)                                                                                       \
    struct {                                                                                                   \
        void (*gemm)(int64_t m, int64_t n, int64_t k, const T *a, int64_t ars, int64_t acs, const T *b, int64_t ldb, \
                     T *c, int64_t ldc, bool acc);                                                                   \
        T (*exp_sum)(T *x, int64_t n, T scale, T sub);                                                         \
        T (*max)(const T *x, int64_t n);                                                                       \
    }
typedef KILN_ATTN_OPS(float) kiln_attn_ops_f32;
typedef KILN_ATTN_OPS(double) kiln_attn_ops_f64;

extern const kiln_attn_ops_f64 kiln__attn_ops_f64;
extern const kiln_attn_ops_f32 kiln__attn_ops_f32_scalar;
#if defined(__x86_64__)
extern const kiln_attn_ops_f32 kiln__attn_ops_f32_avx2, kiln__attn_ops_f32_avx512;
#endif
#if defined(__aarch64__)
extern const kiln_attn_ops_f32 kiln__attn_ops_f32_neon;
#endif
/* The f32 loops for the caps in force. */
const kiln_attn_ops_f32 *kiln__attn_ops_f32(void);

/* q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv]; query head h reads
 * kv head h / (Hq / Hkv); causal: query i sees key j iff j <= i + S - T. */
typedef struct kiln_attn_geom {
    int64_t b, hq, hkv, t, s, d, dv;
    bool causal;
    double scale;
    int n_threads;
    double softcap; /* > 0: scores s become softcap tanh(s / softcap) (the forward only) */
} kiln_attn_geom;

/* o [B, Hq, T, Dv] and lse [B, Hq, T] (log-sum-exp of each query's scaled
 * scores; +inf for a query that sees no key, whose o row is zero). */
kiln_status kiln__flash_fwd_f32(const kiln_attn_geom *g, const kiln_attn_ops_f32 *ops, const float *q,
                                const float *k, const float *v, float *o, float *lse);
kiln_status kiln__flash_fwd_f64(const kiln_attn_geom *g, const kiln_attn_ops_f64 *ops, const double *q,
                                const double *k, const double *v, double *o, double *lse);
/* kiln_attention_cached's attention (its writes done): q, o [T, Hq, D/Dv]
 * (T rows), k, v the caches [B, Hkv, S, D/Dv]; row i over keys 0 .. pos[i]
 * (window > 0: the last window of them) of sequence seq[i]; b, causal unused. */
kiln_status kiln__flash_rows_f32(const kiln_attn_geom *g, const kiln_attn_ops_f32 *ops, const float *q,
                                 const float *k, const float *v, const int32_t *seq, const int32_t *pos,
                                 int64_t window, float *o);
kiln_status kiln__flash_rows_f64(const kiln_attn_geom *g, const kiln_attn_ops_f64 *ops, const double *q,
                                 const double *k, const double *v, const int32_t *seq, const int32_t *pos,
                                 int64_t window, double *o);
/* dq, dk, dv (shaped as q, k, v) from o, lse (the forward's) and dO. */
kiln_status kiln__flash_bwd_f32(const kiln_attn_geom *g, const kiln_attn_ops_f32 *ops, const float *q,
                                const float *k, const float *v, const float *o, const float *lse, const float *dout,
                                float *dq, float *dk, float *dv);
kiln_status kiln__flash_bwd_f64(const kiln_attn_geom *g, const kiln_attn_ops_f64 *ops, const double *q,
                                const double *k, const double *v, const double *o, const double *lse,
                                const double *dout, double *dq, double *dk, double *dv);

#endif
