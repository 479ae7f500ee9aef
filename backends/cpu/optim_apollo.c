/* optim_apollo.c — the CPU kernel of KILN_OP_APOLLO_STEP (the formula and
 * layout are in optim/apollo.c): regenerate the random projector, project
 * the gradient with the CPU GEMM, step the low-rank Adam moments, and scale
 * the raw gradient by the ratio of norms, limited in growth. Norms are
 * summed in double. */
#include "lowrank.h"
#include "pool.h"
#include "gemm.h"

#include <math.h>
#include <stdlib.h>

/* What the range functions of a step read. */
typedef struct apollo_job {
    const float *R, *G, *sf;
    float *m, *v, *W;
    int64_t rows, cols, n;
    bool right;
    const double *sc, *rt2s; /* the moments' scalars; the rows' factors (right) */
    double *rt2, *r2, *u2;
    float decay;
} apollo_job;

/* Moments over R [rows, cols] in place, and per channel the sums of
 * squares of Rt and R: channel = row (right: items are rows) or column
 * (items are blocks of MOMENT_COLS columns, each walking all rows, the
 * rank, of its block). rt2 and r2 hold one double per channel, zeroed by
 * the caller. */
#define MOMENT_COLS 256

static void moments(void *arg, int64_t x0, int64_t x1, int tid) {
    const apollo_job *J = arg;
    const float *R = J->R;
    float *m = J->m, *v = J->v;
    const int64_t rows = J->rows, cols = J->cols;
    const float b1 = (float)J->sc[0], b2 = (float)J->sc[1], one_b1 = (float)(1.0 - J->sc[0]),
                one_b2 = (float)(1.0 - J->sc[1]), eps = (float)J->sc[2];
    (void)tid;
    if (J->right) {
        for (int64_t i = x0; i < x1; i++) {
            double a = 0, b = 0;
            for (int64_t j = 0; j < cols; j++) {
                int64_t k = i * cols + j;
                float g = R[k], mi = m[k] * b1 + g * one_b1, vi = v[k] * b2 + one_b2 * g * g;
                m[k] = mi;
                v[k] = vi;
                float rt = mi / (sqrtf(vi) + eps);
                a += (double)rt * rt;
                b += (double)g * g;
            }
            J->rt2[i] = a;
            J->r2[i] = b;
        }
        return;
    }
    for (int64_t j0 = x0 * MOMENT_COLS; j0 < x1 * MOMENT_COLS && j0 < cols; j0 += MOMENT_COLS) {
        const int64_t j1 = j0 + MOMENT_COLS < cols ? j0 + MOMENT_COLS : cols;
        for (int64_t i = 0; i < rows; i++)
            for (int64_t j = j0; j < j1; j++) {
                int64_t k = i * cols + j;
                float g = R[k], mi = m[k] * b1 + g * one_b1, vi = v[k] * b2 + one_b2 * g * g;
                m[k] = mi;
                v[k] = vi;
                float rt = mi / (sqrtf(vi) + eps);
                J->rt2[j] += (double)rt * rt;
                J->r2[j] += (double)g * g;
            }
    }
}

/* rows [i0, i1) of G: |s_c g|^2 per row, into u2 (summed in row order) */
static void update_norms(void *arg, int64_t i0, int64_t i1, int tid) {
    const apollo_job *J = arg;
    const int64_t n = J->n;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        const float *g = J->G + i * n;
        double a = 0;
        if (J->right) {
#pragma omp simd reduction(+ : a)
            for (int64_t j = 0; j < n; j++) a += (double)g[j] * g[j];
            a *= J->rt2s[i] * J->rt2s[i];
        } else {
#pragma omp simd reduction(+ : a)
            for (int64_t j = 0; j < n; j++) {
                float x = J->sf[j] * g[j];
                a += (double)x * x;
            }
        }
        J->u2[i] = a;
    }
}

/* rows [i0, i1) of W: w = w decay + s_c g, the factors (sf) signed and scaled */
static void update_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const apollo_job *J = arg;
    const int64_t n = J->n;
    const float decay = J->decay, *sf = J->sf;
    (void)tid;
    for (int64_t i = i0; i < i1; i++) {
        float *w = J->W + i * n;
        const float *g = J->G + i * n;
        if (J->right) {
            const float f = sf[i];
#pragma omp simd
            for (int64_t j = 0; j < n; j++) w[j] = w[j] * decay + f * g[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < n; j++) w[j] = w[j] * decay + sf[j] * g[j];
        }
    }
}

