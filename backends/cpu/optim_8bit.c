/* optim_8bit.c — CPU kernels of the 8-bit optimizers' step ops (layouts and
 * formulas in optim/opt8bit.c). Threads take whole blocks of 256: each
 * block is dequantized into f32 on the stack, updated as the 32-bit kernels
 * update (backends/cpu/optim.c, same operation order), then requantized
 * with a fresh absmax through the table coder (codes identical to
 * quant/dynamic_map.h's nearest-code rule). Elements with a non-finite
 * gradient are skipped. f32 parameters only (others keep 32-bit state).
 * Full blocks go through the AVX-512 kernels (optim_8bit_avx512.c) where
 * the CPU has them, the same bits as this file's scalar loops. */
#include "internal.h"
#include "optim_8bit.h"
#include "pool.h"

#include <math.h>
#include <pthread.h>
#include <string.h>

static kiln__qcoder signed_coder, unsigned_coder;
static uint32_t signed_pack_tab[KILN__Q8_PACKED], unsigned_pack_tab[KILN__Q8_PACKED];
static const uint32_t *signed_pack, *unsigned_pack; /* NULL: no packed table */
static pthread_once_t coders_once = PTHREAD_ONCE_INIT;

static void coders_init(void) {
    float map[256];
    kiln__dynamic_map(true, map);
    kiln__qcoder_init(&signed_coder, map);
    kiln__dynamic_map(false, map);
    kiln__qcoder_init(&unsigned_coder, map);
    signed_pack = kiln__q8_pack(&signed_coder, signed_pack_tab) ? signed_pack_tab : NULL;
    unsigned_pack = kiln__q8_pack(&unsigned_coder, unsigned_pack_tab) ? unsigned_pack_tab : NULL;
}

/* The float with this sign and key whose low bits are lp, complemented when
 * negative: it grows with lp. */
static float interval_float(uint32_t sign, uint32_t key, uint32_t lp) {
    uint32_t u = sign << 31 | key << 16 | (sign ? 0xffffu - lp : lp);
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

bool kiln__q8_pack(const kiln__qcoder *c, uint32_t packed[KILN__Q8_PACKED]) {
    if (c->extra != 1) return false;
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t key = 0; key < KILN__QKEYS; key++) {
            int start = c->start[sign][key];
            float t = c->thr[start];
            uint32_t lo = 0, hi = 0x10000; /* smallest low' with interval_float(low') >= t, 0x10000: none */
            while (lo < hi) {
                uint32_t mid = (lo + hi) / 2;
                if (interval_float(sign, key, mid) >= t)
                    hi = mid;
                else
                    lo = mid + 1;
            }
            packed[sign * KILN__QKEYS + key] = lo << 8 | (uint32_t)start;
        }
    return true;
}

/* Blocks per thread below which one thread does all (~64K elements). */
#define MIN_PAR_BLOCKS 256

typedef kiln__adam8_scalars adam8_scalars;

/* The vector kernels for the caps in force, or NULL (scalar loops). */
static const kiln__q8_kernels *vector_kernels(void) { return kiln__q8_kernels_avx512(); }

static void adam8_block(float *restrict p, const float *restrict g, uint8_t *mq, float *ma, uint8_t *vq, float *va,
                        int64_t len, const adam8_scalars *s, const kiln__q8_kernels *k) {
    float m[KILN__QBLOCK], v[KILN__QBLOCK];
    if (k && len == KILN__QBLOCK) {
        k->dequant256(mq, *ma, signed_coder.map, m);
        k->dequant256(vq, *va, unsigned_coder.map, v);
        k->adam256(p, g, m, v, s);
        k->quant256(m, &signed_coder, signed_pack, mq, ma);
        k->quant256(v, &unsigned_coder, unsigned_pack, vq, va);
        return;
    }
    kiln__dequantize_blockwise(mq, ma, len, signed_coder.map, m);
    kiln__dequantize_blockwise(vq, va, len, unsigned_coder.map, v);
    for (int64_t i = 0; i < len; i++) {
        float gi = g[i];
        if (!isfinite(gi)) continue;
        float pi = p[i] * s->decay;
        if (s->l2) gi += s->wd * pi;
        float mi = m[i] * s->b1 + gi * s->one_b1;
        float vi = v[i] * s->b2 + s->one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        float denom = sqrtf(vi) / s->bc2s + s->eps;
        p[i] = pi + s->neg_step * mi / denom;
    }
    kiln__quantize_blockwise_coder(m, len, &signed_coder, mq, ma);
    kiln__quantize_blockwise_coder(v, len, &unsigned_coder, vq, va);
}

