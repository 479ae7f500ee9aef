/* nn_vec.h — the f32 row primitives the fused nn kernels (softmax,
 * log_softmax, cross_entropy, layer_norm, rms_norm, batch_norm and their backward
 * kernels) are built from, one table per instruction set, chosen at run
 * time by kiln__nn_vec(). Each table is the same template (nn_vec_body.h)
 * instantiated with one ISA's vector macros: nn_vec.c (portable scalar,
 * the reference), nn_vec_avx2.c, nn_vec_avx512.c, nn_vec_neon.c.
 *
 * Sums come back as double: lanes accumulate in f32 over short blocks and
 * each block is added in double, so long rows lose no accuracy. */
#ifndef KILN_NN_VEC_H
#define KILN_NN_VEC_H

#include <stdint.h>

typedef struct kiln_nn_vec {
    const char *name;
    float (*max)(const float *x, int64_t n);
    /* y = exp(x - m) (y may be NULL: sum only); returns sum(exp(x - m)) */
    double (*exp_sum)(const float *x, float *y, int64_t n, float m);
    void (*scale)(float *y, int64_t n, float s);                       /* y *= s */
    /* Constants that may be far from 0 come as hi + lo floats: */
    void (*add_const)(const float *x, float *y, int64_t n, float c, float c_lo); /* y = x + c + c_lo */
    /* y = exp(x - m - m_lo) * s */
    void (*exp_scale)(const float *x, float *y, int64_t n, float m, float m_lo, float s);
    double (*sum)(const float *x, int64_t n);
    double (*dot)(const float *a, const float *b, int64_t n);
    double (*sum_dev)(const float *x, int64_t n, float c);    /* sum(x - c) */
    double (*sum_sq_dev)(const float *x, int64_t n, float c); /* sum((x - c)^2) */
    /* gx = y * (gy - s) (softmax backward) */
    void (*softmax_bwd)(const float *y, const float *gy, float *gx, int64_t n, float s);
    /* gx = gy - exp(y) * s (log_softmax backward) */
    void (*log_softmax_bwd)(const float *y, const float *gy, float *gx, int64_t n, float s);
    /* The norms take the row mean as mean + mean_lo (two floats, so a
     * mean far from 0 keeps its low bits); xhat = (x - mean - mean_lo) * rstd. */
    /* y = xhat [* w] [+ b]; w, b may be NULL */
    void (*norm_fwd)(const float *x, const float *w, const float *b, float *y, int64_t n, float mean, float mean_lo,
                     float rstd);
    /* g = gy [* w]: *sg = sum(g), *sgx = sum(g * xhat);
     * dw += gy * xhat and db += gy where they are not NULL */
    void (*norm_bwd_sums)(const float *x, const float *gy, const float *w, int64_t n, float mean, float mean_lo,
                          float rstd, float *dw, float *db, double *sg, double *sgx);
    /* dx = rstd * (g - ca - xhat * cb) */
    void (*norm_bwd_dx)(const float *x, const float *gy, const float *w, float *dx, int64_t n, float mean,
                        float mean_lo, float rstd, float ca, float cb);
    void (*add)(float *acc, const float *x, int64_t n); /* acc += x */
    /* batch norm's passes (nn_norm_chan.c), shifted by c so that values far
     * from 0 keep their spread: *s1 += sum(x - c), *s2 += sum((x - c)^2) */
    void (*sums_dev)(const float *x, int64_t n, float c, double *s1, double *s2);
    /* y = (x - c) * a + b, then the ReLU (y < 0 ? 0 : y) if relu; NEON gives +0 for -0 */
    void (*affine)(const float *x, float *y, int64_t n, float c, float a, float b, int relu);
    /* y = relu((x - c) * a + b + r), r added first when r_first (an add's order) */
    void (*affine_add_relu)(const float *x, const float *r, float *y, int64_t n, float c, float a, float b,
                            int r_first);
    /* y = g * (m != s ? 1 : 0), a ReLU's gradient mask (NaN != s) */
    void (*mask_mul)(const float *g, const float *m, float s, float *y, int64_t n);
    /* s[0..3] += sum(x - c), sum((x - c)^2), sum(gy), sum(gy * (x - c)) */
    void (*bn_bwd_sums)(const float *x, const float *gy, int64_t n, float c, double *s);
    /* dx = gy * a + (x - c) * b + k */
    void (*bn_bwd_dx)(const float *x, const float *gy, float *dx, int64_t n, float c, float a, float b, float k);
} kiln_nn_vec;

/* The table for the caps in force (kiln__cpu_caps()). */
const kiln_nn_vec *kiln__nn_vec(void);
/* Each ISA's table; NULL where this build or CPU has none. */
const kiln_nn_vec *kiln__nn_vec_scalar(void);
const kiln_nn_vec *kiln__nn_vec_avx2(void);
const kiln_nn_vec *kiln__nn_vec_avx512(void);
const kiln_nn_vec *kiln__nn_vec_neon(void);

#endif
