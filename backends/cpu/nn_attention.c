/* nn_attention.c — CPU kernels for rope and attention. */
#include "internal.h"
#include "nn_kernels.h"

#include <math.h>
#include <stdlib.h>

/* ---- rope ---- */

/* Rotate the pairs of one row of d values by the angles whose cos/sin are
 * given (d/2 each): NEOX pairs (i, i + d/2), INTERLEAVED pairs (2i, 2i+1). */
#define DEFINE_ROPE_ROW(T, SUF)                                                                                  \
    static void rope_row_##SUF(const T *x, T *y, const double *cs, const double *sn, int64_t d, bool interleaved) { \
        int64_t h = d / 2, step = interleaved ? 2 : 1, other = interleaved ? 1 : h;                            \
        for (int64_t i = 0; i < h; i++) {                                                                      \
            int64_t ia = i * step, ib = ia + other;                                                             \
            double a = x[ia], b = x[ib];                                                                       \
            y[ia] = (T)(a * cs[i] - b * sn[i]);                                                                \
            y[ib] = (T)(b * cs[i] + a * sn[i]);                                                                \
        }                                                                                                      \
    }
DEFINE_ROPE_ROW(float, f32)
DEFINE_ROPE_ROW(double, f64)

/* x [..., T, D], pos i32 [T] (src[1] when ip[2]) or 0..T-1. angle =
 * pos * theta^(-2i/D) for i < D/2, negated when ip[1] (inverse). The
 * cos/sin table [T, D/2] is made once per call, in double. */
static kiln_status rope_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t d = node->shape[node->ndim - 1], t = node->shape[node->ndim - 2], h = d / 2;
    int64_t rows = kiln_tensor_numel(node) / d;
    bool interleaved = node->ip[0] == KILN_ROPE_INTERLEAVED, f64 = node->dtype == KILN_F64;
    const int32_t *pos = node->ip[2] ? node->src[1]->data : NULL;
    double theta = node->fp[0], sign = node->ip[1] ? -1.0 : 1.0;
    double *cs = malloc((size_t)(2 * t * h) * sizeof *cs);
    if (!cs)
        return kiln__errs(KILN_ERR_OOM, "rope: out of memory for a [%lld, %lld] table", (long long)t, (long long)h);
    double *sn = cs + t * h;
    for (int64_t p = 0; p < t; p++)
        for (int64_t i = 0; i < h; i++) {
            double ang = (double)(pos ? pos[p] : p) * pow(theta, -2.0 * (double)i / (double)d);
            cs[p * h + i] = cos(ang);
            sn[p * h + i] = sign * sin(ang);
        }
    const void *x = node->src[0]->data;
#pragma omp parallel for num_threads(ex->n_threads) if (rows * d > KILN_NN_PAR_WORK)
    for (int64_t r = 0; r < rows; r++) {
        const double *c = cs + (r % t) * h, *s = sn + (r % t) * h;
        if (f64) rope_row_f64((const double *)x + r * d, (double *)node->data + r * d, c, s, d, interleaved);
        else rope_row_f32((const float *)x + r * d, (float *)node->data + r * d, c, s, d, interleaved);
    }
    free(cs);
    return KILN_OK;
}

/* ---- attention ---- */

/* One query row against its nv visible keys with a running (online)
 * softmax: m is the largest score so far, l the sum of exp(score - m) and
 * acc the matching weighted sum of values; both are rescaled when m grows.
 * The T x S score matrix is never stored. No visible key gives zeros. */
#define DEFINE_ATTENTION_ROW(T, SUF)                                                                     \
    static void attention_row_##SUF(const T *q, const T *k, const T *v, T *o, int64_t nv, int64_t d,   \
                                    int64_t dv, double scale, double *acc) {                           \
        double m = -INFINITY, l = 0.0;                                                                  \
        for (int64_t e = 0; e < dv; e++) acc[e] = 0.0;                                                  \
        for (int64_t j = 0; j < nv; j++) {                                                              \
            const T *kj = k + j * d, *vj = v + j * dv;                                                  \
            double s = 0.0;                                                                             \
            for (int64_t e = 0; e < d; e++) s += (double)q[e] * kj[e];                                  \
            s *= scale;                                                                                 \
            if (s > m) {                                                                                \
                double corr = exp(m - s); /* 0 for the first key */                                     \
                l *= corr;                                                                              \
                for (int64_t e = 0; e < dv; e++) acc[e] *= corr;                                        \
                m = s;                                                                                  \
            }                                                                                           \
            double p = exp(s - m);                                                                      \
            l += p;                                                                                     \
            for (int64_t e = 0; e < dv; e++) acc[e] += p * vj[e];                                       \
        }                                                                                               \
        double inv = l > 0.0 ? 1.0 / l : 0.0;                                                           \
        for (int64_t e = 0; e < dv; e++) o[e] = (T)(acc[e] * inv);                                      \
    }
DEFINE_ATTENTION_ROW(float, f32)
DEFINE_ATTENTION_ROW(double, f64)

/* q [B, Hq, T, D], k [B, Hkv, S, D], v [B, Hkv, S, Dv] -> [B, Hq, T, Dv].
 * Query head h reads kv head h / (Hq / Hkv); causal: query i sees key j
 * iff j <= i + (S - T). */
static kiln_status attention_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    int64_t hq = q->shape[1], t = q->shape[2], d = q->shape[3];
    int64_t hkv = k->shape[1], s = k->shape[2], dv = v->shape[3], group = hq / hkv;
    int64_t rows = q->shape[0] * hq * t;
    bool causal = node->ip[0] != 0, f64 = node->dtype == KILN_F64, oom = false;
    double scale = node->fp[0];
#pragma omp parallel num_threads(ex->n_threads) if (rows * s * (d + dv) > KILN_NN_PAR_WORK)
    {
        double *acc = malloc((size_t)dv * sizeof *acc); /* per thread */
        if (!acc) {
#pragma omp atomic write
            oom = true;
        }
#pragma omp for
        for (int64_t r = 0; r < rows; r++) {
            if (!acc) continue;
            int64_t i = r % t, bh = r / t, kv = (bh / hq) * hkv + (bh % hq) / group;
            int64_t nv = causal ? i + s - t + 1 : s;
            if (nv < 0) nv = 0;
            if (f64)
                attention_row_f64((const double *)q->data + r * d, (const double *)k->data + kv * s * d,
                                  (const double *)v->data + kv * s * dv, (double *)node->data + r * dv, nv, d, dv,
                                  scale, acc);
            else
                attention_row_f32((const float *)q->data + r * d, (const float *)k->data + kv * s * d,
                                  (const float *)v->data + kv * s * dv, (float *)node->data + r * dv, nv, d, dv,
                                  scale, acc);
        }
        free(acc);
    }
    if (oom) return kiln__errs(KILN_ERR_OOM, "attention: out of memory for a row buffer of %lld values", (long long)dv);
    return KILN_OK;
}

void kiln__cpu_register_nn_attention(kiln_cpu_kernel *tab) {
    tab[KILN_OP_ROPE] = rope_kernel;
    tab[KILN_OP_ATTENTION] = attention_kernel;
}
