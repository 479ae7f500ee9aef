/* optim_galore.c — CPU kernel of GaLore's fused step (KILN_OP_GALORE_STEP;
 * layout and formula in optim/galore.c and include/kiln.h): refresh the
 * projector from an SVD of the gradient when asked, project the gradient
 * to rank r, Adam on the low-rank moments, project back into p.
 *
 * The SVD is LAPACK's sgesdd (divide and conquer), not a randomized SVD:
 * GaLore's reference takes the exact top-r singular vectors
 * (torch.linalg.svd), and a randomized range finder gives a different,
 * seed-dependent subspace whose error depends on the spectrum's decay —
 * results would no longer match the reference. The exact SVD runs once
 * every update_gap (200) steps, so its O(mn min(m, n)) cost is small
 * against the steps' own O(mnr) projections. A BLAS=0 build links no
 * LAPACK: the constructors refuse GaLore there and this kernel, should it
 * be reached, fails with KILN_ERR_UNSUPPORTED.
 */
#include "internal.h"
#include "gemm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_BLAS
#include <lapacke.h>

/* P from the SVD of g [m, n] (row-major): Vh[:r] [r, n] when m >= n, else
 * U[:, :r] [m, r]. OpenBLAS's sgesdd is several times slower on a wide
 * matrix than on the tall transpose (4096x1024: 3.9 s tall, 11.7 s wide,
 * one core), so LAPACK always gets the tall one:
 *   m >= n: g itself, through LAPACKE's row-major path (a transposed copy);
 *   m < n:  the bytes of g as they are, which column-major are Gᵀ [n, m],
 *           whose SVD is V S Uᵀ: LAPACK's "Vᵀ" [m, m] is Uᵀ column-major,
 *           i.e. U row-major.
 * jobz 'O' stores only the side we need apart (the other overwrites the
 * copy of g, which sgesdd destroys anyway): one extra k x k array. */
static kiln_status refresh_projector(const float *g, int64_t m, int64_t n, int64_t r, float *proj) {
    int64_t k = m < n ? m : n;
    size_t na = (size_t)(m * n), nk = (size_t)(k * k);
    float *a = malloc((na + nk + (size_t)k) * sizeof *a);
    if (!a) return kiln__errs(KILN_ERR_OOM, "galore_step: no memory for the SVD of a %lldx%lld gradient",
                              (long long)m, (long long)n);
    float *side = a + na, *s = side + nk;
    memcpy(a, g, na * sizeof *a);
    lapack_int info;
    if (m >= n) /* side = Vh [n, n] row-major */
        info = LAPACKE_sgesdd(LAPACK_ROW_MAJOR, 'O', (lapack_int)m, (lapack_int)n, a, (lapack_int)n, s, NULL, 1,
                              side, (lapack_int)n);
    else /* side = Uᵀ [m, m] column-major = U row-major */
        info = LAPACKE_sgesdd(LAPACK_COL_MAJOR, 'O', (lapack_int)n, (lapack_int)m, a, (lapack_int)n, s, NULL, 1,
                              side, (lapack_int)m);
    if (info == 0) {
        if (m >= n) /* the first r rows of Vh */
            memcpy(proj, side, (size_t)(r * n) * sizeof *proj);
        else /* the first r columns of U */
            for (int64_t i = 0; i < m; i++) memcpy(proj + i * r, side + i * k, (size_t)r * sizeof *proj);
    }
    free(a);
    if (info < 0) return kiln__errs(KILN_ERR_ARG, "galore_step: LAPACKE_sgesdd: argument %d is invalid", (int)-info);
    if (info > 0)
        return kiln__errs(KILN_ERR_NUMERIC, "galore_step: sgesdd did not converge on the %lldx%lld gradient "
                                            "(NaN or Inf in it?)", (long long)m, (long long)n);
    return KILN_OK;
}
#endif

/* Adam on the low-rank gradient, in place: R becomes N = m / (sqrt(v) + eps)
 * (galore_torch's order: eps before the bias correction, which is folded
 * into the step size). f32 throughout, as torch on f32 tensors. */
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

static kiln_status galore_step(kiln_tensor *t, const kiln_exec *ex) {
    kiln_tensor *p = t->src[0], *grad = t->src[1], *proj = t->src[2], *m1 = t->src[3], *m2 = t->src[4];
    kiln_tensor *hyper = t->src[5];
    if (p->dtype != KILN_F32 || grad->dtype != KILN_F32 || proj->dtype != KILN_F32 || m1->dtype != KILN_F32 ||
        m2->dtype != KILN_F32 || hyper->dtype != KILN_F32 || p->ndim != 2)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "galore_step: needs an f32 matrix, gradient and state");
    if (t->ip[0] < 1) return kiln__errs(KILN_ERR_STATE, "galore_step: step number %lld (must be >= 1)", (long long)t->ip[0]);
    int64_t m = p->shape[0], n = p->shape[1];
    bool right = m >= n;
    int64_t r = right ? proj->shape[0] : proj->shape[1];
    const float *g = grad->data, *h = hyper->data;
    float *P = proj->data, *w = t->data;
    if (t->ip[1]) {
#ifdef KILN_BLAS
        kiln_status s = refresh_projector(g, m, n, r, P);
        if (s) return s;
#else
        return kiln__errs(KILN_ERR_UNSUPPORTED, "galore_step: no LAPACK in this build (BLAS=0), no SVD");
#endif
    }
    int64_t nr = kiln_tensor_numel(m1);
    float *rg = malloc((size_t)nr * sizeof *rg);
    if (!rg) return kiln__errs(KILN_ERR_OOM, "galore_step: no memory for the low-rank gradient");
    int nt = ex->n_threads;
    if (right) /* R = G P^T: [m, n] x [r, n]^T */
        kiln__sgemm(false, true, m, r, n, 1.0f, g, n, P, n, 0.0f, rg, r, nt);
    else /* R = P^T G: [m, r]^T x [m, n] */
        kiln__sgemm(true, false, r, n, m, 1.0f, P, r, g, n, 0.0f, rg, n, nt);
    double lr = h[0], b1 = h[1], b2 = h[2], wd = h[4], step = (double)t->ip[0];
    lowrank_adam(rg, m1->data, m2->data, nr, h[1], h[2], h[3]);
    /* p += -(step_size * scale) * back(N), step_size = lr sqrt(bc2) / bc1,
     * accumulated by the GEMM itself (beta 1): no [m, n] temporary */
    double step_size = lr * sqrt(1.0 - pow(b2, step)) / (1.0 - pow(b1, step));
    float alpha = (float)(-step_size * t->fp[0]);
    if (right) /* N P: [m, r] x [r, n] */
        kiln__sgemm(false, false, m, n, r, alpha, rg, r, P, n, 1.0f, w, n, nt);
    else /* P N: [m, r] x [r, n] */
        kiln__sgemm(false, false, m, n, r, alpha, P, r, rg, n, 1.0f, w, n, nt);
    free(rg);
    /* decoupled weight decay after the update, as galore_torch */
    if (wd > 0) {
        const float decay = (float)(-lr * wd);
        int64_t nw = m * n;
        _Pragma("omp parallel for simd num_threads(nt) if (nw > 65536)")
        for (int64_t i = 0; i < nw; i++) w[i] += w[i] * decay;
    }
    return KILN_OK;
}

void kiln__cpu_register_optim_galore(kiln_cpu_kernel *tab) { tab[KILN_OP_GALORE_STEP] = galore_step; }
