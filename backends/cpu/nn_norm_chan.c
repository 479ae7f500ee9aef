/* nn_norm_chan.c — CPU kernels for batch_norm in training mode and its
 * fused backward BATCH_NORM_GRAD (layouts in ops/nn_norm_chan.c).
 *
 * x [N, C, S] is walked channel by channel, one channel per task: its N
 * rows of S contiguous values. Statistics are summed in double, row by
 * row in order, so results do not depend on the threads. f64 runs in
 * double loops; f32 rows use the row primitives of nn_vec.h. */
#include "internal.h"
#include "nn_kernels.h"
#include "nn_vec.h"
#include "pool.h"

#include <math.h>

typedef struct chan_geom {
    int64_t n, c, s; /* x viewed as [N, C, S] */
} chan_geom;

static chan_geom geom_of(const kiln_tensor *x) {
    return (chan_geom){x->shape[0], x->shape[1], kiln__numel(x->ndim - 2, x->shape + 2)};
}

/* Channels are taken CHAN_BLOCK at a time. The double loops walk a
 * block's values in memory order: row i holds channel c0 + k's S values
 * at (i * C + c0 + k) * S + j, the block's side by side (a walk channel
 * by channel would stride C * S values, the same cache set each time in
 * BatchNorm1d's [N, C]). */
#define CHAN_BLOCK 64
#define BLOCK_FOR(g, c0, nc, k, o, ...)                                     \
    for (int64_t i_ = 0; i_ < (g).n; i_++)                                  \
        for (int64_t k = 0, o = (i_ * (g).c + (c0)) * (g).s; k < (nc); k++) \
            for (int64_t e_ = o + (g).s; o < e_; o++) __VA_ARGS__

/* The double loops of channels c0 .. c0 + nc - 1, on T = double (f64) or
 * float (f32 rows too short for the row primitives): the mean and biased
 * variance (two passes, so nothing cancels), y, and the backward's
 * sg = sum(gy), sgx = sum(gy * xhat) and dx (with w, rstd per channel). */
#define CHAN_LOOPS(T, SFX)                                                                                           \
    static void stats_##SFX(const T *x, chan_geom g, int64_t c0, int64_t nc, double *mean, double *var) {            \
        double count = (double)(g.n * g.s);                                                                           \
        for (int64_t k = 0; k < nc; k++) mean[k] = var[k] = 0.0;                                                      \
        BLOCK_FOR(g, c0, nc, k, o, mean[k] += x[o]);                                                                  \
        for (int64_t k = 0; k < nc; k++) mean[k] /= count;                                                            \
        BLOCK_FOR(g, c0, nc, k, o, var[k] += ((double)x[o] - mean[k]) * ((double)x[o] - mean[k]));                    \
        for (int64_t k = 0; k < nc; k++) var[k] /= count;                                                             \
    }                                                                                                                 \
    static void fwd_##SFX(const T *x, T *y, chan_geom g, int64_t c0, int64_t nc, const double *mean,                 \
                          const double *a, const double *b) { /* y = (x - mean) * a + b */                            \
        BLOCK_FOR(g, c0, nc, k, o, y[o] = (T)(((double)x[o] - mean[k]) * a[k] + b[k]));                               \
    }                                                                                                                 \
    static void bwd_##SFX(const T *x, const T *gy, T *dx, chan_geom g, int64_t c0, int64_t nc, const double *mean,   \
                          const double *rstd, const double *w, double *sg, double *sgx) {                             \
        double count = (double)(g.n * g.s);                                                                           \
        for (int64_t k = 0; k < nc; k++) sg[k] = sgx[k] = 0.0;                                                        \
        BLOCK_FOR(g, c0, nc, k, o, {                                                                                  \
            sg[k] += gy[o];                                                                                           \
            sgx[k] += gy[o] * ((double)x[o] - mean[k]) * rstd[k];                                                     \
        });                                                                                                           \
        BLOCK_FOR(g, c0, nc, k, o,                                                                                    \
                  dx[o] = (T)(w[k] * rstd[k] *                                                                        \
                              (gy[o] - sg[k] / count - ((double)x[o] - mean[k]) * rstd[k] * sgx[k] / count)));        \
    }
CHAN_LOOPS(double, f64)
CHAN_LOOPS(float, short)

