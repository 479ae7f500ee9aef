/* nn_norm_chan.c — CPU kernels for batch_norm in training mode and its
 * fused backward BATCH_NORM_GRAD (layouts in ops/nn_norm_chan.c).
 *
 * x [N, C, S] is walked channel by channel, one channel per task: its N
 * rows of S contiguous values. x may be stored [C, N, S] (ip[3], a
 * convolution's product permuted): its rows are then read there, y is
 * written [N, C, S] and dx in x's own order. Statistics are summed in
 * double, row by row in order, so results do not depend on the threads.
 * f64 runs in double loops; f32 rows use the row primitives of nn_vec.h,
 * two passes each way: the sums in one (shifted by the channel's first
 * value, so values far from 0 keep their spread), then y or dx as one
 * affine map of x (and gy). A ReLU fused after the norm (core/fuse.c) is
 * applied as y is written, into the ReLU's output. */
#include "cpu.h"
#include "nn_kernels.h"
#include "nn_vec.h"
#include "pool.h"

#include <math.h>

typedef struct chan_geom {
    int64_t n, c, s; /* x viewed as [N, C, S] */
    int64_t xn, xc;  /* x's strides (and dx's) along N and C; y and gy are [N, C, S] */
} chan_geom;

static chan_geom geom_of(const kiln_tensor *node, const kiln_tensor *x) {
    int64_t n = x->shape[0], c = x->shape[1], s = kiln__numel(x->ndim - 2, x->shape + 2);
    return node->ip[3] ? (chan_geom){n, c, s, s, n * s} : (chan_geom){n, c, s, c * s, s};
}

/* Channels are taken CHAN_BLOCK at a time. The double loops walk a
 * block's values in y's memory order: row i holds channel c0 + k's S
 * values at (i * C + c0 + k) * S + j (oy) and at i * xn + (c0 + k) * xc
 * + j in x (ox); in the plain layout both are the same (a walk channel by
 * channel would stride C * S values, the same cache set each time in
 * BatchNorm1d's [N, C]). */
#define CHAN_BLOCK 64
#define BLOCK_FOR(g, c0, nc, k, ox, oy, ...)                                                       \
    for (int64_t i_ = 0; i_ < (g).n; i_++)                                                         \
        for (int64_t k = 0; k < (nc); k++)                                                         \
            for (int64_t j_ = 0, ox = i_ * (g).xn + ((c0) + k) * (g).xc, oy = (i_ * (g).c + (c0) + k) * (g).s; \
                 j_ < (g).s; j_++, ox++, oy++)                                                     \
                __VA_ARGS__

/* What a fused chain (core/fuse.c) adds after the norm: the ReLU, and
 * before it the add of res, [N, C, S] as y, in the add's order. */
typedef struct bn_tail {
    const void *res;
    bool res_first, relu;
} bn_tail;

/* The ReLU's gradient mask a fused chain (core/fuse.c) puts on gy as
 * batch_norm_grad reads it: gy = g * (y != s), the values of the cmp and
 * the mul it replaces (y NULL: none). */
typedef struct bn_mask {
    const void *y;
    double s;
} bn_mask;

/* The double loops of channels c0 .. c0 + nc - 1, on T = double (f64) or
 * float (f32 rows too short for the row primitives): the mean and biased
 * variance (two passes, so nothing cancels), y, and the backward's
 * sg = sum(gy), sgx = sum(gy * xhat) and dx (with w, rstd per channel). */