static kiln_status apollo_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *em = t->src[2], *ev = t->src[3], *prev = t->src[4],
                *hyper = t->src[5];
    if (p->dtype != KILN_F32 || grad->dtype != KILN_F32 || em->dtype != KILN_F32 || ev->dtype != KILN_F32 ||
        prev->dtype != KILN_F64 || hyper->dtype != KILN_F32 || p->ndim != 2)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "apollo_step: needs an f32 matrix, gradient and moments");
    const int64_t rank = t->ip[0];
    double step = 0;
    kiln_status s = kiln__hyper_step_of("apollo_step", hyper, 5, &step);
    if (s) return s;
    const bool mini = t->ip[3] != 0;
    const int nt = ex->n_threads;
    const kiln_apollo_dims d = kiln__apollo_dims(t); /* R = G P^T [m, rank], else R = P^T G [rank, n] */
    const int64_t m = d.m, n = d.n, np = d.np, nr = d.nr, nch = d.nch;
    const bool right = d.right;
    float *P = kiln__malloc((size_t)(np + nr) * sizeof(float));
    double *rt2 = kiln__calloc((size_t)(2 * nch + m), sizeof(double));
    if (!P || !rt2) {
        free(P);
        free(rt2);
        return kiln__errs(KILN_ERR_OOM, "apollo_step: out of memory for the projection");
    }
    float *R = P + np;
    double *r2 = rt2 + nch, *u2s = r2 + nch;
    const float *G = grad->data;
    float *W = t->data;

    uint64_t seed = kiln__apollo_proj_seed((uint64_t)t->ip[4], t->ip[2]);
    kiln__apollo_projector(P, np, seed, (int)rank, nt);
    if (right)
        kiln__sgemm(false, true, m, rank, n, 1.0f, G, n, P, n, 0.0f, R, rank, nt);
    else
        kiln__sgemm(true, false, rank, n, m, 1.0f, P, rank, G, n, 0.0f, R, n, nt);

    const float *h = hyper->data;
    const double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], st = step;
    const double sc[3] = {b1, b2, h[3]};
    apollo_job J = {.R = R, .G = G, .sf = R, .m = em->data, .v = ev->data, .W = W, .rows = right ? m : rank,
                    .cols = right ? rank : n, .n = n, .right = right, .sc = sc, .rt2s = rt2, .rt2 = rt2, .r2 = r2,
                    .u2 = u2s};
    kiln__pool_for(right ? J.rows : (J.cols + MOMENT_COLS - 1) / MOMENT_COLS, 1, J.rows * J.cols > 32768 ? nt : 1,
                   moments, &J);

    /* scaling factors (in rt2, reused), sqrt(scale) folded in */
    const double sq = sqrt(t->fp[0]);
    if (mini) {
        double a = 0, b = 0;
        for (int64_t c = 0; c < nch; c++) a += rt2[c], b += r2[c];
        double s = sq * sqrt(a) / (sqrt(b) + 1e-8);
        for (int64_t c = 0; c < nch; c++) rt2[c] = s;
    } else {
        for (int64_t c = 0; c < nch; c++) rt2[c] = sq * sqrt(rt2[c]) / (sqrt(r2[c]) + 1e-8);
    }
    /* the factors as f32 (sf, in R's storage, no longer needed) for
     * vectorizable passes over G; |u|^2 = sum over G of (s_c g)^2 */
    float *sf = R;
    for (int64_t c = 0; c < nch; c++) sf[c] = (float)rt2[c];
    const int nt_g = m * n > 32768 ? nt : 1;
    kiln__pool_for(m, 1, nt_g, update_norms, &J);
    double u2 = 0;
    for (int64_t i = 0; i < m; i++) u2 += u2s[i];
    double norm = sqrt(u2), *pn = prev->data, limit = 1.0;
    if (step > 1) {
        double f = norm / (pn[0] + 1e-8);
        limit = (f > 1.01 ? f : 1.01) / 1.01;
    }
    pn[0] = norm / limit;

    const double step_size = lr * sqrt(1.0 - pow(b2, st)) / (1.0 - pow(b1, st));
    const float decay = (float)(1.0 - lr * wd);
    for (int64_t c = 0; c < nch; c++) sf[c] = (float)(-step_size * rt2[c] / limit);
    J.decay = decay;
    kiln__pool_for(m, 1, nt_g, update_rows, &J);
    free(P);
    free(rt2);
    return KILN_OK;
}

void kiln__cpu_register_optim_apollo(kiln_cpu_kernel *tab) { tab[KILN_OP_APOLLO_STEP] = apollo_step; }