/* Rows shorter than this take the double loops in f32 too: a row
 * primitive's call would cost more than its work. */
#define CHAN_VEC_MIN_S 32

/* The f32 twin: the mean summed from the channel's first value (so values
 * far from 0 keep their spread) and returned as hi + lo floats too. */
static void stats_f32(const kiln_nn_vec *v, const float *x, chan_geom g, int64_t c, double *mean, double *var,
                      float *mean_hi, float *mean_lo) {
    double count = (double)(g.n * g.s), dev = 0.0, sq = 0.0;
    float x0 = x[c * g.s];
    for (int64_t i = 0; i < g.n; i++) dev += v->sum_dev(x + (i * g.c + c) * g.s, g.s, x0);
    *mean = (double)x0 + dev / count;
    *mean_hi = (float)*mean;
    *mean_lo = (float)(*mean - (double)*mean_hi);
    for (int64_t i = 0; i < g.n; i++) sq += v->sum_sq_dev(x + (i * g.c + c) * g.s, g.s, *mean_hi);
    *var = sq / count;
}

static double get(const kiln_tensor *t, int64_t i) { return kiln__types[t->dtype].get(t->data, i); }

/* BATCH_NORM (training): src x [, running mean, var] [, w] [, b]. */
static void bn_chans(void *arg, int64_t c0, int64_t c1, int tid) {
    kiln_tensor *node = arg, *xt = node->src[0];
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0, has_r = node->ip[2] != 0;
    kiln_tensor *rm = has_r ? node->src[1] : NULL, *rv = has_r ? node->src[2] : NULL;
    kiln_tensor *wt = has_w ? node->src[1 + 2 * has_r] : NULL, *bt = has_b ? node->src[1 + 2 * has_r + has_w] : NULL;
    const chan_geom g = geom_of(xt);
    const double eps = node->fp[0], mom = node->fp[1], count = (double)(g.n * g.s);
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t cb = c0; cb < c1; cb += CHAN_BLOCK) {
        int64_t nc = c1 - cb < CHAN_BLOCK ? c1 - cb : CHAN_BLOCK;
        double mean[CHAN_BLOCK], var[CHAN_BLOCK], a[CHAN_BLOCK], b[CHAN_BLOCK];
        bool loops = node->dtype == KILN_F64 || g.s < CHAN_VEC_MIN_S;
        if (node->dtype == KILN_F64) stats_f64(xt->data, g, cb, nc, mean, var);
        else if (loops) stats_short(xt->data, g, cb, nc, mean, var);
        for (int64_t k = 0; k < nc; k++) {
            int64_t c = cb + k;
            double w = wt ? get(wt, c) : 1.0, bias = bt ? get(bt, c) : 0.0;
            if (loops) {
                a[k] = w / sqrt(var[k] + eps), b[k] = bias;
                continue;
            }
            const float *x = xt->data;
            float *y = node->data, hi, lo;
            stats_f32(v, x, g, c, &mean[k], &var[k], &hi, &lo);
            float rstd = (float)(1.0 / sqrt(var[k] + eps));
            for (int64_t i = 0; i < g.n; i++) {
                int64_t o = (i * g.c + c) * g.s;
                v->norm_fwd(x + o, NULL, NULL, y + o, g.s, hi, lo, rstd);
                if (wt) v->scale(y + o, g.s, (float)w);
                if (bt) v->add_const(y + o, y + o, g.s, (float)bias, 0.0f);
            }
        }
        if (node->dtype == KILN_F64) fwd_f64(xt->data, node->data, g, cb, nc, mean, a, b);
        else if (loops) fwd_short(xt->data, node->data, g, cb, nc, mean, a, b);
        for (int64_t k = 0; has_r && k < nc; k++) { /* torch's update: the running variance is the unbiased one */
            int64_t c = cb + k;
            kiln__types[rm->dtype].set(rm->data, c, (1.0 - mom) * get(rm, c) + mom * mean[k]);
            kiln__types[rv->dtype].set(rv->data, c, (1.0 - mom) * get(rv, c) + mom * var[k] * count / (count - 1.0));
        }
    }
}