#define CHAN_LOOPS(T, SFX)                                                                                           \
    static void stats_##SFX(const T *x, chan_geom g, int64_t c0, int64_t nc, double *mean, double *var) {            \
        double count = (double)(g.n * g.s);                                                                           \
        for (int64_t k = 0; k < nc; k++) mean[k] = var[k] = 0.0;                                                      \
        BLOCK_FOR(g, c0, nc, k, o, oy_, { mean[k] += x[o]; (void)oy_; });                                             \
        for (int64_t k = 0; k < nc; k++) mean[k] /= count;                                                            \
        BLOCK_FOR(g, c0, nc, k, o, oy_, { var[k] += ((double)x[o] - mean[k]) * ((double)x[o] - mean[k]); (void)oy_; }); \
        for (int64_t k = 0; k < nc; k++) var[k] /= count;                                                             \
    }                                                                                                                 \
    static void fwd_##SFX(const T *x, T *y, chan_geom g, int64_t c0, int64_t nc, const double *mean,                 \
                          const double *a, const double *b, const bn_tail *tail) { /* y = (x - mean) * a + b */      \
        const T *r = tail->res;                                                                                       \
        BLOCK_FOR(g, c0, nc, k, o, oy, {                                                                              \
            T v = (T)(((double)x[o] - mean[k]) * a[k] + b[k]);                                                        \
            if (r) v = tail->res_first ? r[oy] + v : v + r[oy];                                                       \
            y[oy] = tail->relu && v < 0 ? 0 : v; /* the ReLU's rule: NaN and -0 stay */                               \
        });                                                                                                           \
    }                                                                                                                 \
    static void bwd_##SFX(const T *x, const T *gy, T *dx, chan_geom g, int64_t c0, int64_t nc, const double *mean,   \
                          const double *rstd, const double *w, double *sg, double *sgx, const bn_mask *m) {           \
        double count = (double)(g.n * g.s);                                                                           \
        const T *my = m->y, ms = (T)m->s;                                                                             \
        for (int64_t k = 0; k < nc; k++) sg[k] = sgx[k] = 0.0;                                                        \
        BLOCK_FOR(g, c0, nc, k, o, oy, {                                                                              \
            T gv = my ? gy[oy] * (T)(my[oy] != ms) : gy[oy];                                                          \
            sg[k] += gv;                                                                                              \
            sgx[k] += gv * ((double)x[o] - mean[k]) * rstd[k];                                                        \
        });                                                                                                           \
        BLOCK_FOR(g, c0, nc, k, o, oy, {                                                                              \
            T gv = my ? gy[oy] * (T)(my[oy] != ms) : gy[oy];                                                          \
            dx[o] = (T)(w[k] * rstd[k] * (gv - sg[k] / count - ((double)x[o] - mean[k]) * rstd[k] * sgx[k] / count));\
        });                                                                                                           \
    }
CHAN_LOOPS(double, f64)
CHAN_LOOPS(float, short)

/* Rows shorter than this take the double loops in f32 too: a row
 * primitive's call would cost more than its work. */
#define CHAN_VEC_MIN_S 32

static double get(const kiln_tensor *t, int64_t i) { return kiln__types[t->dtype].get(t->data, i); }

/* Channel c's rows of x, as one row where they are adjacent ([C, N, S]). */
#define X_ROWS(g, c, p, len, ...)                                                                   \
    for (int64_t i_ = 0, rows_ = (g).xn == (g).s ? 1 : (g).n, len = rows_ == 1 ? (g).n * (g).s : (g).s; \
         i_ < rows_; i_++) {                                                                        \
        int64_t p = i_ * (g).xn + (c) * (g).xc;                                                     \
        __VA_ARGS__;                                                                                \
    }

/* The f32 statistics of channel c in one pass, shifted by its first value. */
static void stats_f32(const kiln_nn_vec *v, const float *x, chan_geom g, int64_t c, double *mean, double *var) {
    double count = (double)(g.n * g.s), s1 = 0.0, s2 = 0.0;
    float x0 = x[c * g.xc];
    X_ROWS(g, c, o, len, v->sums_dev(x + o, len, x0, &s1, &s2));
    double d = s1 / count;
    *mean = (double)x0 + d;
    *var = fmax(s2 / count - d * d, 0.0);
}

typedef struct bn_job {
    kiln_tensor *node;
    void *y; /* the node's output, or the fused ReLU's */
    bn_tail tail;
} bn_job;

/* BATCH_NORM (training): src x [, running mean, var] [, w] [, b]. */
static void bn_chans(void *arg, int64_t c0, int64_t c1, int tid) {
    const bn_job *job = arg;
    kiln_tensor *node = job->node, *xt = node->src[0];
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0, has_r = node->ip[2] != 0;
    kiln_tensor *rm = has_r ? node->src[1] : NULL, *rv = has_r ? node->src[2] : NULL;
    kiln_tensor *wt = has_w ? node->src[1 + 2 * has_r] : NULL, *bt = has_b ? node->src[1 + 2 * has_r + has_w] : NULL;
    const chan_geom g = geom_of(node, xt);
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
            if (!loops) stats_f32(v, xt->data, g, c, &mean[k], &var[k]);
            a[k] = w / sqrt(var[k] + eps), b[k] = bias;
            if (loops) continue;
            /* y = (x - hi) * a + (b - lo * a), mean = hi + lo */
            float hi = (float)mean[k], lo = (float)(mean[k] - (double)hi);
            const float *x = xt->data, *r = job->tail.res;
            float *y = job->y;
            for (int64_t i = 0; i < g.n; i++) {
                int64_t ox = i * g.xn + c * g.xc, oy = (i * g.c + c) * g.s;
                if (r) v->affine_add_relu(x + ox, r + oy, y + oy, g.s, hi, (float)a[k], (float)(bias - lo * a[k]),
                                          job->tail.res_first);
                else v->affine(x + ox, y + oy, g.s, hi, (float)a[k], (float)(bias - lo * a[k]), job->tail.relu);
            }
        }
        if (node->dtype == KILN_F64) fwd_f64(xt->data, job->y, g, cb, nc, mean, a, b, &job->tail);
        else if (loops) fwd_short(xt->data, job->y, g, cb, nc, mean, a, b, &job->tail);
        for (int64_t k = 0; has_r && k < nc; k++) { /* torch's update: the running variance is the unbiased one */
            int64_t c = cb + k;
            kiln__types[rm->dtype].set(rm->data, c, (1.0 - mom) * get(rm, c) + mom * mean[k]);
            kiln__types[rv->dtype].set(rv->data, c, (1.0 - mom) * get(rv, c) + mom * var[k] * count / (count - 1.0));
        }
    }
}

