/* lowrank.c — the low-rank optimizers' parts that every backend's step
 * kernel shares (lowrank.h): GaLore's projector from an SVD on the host,
 * APOLLO's seeds and projector generator.
 *
 * GaLore's SVD is LAPACK's sgesdd (divide and conquer), not a randomized
 * SVD: GaLore's reference takes the exact top-r singular vectors
 * (torch.linalg.svd), and a randomized range finder gives a different,
 * seed-dependent subspace whose error depends on the spectrum's decay —
 * results would no longer match the reference. The exact SVD runs once
 * every update_gap (200) steps, so its O(mn min(m, n)) cost is small
 * against the steps' own O(mnr) projections. A BLAS=0 build links no
 * LAPACK: the constructors refuse GaLore there and the refresh, should it
 * be reached, fails with KILN_ERR_UNSUPPORTED.
 */
#include "lowrank.h"
#include "pool.h"

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
kiln_status kiln__galore_refresh(const char *who, const float *g, int64_t m, int64_t n, int64_t r, float *proj) {
    int64_t k = m < n ? m : n;
    size_t na = (size_t)(m * n), nk = (size_t)(k * k);
    /* LAPACK's behaviour on NaN/Inf input is undefined (it may not return) */
    for (size_t i = 0; i < na; i++)
        if (!isfinite(g[i]))
            return kiln__errs(KILN_ERR_NUMERIC, "%s: the %lldx%lld gradient has a NaN or Inf on a projector refresh "
                                                "step (element %zu); no SVD of it", who, (long long)m, (long long)n, i);
    float *a = kiln__malloc((na + nk + (size_t)k) * sizeof *a);
    if (!a) return kiln__errs(KILN_ERR_OOM, "%s: no memory for the SVD of a %lldx%lld gradient", who,
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
    if (info < 0) return kiln__errs(KILN_ERR_ARG, "%s: LAPACKE_sgesdd: argument %d is invalid", who, (int)-info);
    if (info > 0)
        return kiln__errs(KILN_ERR_NUMERIC, "%s: sgesdd did not converge on the %lldx%lld gradient", who,
                          (long long)m, (long long)n);
    return KILN_OK;
}
#else
kiln_status kiln__galore_refresh(const char *who, const float *g, int64_t m, int64_t n, int64_t r, float *proj) {
    (void)g, (void)m, (void)n, (void)r, (void)proj;
    return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no LAPACK in this build (BLAS=0), no SVD", who);
}
#endif

kiln_status kiln__galore_refresh_device(kiln_backend *b, const kiln_tensor *t, const char *who) {
    const kiln_tensor *p = t->src[0], *grad = t->src[1], *proj = t->src[2];
    int64_t m = p->shape[0], n = p->shape[1], np = kiln_tensor_numel(proj);
    int64_t r = m >= n ? proj->shape[0] : proj->shape[1];
    float *g = kiln__malloc((size_t)(m * n + np) * sizeof *g);
    if (!g) return kiln__errs(KILN_ERR_OOM, "%s: no host memory for the gradient's SVD", who);
    float *P = g + m * n;
    kiln_status s = b->vt->download(b, grad->dbuf, grad->doff, g, (size_t)(m * n) * sizeof *g);
    if (!s) s = kiln__galore_refresh(who, g, m, n, r, P);
    if (!s) s = b->vt->upload(b, proj->dbuf, proj->doff, P, (size_t)np * sizeof *P);
    free(g);
    return s;
}

uint64_t kiln__apollo_param_seed(uint64_t seed, int index) {
    return kiln__hash64(seed ^ kiln__hash64((uint64_t)index + 1));
}

uint64_t kiln__apollo_proj_seed(uint64_t param_seed, int64_t refresh) {
    uint64_t s = param_seed;
    for (int64_t k = 0; k < refresh; k++) s = kiln__hash64(s);
    return s;
}

typedef struct projector_job {
    float *P;
    uint64_t seed;
    double inv;
} projector_job;

static void projector_range(void *arg, int64_t j0, int64_t j1, int tid) {
    const projector_job *p = arg;
    (void)tid;
    for (int64_t j = j0; j < j1; j++) p->P[j] = (float)(kiln__normal(p->seed, (uint64_t)j) * p->inv);
}

void kiln__apollo_projector(float *P, int64_t n, uint64_t proj_seed, int rank, int n_threads) {
    projector_job p = {P, proj_seed, 1.0 / sqrt((double)rank)};
    kiln__pool_for(n, 4096, n > 16384 ? n_threads : 1, projector_range, &p);
}
