/* optim_galore.c — CPU kernel of GaLore's fused step (KILN_OP_GALORE_STEP;
 * layout and formula in optim/galore.c and include/kiln.h): refresh the
 * projector from an SVD of the gradient when asked, project the gradient
 * to rank r, Adam on the low-rank moments, project back into p. The
 * refresh (an SVD on the host, LAPACK) is every backend's: core/lowrank.c.
 */
#include "lowrank.h"
#include "gemm.h"
#include "pool.h"
#include "../../quant/dynamic_map.h"

#include <math.h>
#include <stdlib.h>

/* Adam on the low-rank gradient, in place: R becomes N = m / (sqrt(v) + eps)
 * (galore_torch's order: eps before the bias correction, which is folded
 * into the step size; 8-bit GaLore's 32-bit fallback passes
 * eps * sqrt(bc2), bitsandbytes' form). f32 throughout, as torch on f32
 * tensors. */
static void lowrank_adam(float *restrict rg, float *restrict m, float *restrict v, int64_t n, float b1, float b2,
                         float eps) {
    const float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
#if defined(__NO_MATH_ERRNO__)
    _Pragma("omp simd")
#endif
    for (int64_t i = 0; i < n; i++) {
        float g = rg[i];
        float mi = m[i] * b1 + g * one_b1;
        float vi = v[i] * b2 + one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        rg[i] = mi / (sqrtf(vi) + eps);
    }
}

/* The part of both steps before the moments: checks, the projector
 * refresh, R = G P^T or P^T G into a new buffer *rg (the caller frees it). */
static kiln_status project(const char *who, kiln_tensor *t, const kiln_exec *ex, int nstate, float **rg) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *proj = t->src[2];
    bool ok = p->dtype == KILN_F32 && grad->dtype == KILN_F32 && proj->dtype == KILN_F32 && p->ndim == 2 &&
              t->src[t->nsrc - 1]->dtype == KILN_F32;
    for (int k = 0; k < nstate; k++) ok = ok && t->src[3 + k]->dtype == KILN_F32;
    if (!ok) return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: needs an f32 matrix, gradient and state", who);
    double step;
    kiln_status s = kiln__hyper_step_of(who, t->src[t->nsrc - 1], 5, &step);
    if (s) return s;
    int64_t m = p->shape[0], n = p->shape[1];
    bool right = m >= n;
    int64_t r = right ? proj->shape[0] : proj->shape[1];
    const float *g = grad->data;
    float *P = proj->data;
    if (t->ip[1] && (s = kiln__galore_refresh(who, g, m, n, r, P))) return s;
    int64_t nr = (right ? m : n) * r;
    if (!(*rg = kiln__malloc((size_t)nr * sizeof **rg)))
        return kiln__errs(KILN_ERR_OOM, "%s: no memory for the low-rank gradient", who);
    int nt = ex->n_threads;
    if (right) /* R = G P^T: [m, n] x [r, n]^T */
        kiln__sgemm(false, true, m, r, n, 1.0f, g, n, P, n, 0.0f, *rg, r, nt);
    else /* R = P^T G: [m, r]^T x [m, n] */
        kiln__sgemm(true, false, r, n, m, 1.0f, P, r, g, n, 0.0f, *rg, n, nt);
    return KILN_OK;
}

typedef struct decay_job {
    float *w;
    float decay;
} decay_job;

static void decay_range(void *arg, int64_t i0, int64_t i1, int tid) {
    const decay_job *j = arg;
    float *w = j->w;
    const float decay = j->decay;
    (void)tid;
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) w[i] += w[i] * decay;
}

/* The part after: p += alpha * (N P or P N), accumulated by the GEMM itself
 * (beta 1, no [m, n] temporary), then p *= 1 - lr wd (decoupled, after the
 * update, as galore_torch). Frees rg. */
static void project_back(kiln_tensor *t, const kiln_exec *ex, float *rg, float alpha, double lr, double wd) {
    kiln_tensor *p = t->src[0], *proj = t->src[2];
    int64_t m = p->shape[0], n = p->shape[1];
    bool right = m >= n;
    int64_t r = right ? proj->shape[0] : proj->shape[1];
    const float *P = proj->data;
    float *w = t->data;
    int nt = ex->n_threads;
    if (right) /* N P: [m, r] x [r, n] */
        kiln__sgemm(false, false, m, n, r, alpha, rg, r, P, n, 1.0f, w, n, nt);
    else /* P N: [m, r] x [r, n] */
        kiln__sgemm(false, false, m, n, r, alpha, P, r, rg, n, 1.0f, w, n, nt);
    free(rg);
    if (wd > 0) {
        decay_job j = {w, (float)(-lr * wd)};
        kiln__pool_for(m * n, 16384, m * n > 65536 ? nt : 1, decay_range, &j);
    }
}