/* Tasks of channels, on several threads when there is work. */
static int chan_threads(const kiln_tensor *x, const kiln_exec *ex) {
    return kiln_tensor_numel(x) > KILN_NN_PAR_WORK ? ex->n_threads : 1;
}

static void for_chans(const kiln_tensor *x, const kiln_exec *ex, kiln_pool_fn *fn, void *arg) {
    kiln__pool_for(x->shape[1], 1, chan_threads(x, ex), fn, arg);
}

static kiln_status bn_kernel(kiln_tensor *node, const kiln_exec *ex) {
    bn_job job = {node, node->data, {NULL, false, false}};
    for_chans(node->src[0], ex, bn_chans, &job);
    return KILN_OK;
}

/* nodes: the norm, [an add of it and a residual,] the ReLU (core/fuse.c).
 * f32 rows too short for the row primitives take the add and the ReLU
 * after the norm, as one vector pass (x * 1 + -0 is x, -0 included). */
kiln_status kiln__cpu_batch_norm_relu(kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    const kiln_tensor *add = n == 3 ? nodes[1] : NULL, *x = nodes[0]->src[0];
    bool first = add && add->src[1] == nodes[0];
    bool after = add && x->dtype == KILN_F32 && kiln__numel(x->ndim - 2, x->shape + 2) < CHAN_VEC_MIN_S;
    float *y = nodes[n - 1]->data;
    bn_job job = {nodes[0], y, {add && !after ? add->src[!first]->data : NULL, first, !after}};
    for_chans(x, ex, bn_chans, &job);
    if (after)
        kiln__nn_vec()->affine_add_relu(y, add->src[!first]->data, y, kiln_tensor_numel(x), 0.0f, 1.0f, -0.0f, first);
    return KILN_OK;
}

/* gy = g * (y != s) into row: the masked gradient's row */
static const float *masked_row(const kiln_nn_vec *v, const float *g, const bn_mask *m, int64_t off, int64_t n,
                               float *row) {
    if (!m->y) return g + off;
    v->mask_mul(g + off, (const float *)m->y + off, (float)m->s, row, n);
    return row;
}

/* The f32 backward of channel c: one pass for the statistics and the sums
 * sg = sum(gy), sgx = sum(gy * xhat), then dx = w * rstd * (gy - sg / M -
 * xhat * sgx / M) as gy * a + (x - hi) * b + k. row: S floats for a masked
 * gy's row. */
static void bn_grad_f32(const kiln_nn_vec *v, const float *x, const float *gy, float *dx, chan_geom g, int64_t c,
                        double eps, double w, double *sg, double *sgx, const bn_mask *m, float *row) {
    double count = (double)(g.n * g.s), s[4] = {0.0, 0.0, 0.0, 0.0};
    float x0 = x[c * g.xc];
    for (int64_t i = 0; i < g.n; i++)
        v->bn_bwd_sums(x + i * g.xn + c * g.xc, masked_row(v, gy, m, (i * g.c + c) * g.s, g.s, row), g.s, x0, s);
    double d = s[0] / count, mean = (double)x0 + d, var = fmax(s[1] / count - d * d, 0.0);
    double rstd = 1.0 / sqrt(var + eps);
    *sg = s[2];
    *sgx = (s[3] - d * s[2]) * rstd; /* sum(gy * (x - mean)) * rstd */
    float hi = (float)mean, lo = (float)(mean - (double)hi);
    double a = w * rstd, b = -a * rstd * *sgx / count, k = -a * *sg / count - b * lo;
    for (int64_t i = 0; i < g.n; i++) {
        int64_t o = i * g.xn + c * g.xc;
        v->bn_bwd_dx(x + o, masked_row(v, gy, m, (i * g.c + c) * g.s, g.s, row), dx + o, g.s, hi, (float)a, (float)b,
                     (float)k);
    }
}

/* BATCH_NORM_GRAD: src x [, w], gy; packed dx (in x's order), then dw [C]
 * (has_w), then db [C] (has_b). Per channel, with g = gy * w:
 *   dx = rstd * (g - mean(g) - xhat * mean(g * xhat)),
 * i.e. w * rstd * (gy - mean(gy) - xhat * mean(gy * xhat)). */