/* Tasks of channels, on several threads when there is work. */
static void for_chans(const kiln_tensor *x, const kiln_exec *ex, kiln_pool_fn *fn, void *arg) {
    int64_t c = x->shape[1], numel = kiln_tensor_numel(x);
    kiln__pool_for(c, 1, numel > KILN_NN_PAR_WORK ? ex->n_threads : 1, fn, arg);
}

static kiln_status bn_kernel(kiln_tensor *node, const kiln_exec *ex) {
    for_chans(node->src[0], ex, bn_chans, node);
    return KILN_OK;
}

/* BATCH_NORM_GRAD: src x [, w], gy; packed dx, then dw [C] (has_w), then
 * db [C] (has_b). Per channel, with g = gy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * i.e. w * rstd * (gy - mean(gy) - xhat * mean(gy * xhat)). */
static void bn_grad_chans(void *arg, int64_t c0, int64_t c1, int tid) {
    kiln_tensor *node = arg, *xt = node->src[0];
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0;
    kiln_tensor *wt = has_w ? node->src[1] : NULL, *gt = node->src[1 + has_w];
    const chan_geom g = geom_of(xt);
    const int64_t numel = g.n * g.c * g.s;
    const double eps = node->fp[0], count = (double)(g.n * g.s);
    const kiln_nn_vec *v = kiln__nn_vec();
    (void)tid;
    for (int64_t cb = c0; cb < c1; cb += CHAN_BLOCK) {
        int64_t nc = c1 - cb < CHAN_BLOCK ? c1 - cb : CHAN_BLOCK;
        double mean[CHAN_BLOCK], var[CHAN_BLOCK], rstd[CHAN_BLOCK], w[CHAN_BLOCK], sg[CHAN_BLOCK], sgx[CHAN_BLOCK];
        bool loops = node->dtype == KILN_F64 || g.s < CHAN_VEC_MIN_S;
        if (node->dtype == KILN_F64) stats_f64(xt->data, g, cb, nc, mean, var);
        else if (loops) stats_short(xt->data, g, cb, nc, mean, var);
        for (int64_t k = 0; k < nc; k++) {
            int64_t c = cb + k;
            w[k] = wt ? get(wt, c) : 1.0;
            if (loops) {
                rstd[k] = 1.0 / sqrt(var[k] + eps);
                continue;
            }
            const float *x = xt->data, *gy = gt->data;
            float *dx = node->data, hi, lo;
            stats_f32(v, x, g, c, &mean[k], &var[k], &hi, &lo);
            float r = (float)(1.0 / sqrt(var[k] + eps));
            sg[k] = sgx[k] = 0.0;
            for (int64_t i = 0; i < g.n; i++) {
                double s1, s2;
                int64_t o = (i * g.c + c) * g.s;
                v->norm_bwd_sums(x + o, gy + o, NULL, g.s, hi, lo, r, NULL, NULL, &s1, &s2);
                sg[k] += s1;
                sgx[k] += s2;
            }
            float ca = (float)(sg[k] / count), cb2 = (float)(sgx[k] / count);
            for (int64_t i = 0; i < g.n; i++) {
                int64_t o = (i * g.c + c) * g.s;
                v->norm_bwd_dx(x + o, gy + o, NULL, dx + o, g.s, hi, lo, r, ca, cb2);
                if (wt) v->scale(dx + o, g.s, (float)w[k]);
            }
        }
        if (node->dtype == KILN_F64) bwd_f64(xt->data, gt->data, node->data, g, cb, nc, mean, rstd, w, sg, sgx);
        else if (loops) bwd_short(xt->data, gt->data, node->data, g, cb, nc, mean, rstd, w, sg, sgx);
        for (int64_t k = 0; k < nc; k++) {
            if (has_w) kiln__types[node->dtype].set(node->data, numel + cb + k, sgx[k]);
            if (has_b) kiln__types[node->dtype].set(node->data, numel + has_w * g.c + cb + k, sg[k]);
        }
    }
}

static kiln_status bn_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    for_chans(node->src[0], ex, bn_grad_chans, node);
    return KILN_OK;
}

void kiln__cpu_register_nn_norm_chan(kiln_cpu_kernel *tab) {
    tab[KILN_OP_BATCH_NORM] = bn_kernel;
    tab[KILN_OP_BATCH_NORM_GRAD] = bn_grad_kernel;
}