/* One signed block (Lion's and SGD's state), through k when it is full. */
static void dequant(const kiln__q8_kernels *k, const uint8_t *q, const float *a, int64_t len, float *out) {
    if (k && len == KILN__QBLOCK)
        k->dequant256(q, *a, signed_coder.map, out);
    else
        kiln__dequantize_blockwise(q, a, len, signed_coder.map, out);
}

static void quant(const kiln__q8_kernels *k, const float *x, int64_t len, uint8_t *q, float *a) {
    if (k && len == KILN__QBLOCK)
        k->quant256(x, &signed_coder, signed_pack, q, a);
    else
        kiln__quantize_blockwise_coder(x, len, &signed_coder, q, a);
}

/* Checks shared by the three: f32 p and grad, an I32 codes leaf of
 * ceil(n/4) and an F32 absmax leaf of ceil(n/256) per state, f32 hyper. */
static kiln_status check8(const char *who, kiln_tensor *t, int n_states) {
    kiln_tensor *p = t->src[0];
    int64_t n = kiln_tensor_numel(p);
    bool ok = p->dtype == KILN_F32 && t->src[1]->dtype == KILN_F32 && t->src[3 + 2 * n_states]->dtype == KILN_F32 &&
              t->src[2 + 2 * n_states]->dtype == KILN_F32; /* hyper, maps (unused here: the coders hold them) */
    for (int k = 0; k < n_states; k++) {
        kiln_tensor *q = t->src[2 + 2 * k], *a = t->src[3 + 2 * k];
        ok = ok && q->dtype == KILN_I32 && kiln_tensor_numel(q) == (n + 3) / 4 && a->dtype == KILN_F32 &&
             kiln_tensor_numel(a) == kiln__qblocks(n);
    }
    if (!ok) return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: needs f32 p and grad, I32 codes and f32 absmax state", who);
    pthread_once(&coders_once, coders_init);
    return KILN_OK;
}

/* What a step's block function reads: the node, its scalars, the kernels. */
typedef struct q8_job {
    const kiln_tensor *t;
    const void *scalars;
    const kiln__q8_kernels *k;
} q8_job;

/* The step's blocks of KILN__QBLOCK elements, threaded above MIN_PAR_BLOCKS. */
static void run_blocks(const kiln_tensor *t, const kiln_exec *ex, const void *scalars, kiln_pool_fn *fn) {
    const int64_t nb = kiln__qblocks(kiln_tensor_numel(t->src[0]));
    q8_job j = {t, scalars, vector_kernels()};
    kiln__pool_for(nb, 1, nb > MIN_PAR_BLOCKS ? ex->n_threads : 1, fn, &j);
}

static void adam8_blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const q8_job *j = arg;
    const kiln_tensor *t = j->t;
    float *p = t->data;
    const float *g = t->src[1]->data;
    uint8_t *mq = t->src[2]->data, *vq = t->src[4]->data;
    float *ma = t->src[3]->data, *va = t->src[5]->data;
    const int64_t n = kiln_tensor_numel(t->src[0]);
    (void)tid;
    for (int64_t b = b0; b < b1; b++) {
        int64_t lo = b * KILN__QBLOCK, len = n - lo < KILN__QBLOCK ? n - lo : KILN__QBLOCK;
        adam8_block(p + lo, g + lo, mq + lo, ma + b, vq + lo, va + b, len, j->scalars, j->k);
    }
}

static kiln_status adam8_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_status st = check8("adam8_step", t, 2);
    if (st) return st;
    double step = 0;
    if ((st = kiln__hyper_step_of("adam8_step", t->src[7], 5, &step))) return st;
    const float *h = t->src[7]->data;
    bool decoupled = t->ip[1] != 0;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4];
    adam8_scalars s = {
        .decay = (float)(decoupled ? 1.0 - lr * wd : 1.0),
        .wd = (float)(decoupled ? 0.0 : wd),
        .b1 = (float)b1,
        .b2 = (float)b2,
        .one_b1 = (float)(1.0 - b1),
        .one_b2 = (float)(1.0 - b2),
        .neg_step = (float)(-(lr / (1.0 - pow(b1, step)))),
        .bc2s = (float)sqrt(1.0 - pow(b2, step)),
        .eps = h[3],
    };
    s.l2 = s.wd != 0.0f;
    run_blocks(t, ex, &s, adam8_blocks);
    return KILN_OK;
}

