/* nn_attention.c — CPU kernels for rope, attention and its fused
 * backward, and attention by rows over a KV cache; the blocked attention
 * itself is in nn_attention_flash.h. */
#include "internal.h"
#include "nn_attention_simd.h"
#include "nn_kernels.h"
#include "pool.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

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
typedef struct rope_job {
    kiln_tensor *node;
    const double *cs, *sn;
} rope_job;

static void rope_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const rope_job *j = arg;
    kiln_tensor *node = j->node;
    int64_t d = node->shape[node->ndim - 1], t = node->shape[node->ndim - 2], h = d / 2;
    bool interleaved = node->ip[0] == KILN_ROPE_INTERLEAVED, f64 = node->dtype == KILN_F64;
    const void *x = node->src[0]->data;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        const double *c = j->cs + (r % t) * h, *s = j->sn + (r % t) * h;
        if (f64) rope_row_f64((const double *)x + r * d, (double *)node->data + r * d, c, s, d, interleaved);
        else rope_row_f32((const float *)x + r * d, (float *)node->data + r * d, c, s, d, interleaved);
    }
}

static kiln_status rope_kernel(kiln_tensor *node, const kiln_exec *ex) {
    int64_t d = node->shape[node->ndim - 1], t = node->shape[node->ndim - 2], h = d / 2;
    int64_t rows = kiln_tensor_numel(node) / d;
    const int32_t *pos = node->ip[2] ? node->src[1]->data : NULL;
    double theta = node->fp[0], sign = node->ip[1] ? -1.0 : 1.0;
    double *cs = kiln__malloc((size_t)(2 * t * h) * sizeof *cs);
    if (!cs)
        return kiln__errs(KILN_ERR_OOM, "rope: out of memory for a [%lld, %lld] table", (long long)t, (long long)h);
    double *sn = cs + t * h;
    for (int64_t p = 0; p < t; p++)
        for (int64_t i = 0; i < h; i++) {
            double ang = (double)(pos ? pos[p] : p) * pow(theta, -2.0 * (double)i / (double)d);
            cs[p * h + i] = cos(ang);
            sn[p * h + i] = sign * sin(ang);
        }
    rope_job j = {node, cs, sn};
    kiln__pool_for(rows, 1, rows * d > KILN_NN_PAR_WORK ? ex->n_threads : 1, rope_rows, &j);
    free(cs);
    return KILN_OK;
}

/* ---- attention ---- */

/* The geometry of an ATTENTION or ATTENTION_GRAD node from its q, k, v. */
static kiln_attn_geom attention_geom(const kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *q = node->src[0], *k = node->src[1], *v = node->src[2];
    return (kiln_attn_geom){q->shape[0], q->shape[1], k->shape[1], q->shape[2], k->shape[2], q->shape[3],
                            v->shape[3], node->ip[0] != 0, node->fp[0], ex->n_threads, 0};
}

/* ATTENTION: q, k, v -> packed [O (B*Hq*T*Dv) | L (B*Hq*T)], blocked. */
static kiln_status attention_kernel(kiln_tensor *node, const kiln_exec *ex) {
    kiln_attn_geom g = attention_geom(node, ex);
    int64_t no = g.b * g.hq * g.t * g.dv;
    const void *q = node->src[0]->data, *k = node->src[1]->data, *v = node->src[2]->data;
    if (node->dtype == KILN_F64)
        return kiln__flash_fwd_f64(&g, &kiln__attn_ops_f64, q, k, v, node->data, (double *)node->data + no);
    return kiln__flash_fwd_f32(&g, kiln__attn_ops_f32(), q, k, v, node->data, (float *)node->data + no);
}

/* ATTENTION_GRAD: q, k, v, the forward's packed O|L, dO -> packed
 * [dq | dk | dv] (layout in ops/nn_attention.c). */
static kiln_status attention_grad_kernel(kiln_tensor *node, const kiln_exec *ex) {
    kiln_attn_geom g = attention_geom(node, ex);
    int64_t no = g.b * g.hq * g.t * g.dv, nq = g.b * g.hq * g.t * g.d, nk = g.b * g.hkv * g.s * g.d;
    const void *q = node->src[0]->data, *k = node->src[1]->data, *v = node->src[2]->data;
    const void *fwd = node->src[3]->data, *dout = node->src[4]->data;
    if (node->dtype == KILN_F64) {
        const double *o = fwd;
        double *dq = node->data;
        return kiln__flash_bwd_f64(&g, &kiln__attn_ops_f64, q, k, v, o, o + no, dout, dq, dq + nq, dq + nq + nk);
    }
    const float *o = fwd;
    float *dq = node->data;
    return kiln__flash_bwd_f32(&g, kiln__attn_ops_f32(), q, k, v, o, o + no, dout, dq, dq + nq, dq + nq + nk);
}

/* ATTENTION_CACHED: every row's key and value into its sequence's cache
 * (checked first: nothing is written for a bad row), then the rows'
 * attention; rows of one sequence read each other's keys, so all writes
 * come before any read. */
static kiln_status attention_cached_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *q = node->src[0], *kn = node->src[1], *vn = node->src[2], *kc = node->src[3], *vc = node->src[4];
    const int32_t *seq = node->src[5]->data, *pos = node->src[6]->data;
    const int64_t n = q->shape[0], hkv = kn->shape[1], d = kn->shape[2], dv = vn->shape[2];
    const int64_t b = kc->shape[0], s = kc->shape[2];
    for (int64_t i = 0; i < n; i++)
        if (seq[i] < 0 || seq[i] >= b || pos[i] < 0 || pos[i] >= s)
            return kiln__errs(KILN_ERR_ARG,
                              "attention_cached: row %lld's sequence %d, position %d is outside the cache's %lld "
                              "sequences of %lld positions",
                              (long long)i, (int)seq[i], (int)pos[i], (long long)b, (long long)s);
    const size_t es = kiln_dtype_size(node->dtype);
    for (int64_t i = 0; i < n; i++)
        for (int64_t h = 0; h < hkv; h++) {
            int64_t at = (seq[i] * hkv + h) * s + pos[i], row = i * hkv + h;
            memcpy((char *)kc->data + (size_t)(at * d) * es, (const char *)kn->data + (size_t)(row * d) * es,
                   (size_t)d * es);
            memcpy((char *)vc->data + (size_t)(at * dv) * es, (const char *)vn->data + (size_t)(row * dv) * es,
                   (size_t)dv * es);
        }
    kiln_attn_geom g = {b, q->shape[1], hkv, n, s, d, dv, false, node->fp[0], ex->n_threads, node->fp[1]};
    if (node->dtype == KILN_F64)
        return kiln__flash_rows_f64(&g, &kiln__attn_ops_f64, q->data, kc->data, vc->data, seq, pos, node->ip[0],
                                    node->data);
    return kiln__flash_rows_f32(&g, kiln__attn_ops_f32(), q->data, kc->data, vc->data, seq, pos, node->ip[0],
                                node->data);
}

void kiln__cpu_register_nn_attention(kiln_cpu_kernel *tab) {
    tab[KILN_OP_ROPE] = rope_kernel;
    tab[KILN_OP_ATTENTION] = attention_kernel;
    tab[KILN_OP_ATTENTION_GRAD] = attention_grad_kernel;
    tab[KILN_OP_ATTENTION_CACHED] = attention_cached_kernel;
}