typedef struct bn_grad_job {
    kiln_tensor *node;
    const void *gy; /* gy's data, or the masked g's */
    bn_mask mask;
    float *rows; /* S floats a thread for masked rows, or the whole masked gy */
} bn_grad_job;

static void bn_grad_chans(void *arg, int64_t c0, int64_t c1, int tid) {
    const bn_grad_job *job = arg;
    kiln_tensor *node = job->node, *xt = node->src[0];
    bool has_w = node->ip[0] != 0, has_b = node->ip[1] != 0;
    kiln_tensor *wt = has_w ? node->src[1] : NULL;
    const chan_geom g = geom_of(node, xt);
    const int64_t numel = g.n * g.c * g.s;
    const double eps = node->fp[0];
    const kiln_nn_vec *v = kiln__nn_vec();
    float *row = job->rows ? job->rows + (size_t)tid * (size_t)g.s : NULL;
    for (int64_t cb = c0; cb < c1; cb += CHAN_BLOCK) {
        int64_t nc = c1 - cb < CHAN_BLOCK ? c1 - cb : CHAN_BLOCK;
        double mean[CHAN_BLOCK], var[CHAN_BLOCK], rstd[CHAN_BLOCK], w[CHAN_BLOCK], sg[CHAN_BLOCK], sgx[CHAN_BLOCK];
        bool loops = node->dtype == KILN_F64 || g.s < CHAN_VEC_MIN_S;
        if (node->dtype == KILN_F64) stats_f64(xt->data, g, cb, nc, mean, var);
        else if (loops) stats_short(xt->data, g, cb, nc, mean, var);
        for (int64_t k = 0; k < nc; k++) {
            w[k] = wt ? get(wt, cb + k) : 1.0;
            if (loops) rstd[k] = 1.0 / sqrt(var[k] + eps);
            else bn_grad_f32(v, xt->data, job->gy, node->data, g, cb + k, eps, w[k], &sg[k], &sgx[k], &job->mask, row);
        }
        if (node->dtype == KILN_F64)
            bwd_f64(xt->data, job->gy, node->data, g, cb, nc, mean, rstd, w, sg, sgx, &job->mask);
        else if (loops) bwd_short(xt->data, job->gy, node->data, g, cb, nc, mean, rstd, w, sg, sgx, &job->mask);
        for (int64_t k = 0; k < nc; k++) {
            if (has_w) kiln__types[node->dtype].set(node->data, numel + cb + k, sgx[k]);
            if (has_b) kiln__types[node->dtype].set(node->data, numel + has_w * g.c + cb + k, sg[k]);
        }
    }
}

static kiln_status bn_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    bn_grad_job job = {node, node->src[1 + (node->ip[0] != 0)]->data, {NULL, 0.0}, NULL};
    for_chans(node->src[0], ex, bn_grad_chans, &job);
    return KILN_OK;
}

/* nodes: the ReLU's mask (cmp y != s), the mul of it and g, and the
 * batch_norm_grad that alone reads the product (core/fuse.c) */
kiln_status kiln__cpu_batch_norm_grad_relu(kiln_tensor *const *nodes, const kiln_exec *ex) {
    kiln_tensor *cmp = nodes[0], *mul = nodes[1], *node = nodes[2], *x = node->src[0];
    bn_grad_job job = {node, mul->src[mul->src[0] == cmp]->data, {cmp->src[0]->data, get(cmp->src[1], 0)}, NULL};
    int64_t s = kiln__numel(x->ndim - 2, x->shape + 2), numel = kiln_tensor_numel(x);
    bool f32 = node->dtype == KILN_F32, rows = f32 && s >= CHAN_VEC_MIN_S;
    /* rows too short for the row primitives: gy masked first, in one vector pass */
    size_t len = rows ? (size_t)chan_threads(x, ex) * (size_t)s : f32 ? (size_t)numel : 0;
    if (len && !(job.rows = kiln__malloc(len * sizeof *job.rows)))
        return kiln__errs(KILN_ERR_OOM, "batch_norm_grad: out of memory for %zu masked values", len);
    if (f32 && !rows) {
        kiln__nn_vec()->mask_mul(job.gy, job.mask.y, (float)job.mask.s, job.rows, numel);
        job.gy = job.rows, job.mask.y = NULL;
    }
    for_chans(x, ex, bn_grad_chans, &job);
    free(job.rows);
    return KILN_OK;
}

void kiln__cpu_register_nn_norm_chan(kiln_cpu_kernel *tab) {
    tab[KILN_OP_BATCH_NORM] = bn_kernel;
    tab[KILN_OP_BATCH_NORM_GRAD] = bn_grad_kernel;
}