static kiln_status galore_step(kiln_tensor *t, const kiln_exec *ex) {
    float *rg;
    kiln_status s = project("galore_step", t, ex, 2, &rg);
    if (s) return s;
    kiln_tensor *m1 = t->src[3], *m2 = t->src[4];
    const float *h = t->src[5]->data;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], step = kiln__hyper_step(h, 5);
    lowrank_adam(rg, m1->data, m2->data, kiln_tensor_numel(m1), h[1], h[2], h[3]);
    /* step_size = lr sqrt(bc2) / bc1, folded into the back projection */
    double step_size = lr * sqrt(1.0 - pow(b2, step)) / (1.0 - pow(b1, step));
    project_back(t, ex, rg, (float)(-step_size * t->fp[0]), lr, wd);
    return KILN_OK;
}

/* Blocks of R per thread below which one thread does all (~64K elements). */
#define MIN_PAR_BLOCKS 256

typedef struct adam8_job {
    float *rg, *ma, *va;
    uint8_t *mq, *vq;
    int64_t nr;
    const float *maps;
    float b1, b2, eps;
} adam8_job;

/* bitsandbytes' block-wise 8-bit Adam on R in place (R becomes N): each
 * block of 256 dequantized, updated in f32, requantized with a fresh
 * absmax; non-finite elements of R skipped (state kept, N 0 there).
 * Blocks [b0, b1_) of j (arg). */
static void lowrank_adam8(void *arg, int64_t b0, int64_t b1_, int tid) {
    const adam8_job *j = arg;
    float *restrict rg = j->rg, *ma = j->ma, *va = j->va;
    uint8_t *mq = j->mq, *vq = j->vq;
    const float *maps = j->maps, b1 = j->b1, b2 = j->b2, eps = j->eps;
    const int64_t nr = j->nr;
    const float one_b1 = (float)(1.0 - (double)b1), one_b2 = (float)(1.0 - (double)b2);
    (void)tid;
    for (int64_t b = b0; b < b1_; b++) {
        int64_t lo = b * KILN__QBLOCK, len = nr - lo < KILN__QBLOCK ? nr - lo : KILN__QBLOCK;
        float m[KILN__QBLOCK], v[KILN__QBLOCK], *x = rg + lo;
        kiln__dequantize_blockwise(mq + lo, ma + b, len, maps, m);
        kiln__dequantize_blockwise(vq + lo, va + b, len, maps + 256, v);
        for (int64_t i = 0; i < len; i++) {
            float g = x[i];
            if (!isfinite(g)) {
                x[i] = 0.0f;
                continue;
            }
            m[i] = m[i] * b1 + g * one_b1;
            v[i] = v[i] * b2 + one_b2 * g * g;
            x[i] = m[i] / (sqrtf(v[i]) + eps);
        }
        kiln__quantize_blockwise(m, len, maps, mq + lo, ma + b);
        kiln__quantize_blockwise(v, len, maps + 256, vq + lo, va + b);
    }
}

static kiln_status galore8_step(kiln_tensor *t, const kiln_exec *ex) {
    bool q8 = t->ip[2] != 0;
    if (t->nsrc != (q8 ? 8 : 6)) return kiln__errs(KILN_ERR_STATE, "galore8_step: %d sources", t->nsrc);
    float *rg;
    kiln_status s = project("galore8_step", t, ex, q8 ? 0 : 2, &rg);
    if (s) return s;
    int64_t nr = kiln__galore_state_numel(t);
    const float *h = t->src[t->nsrc - 1]->data;
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], step = kiln__hyper_step(h, 5);
    double bc2s = sqrt(1.0 - pow(b2, step));
    float eps = (float)((double)h[3] * bc2s); /* bitsandbytes' eps * correction2 */
    if (q8) {
        kiln_tensor *mq = t->src[3], *vq = t->src[4], *am = t->src[5], *maps = t->src[6];
        int64_t nb = kiln__qblocks(nr);
        if (mq->dtype != KILN_I32 || vq->dtype != KILN_I32 || kiln_tensor_numel(mq) != (nr + 3) / 4 ||
            kiln_tensor_numel(vq) != (nr + 3) / 4 || am->dtype != KILN_F32 || kiln_tensor_numel(am) != 2 * nb ||
            maps->dtype != KILN_F32 || kiln_tensor_numel(maps) != 512) {
            free(rg);
            return kiln__errs(KILN_ERR_UNSUPPORTED, "galore8_step: needs I32 codes, f32 absmax [2, %lld] and maps",
                              (long long)nb);
        }
        float *a = am->data;
        adam8_job j = {rg, a, a + nb, mq->data, vq->data, nr, maps->data, h[1], h[2], eps};
        kiln__pool_for(nb, 1, nb > MIN_PAR_BLOCKS ? ex->n_threads : 1, lowrank_adam8, &j);
    } else {
        lowrank_adam(rg, t->src[3]->data, t->src[4]->data, nr, h[1], h[2], eps);
    }
    double step_size = lr * bc2s / (1.0 - pow(b1, step));
    project_back(t, ex, rg, (float)(-step_size * t->fp[0]), lr, wd);
    return KILN_OK;
}

void kiln__cpu_register_optim_galore(kiln_cpu_kernel *tab) {
    tab[KILN_OP_GALORE_STEP] = galore_step;
    tab[KILN_OP_GALORE8_STEP] = galore8_step;
}
