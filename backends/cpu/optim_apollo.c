/* optim_apollo.c — the CPU kernel of KILN_OP_APOLLO_STEP (the formula and
 * layout are in optim/apollo.c): regenerate the random projector, project
 * the gradient with the CPU GEMM, step the low-rank Adam moments, and scale
 * the raw gradient by the ratio of norms, limited in growth. Norms are
 * summed in double. */
#include "internal.h"
#include "backend.h"
#include "gemm.h"
#include "../../optim/apollo.h"

#include <math.h>
#include <stdlib.h>

/* Moments over R [rows, cols] in place, and per channel the sums of
 * squares of Rt and R: channel = row (rows_are_channels) or column. rt2 and
 * r2 hold one double per channel, zeroed by the caller. */
static void moments(const float *R, float *m, float *v, int64_t rows, int64_t cols, bool rows_are_channels,
                    const double *sc, double *rt2, double *r2, int nt) {
    const float b1 = (float)sc[0], b2 = (float)sc[1], one_b1 = (float)(1.0 - sc[0]), one_b2 = (float)(1.0 - sc[1]),
                eps = (float)sc[2];
    if (rows_are_channels) {
#pragma omp parallel for num_threads(nt) if (rows * cols > 32768)
        for (int64_t i = 0; i < rows; i++) {
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
            rt2[i] = a;
            r2[i] = b;
        }
    } else {
        /* channel = column: threads take blocks of columns, each walking
         * all rows (the rank) of its block */
        const int64_t blk = 256;
#pragma omp parallel for num_threads(nt) if (rows * cols > 32768)
        for (int64_t j0 = 0; j0 < cols; j0 += blk) {
            const int64_t j1 = j0 + blk < cols ? j0 + blk : cols;
            for (int64_t i = 0; i < rows; i++)
                for (int64_t j = j0; j < j1; j++) {
                    int64_t k = i * cols + j;
                    float g = R[k], mi = m[k] * b1 + g * one_b1, vi = v[k] * b2 + one_b2 * g * g;
                    m[k] = mi;
                    v[k] = vi;
                    float rt = mi / (sqrtf(vi) + eps);
                    rt2[j] += (double)rt * rt;
                    r2[j] += (double)g * g;
                }
        }
    }
}

static kiln_status apollo_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *em = t->src[2], *ev = t->src[3], *prev = t->src[4],
                *hyper = t->src[5];
    if (p->dtype != KILN_F32 || grad->dtype != KILN_F32 || em->dtype != KILN_F32 || ev->dtype != KILN_F32 ||
        prev->dtype != KILN_F64 || hyper->dtype != KILN_F32 || p->ndim != 2)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "apollo_step: needs an f32 matrix, gradient and moments");
    const int64_t step = t->ip[2], rank = t->ip[0], gap = t->ip[1];
    if (step < 1) return kiln__errs(KILN_ERR_STATE, "apollo_step: step number %lld (must be >= 1)", (long long)step);
    const bool mini = t->ip[3] != 0;
    const int nt = ex->n_threads;
    const kiln_apollo_dims d = kiln__apollo_dims(t); /* R = G P^T [m, rank], else R = P^T G [rank, n] */
    const int64_t m = d.m, n = d.n, np = d.np, nr = d.nr, nch = d.nch;
    const bool right = d.right;
    float *P = kiln__malloc((size_t)(np + nr) * sizeof(float));
    double *rt2 = kiln__calloc((size_t)(2 * nch), sizeof(double));
    if (!P || !rt2) {
        free(P);
        free(rt2);
        return kiln__errs(KILN_ERR_OOM, "apollo_step: out of memory for the projection");
    }
    float *R = P + np;
    double *r2 = rt2 + nch;
    const float *G = grad->data;
    float *W = t->data;

    uint64_t seed = kiln__apollo_proj_seed((uint64_t)t->ip[4], (step - 1) / gap);
    kiln__apollo_projector(P, np, seed, (int)rank, nt);
    if (right)
        kiln__sgemm(false, true, m, rank, n, 1.0f, G, n, P, n, 0.0f, R, rank, nt);
    else
        kiln__sgemm(true, false, rank, n, m, 1.0f, P, rank, G, n, 0.0f, R, n, nt);

    const float *h = hyper->data;
    const double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], st = (double)step;
    const double sc[3] = {b1, b2, h[3]};
    moments(R, em->data, ev->data, right ? m : rank, right ? rank : n, right, sc, rt2, r2, nt);

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
    double u2 = 0;
#pragma omp parallel for num_threads(nt) reduction(+ : u2) if (m * n > 32768)
    for (int64_t i = 0; i < m; i++) {
        const float *g = G + i * n;
        double a = 0;
        if (right) {
#pragma omp simd reduction(+ : a)
            for (int64_t j = 0; j < n; j++) a += (double)g[j] * g[j];
            a *= rt2[i] * rt2[i];
        } else {
#pragma omp simd reduction(+ : a)
            for (int64_t j = 0; j < n; j++) {
                float x = sf[j] * g[j];
                a += (double)x * x;
            }
        }
        u2 += a;
    }
    double norm = sqrt(u2), *pn = prev->data, limit = 1.0;
    if (step > 1) {
        double f = norm / (pn[0] + 1e-8);
        limit = (f > 1.01 ? f : 1.01) / 1.01;
    }
    pn[0] = norm / limit;

    const double step_size = lr * sqrt(1.0 - pow(b2, st)) / (1.0 - pow(b1, st));
    const float decay = (float)(1.0 - lr * wd);
    for (int64_t c = 0; c < nch; c++) sf[c] = (float)(-step_size * rt2[c] / limit);
#pragma omp parallel for num_threads(nt) if (m * n > 32768)
    for (int64_t i = 0; i < m; i++) {
        float *w = W + i * n;
        const float *g = G + i * n;
        if (right) {
            const float f = sf[i];
#pragma omp simd
            for (int64_t j = 0; j < n; j++) w[j] = w[j] * decay + f * g[j];
        } else {
#pragma omp simd
            for (int64_t j = 0; j < n; j++) w[j] = w[j] * decay + sf[j] * g[j];
        }
    }
    free(P);
    free(rt2);
    return KILN_OK;
}

void kiln__cpu_register_optim_apollo(kiln_cpu_kernel *tab) { tab[KILN_OP_APOLLO_STEP] = apollo_step; }