static void lion8_blocks(void *arg, int64_t b0, int64_t b1_, int tid) {
    const q8_job *j = arg;
    const kiln_tensor *t = j->t;
    const kiln__lion8_scalars ls = *(const kiln__lion8_scalars *)j->scalars;
    const float neg_lr = ls.neg_lr, b1 = ls.b1, b2 = ls.b2, one_b1 = ls.one_b1, one_b2 = ls.one_b2, decay = ls.decay;
    float *p = t->data;
    const float *g = t->src[1]->data;
    uint8_t *mq = t->src[2]->data;
    float *ma = t->src[3]->data;
    const int64_t n = kiln_tensor_numel(t->src[0]);
    const kiln__q8_kernels *k = j->k;
    (void)tid;
    for (int64_t b = b0; b < b1_; b++) {
        int64_t lo = b * KILN__QBLOCK, len = n - lo < KILN__QBLOCK ? n - lo : KILN__QBLOCK;
        float m[KILN__QBLOCK];
        dequant(k, mq + lo, ma + b, len, m);
        if (k && len == KILN__QBLOCK)
            k->lion256(p + lo, g + lo, m, &ls);
        else
            for (int64_t i = 0; i < len; i++) {
                float gi = g[lo + i], mi = m[i];
                if (!isfinite(gi)) continue;
                float pi = p[lo + i] * decay;
                float c = mi * b1 + gi * one_b1;
                float sgn = (float)((c > 0) - (c < 0));
                p[lo + i] = pi + neg_lr * sgn;
                m[i] = mi * b2 + gi * one_b2;
            }
        quant(k, m, len, mq + lo, ma + b);
    }
}

/* Lion: p *= decay; p -= lr * sign(b1 m + (1 - b1) g); m = b2 m + (1 - b2) g. */
static kiln_status lion8_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_status st = check8("lion8_step", t, 1);
    if (st) return st;
    const float *h = t->src[5]->data;
    const kiln__lion8_scalars ls = {(float)(-(double)h[0]),        h[1], h[2], (float)(1.0 - (double)h[1]),
                                    (float)(1.0 - (double)h[2]), (float)(1.0 - (double)h[0] * (double)h[3])};
    run_blocks(t, ex, &ls, lion8_blocks);
    return KILN_OK;
}

static void sgd8_blocks(void *arg, int64_t b0, int64_t b1, int tid) {
    const q8_job *j = arg;
    const kiln_tensor *t = j->t;
    const kiln__sgd8_scalars ss = *(const kiln__sgd8_scalars *)j->scalars;
    const float lr = ss.lr, mom = ss.mom, keep = ss.keep, wd = ss.wd;
    const bool nesterov = ss.nesterov, first = ss.first;
    float *p = t->data;
    const float *g = t->src[1]->data;
    uint8_t *bq = t->src[2]->data;
    float *ba = t->src[3]->data;
    const int64_t n = kiln_tensor_numel(t->src[0]);
    const kiln__q8_kernels *k = j->k;
    (void)tid;
    for (int64_t b = b0; b < b1; b++) {
        int64_t lo = b * KILN__QBLOCK, len = n - lo < KILN__QBLOCK ? n - lo : KILN__QBLOCK;
        float buf[KILN__QBLOCK];
        dequant(k, bq + lo, ba + b, len, buf);
        if (k && len == KILN__QBLOCK)
            k->sgd256(p + lo, g + lo, buf, &ss);
        else
            for (int64_t i = 0; i < len; i++) {
                float gi = g[lo + i];
                if (!isfinite(gi)) continue;
                if (wd != 0) gi += wd * p[lo + i];
                float bi = first ? gi : mom * buf[i] + keep * gi;
                buf[i] = bi;
                gi = nesterov ? gi + mom * bi : bi;
                p[lo + i] -= lr * gi;
            }
        quant(k, buf, len, bq + lo, ba + b);
    }
}

/* SGD with momentum: g += wd p; buf = g (first step) or mom buf + (1 - damp) g;
 * p -= lr * (nesterov ? g + mom buf : buf). */
static kiln_status sgd8_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_status st = check8("sgd8_step", t, 1);
    if (st) return st;
    const float *h = t->src[5]->data;
    const kiln__sgd8_scalars ss = {h[0], h[1], (float)(1.0 - (double)h[2]), h[3], t->ip[0] != 0, t->ip[2] == 0};
    run_blocks(t, ex, &ss, sgd8_blocks);
    return KILN_OK;
}

void kiln__cpu_register_optim8bit(kiln_cpu_kernel *tab) {
    tab[KILN_OP_ADAM8_STEP] = adam8_step;
    tab[KILN_OP_LION8_STEP] = lion8_step;
    tab[KILN_OP_SGD8_STEP] = sgd8_step;
}
