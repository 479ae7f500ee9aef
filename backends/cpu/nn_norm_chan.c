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

/* Channel c's mean and biased variance (two passes, so it never cancels). */
static void stats_f64(const double *x, chan_geom g, int64_t c, double *mean, double *var) {
    double m = 0.0, v = 0.0, count = (double)(g.n * g.s);
    for (int64_t i = 0; i < g.n; i++)
        for (int64_t j = 0; j < g.s; j++) m += x[(i * g.c + c) * g.s + j];
    m /= count;
    for (int64_t i = 0; i < g.n; i++)
        for (int64_t j = 0; j < g.s; j++) {
            double d = x[(i * g.c + c) * g.s + j] - m;
            v += d * d;
        }
    *mean = m;
    *var = v / count;
}

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
    for (int64_t c = c0; c < c1; c++) {
        double mean, var, w = wt ? get(wt, c) : 1.0, b = bt ? get(bt, c) : 0.0;
        if (node->dtype == KILN_F64) {
            const double *x = xt->data;
            double *y = node->data;
            stats_f64(x, g, c, &mean, &var);
            double rstd = 1.0 / sqrt(var + eps);
            for (int64_t i = 0; i < g.n; i++)
                for (int64_t j = 0, o = (i * g.c + c) * g.s; j < g.s; j++) y[o + j] = (x[o + j] - mean) * rstd * w + b;
        } else {
            const float *x = xt->data;
            float *y = node->data, hi, lo;
            stats_f32(v, x, g, c, &mean, &var, &hi, &lo);
            float rstd = (float)(1.0 / sqrt(var + eps));
            for (int64_t i = 0; i < g.n; i++) {
                int64_t o = (i * g.c + c) * g.s;
                v->norm_fwd(x + o, NULL, NULL, y + o, g.s, hi, lo, rstd);
                if (wt) v->scale(y + o, g.s, (float)w);
                if (bt) v->add_const(y + o, y + o, g.s, (float)b, 0.0f);
            }
        }
        if (has_r) { /* torch's update: the running variance is the unbiased one */
            kiln__types[rm->dtype].set(rm->data, c, (1.0 - mom) * get(rm, c) + mom * mean);
            kiln__types[rv->dtype].set(rv->data, c, (1.0 - mom) * get(rv, c) + mom * var * count / (count - 1.0));
        }
    }
}

/* Tasks of one channel each, on several threads when there is work. */
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
    for (int64_t c = c0; c < c1; c++) {
        double mean, var, sg = 0.0, sgx = 0.0, w = wt ? get(wt, c) : 1.0;
        if (node->dtype == KILN_F64) {
            const double *x = xt->data, *gy = gt->data;
            double *dx = node->data;
            stats_f64(x, g, c, &mean, &var);
            double rstd = 1.0 / sqrt(var + eps);
            for (int64_t i = 0; i < g.n; i++)
                for (int64_t j = 0, o = (i * g.c + c) * g.s; j < g.s; j++) {
                    sg += gy[o + j];
                    sgx += gy[o + j] * (x[o + j] - mean) * rstd;
                }
            double ca = sg / count, cb = sgx / count;
            for (int64_t i = 0; i < g.n; i++)
                for (int64_t j = 0, o = (i * g.c + c) * g.s; j < g.s; j++)
                    dx[o + j] = w * rstd * (gy[o + j] - ca - (x[o + j] - mean) * rstd * cb);
            if (has_w) dx[numel + c] = sgx;
            if (has_b) dx[numel + has_w * g.c + c] = sg;
        } else {
            const float *x = xt->data, *gy = gt->data;
            float *dx = node->data, hi, lo;
            stats_f32(v, x, g, c, &mean, &var, &hi, &lo);
            float rstd = (float)(1.0 / sqrt(var + eps));
            for (int64_t i = 0; i < g.n; i++) {
                double s1, s2;
                int64_t o = (i * g.c + c) * g.s;
                v->norm_bwd_sums(x + o, gy + o, NULL, g.s, hi, lo, rstd, NULL, NULL, &s1, &s2);
                sg += s1;
                sgx += s2;
            }
            float ca = (float)(sg / count), cb = (float)(sgx / count);
            for (int64_t i = 0; i < g.n; i++) {
                int64_t o = (i * g.c + c) * g.s;
                v->norm_bwd_dx(x + o, gy + o, NULL, dx + o, g.s, hi, lo, rstd, ca, cb);
                if (wt) v->scale(dx + o, g.s, (float)w);
            }
            if (has_w) dx[numel + c] = (float)sgx;
            if (has_b) dx[numel + has_w * g.c + c] = (float)sg;
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
