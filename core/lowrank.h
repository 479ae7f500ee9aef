/* lowrank.h — what the low-rank optimizers' step kernels share on every
 * backend (core/lowrank.c): the steps' geometry, GaLore's projector from
 * an SVD on the host, and APOLLO's random projector, regenerated from its
 * seed. The step formulas are in optim/galore.c and optim/apollo.c; not
 * installed.
 *
 * GaLore's refresh runs LAPACK's sgesdd on the host whatever the backend:
 * a device backend downloads G, and uploads P after it
 * (kiln__galore_refresh_device).
 *
 * APOLLO's projector of parameter i at refresh k (the k-th block of
 * update_gap steps, k = (t - 1) / update_gap) is regenerated, never stored:
 *   s_0 = kiln__apollo_param_seed(cfg.seed, i), s_{k+1} = hash64(s_k)
 *   P[j] = normal(s_k, j) / sqrt(rank), j the row-major index of P
 * (apollo_torch likewise seeds parameter i's projector with i and advances
 * the seed at each refresh; its P ~ N(0, 1/rank) is not orthogonalized).
 * A device backend regenerates P on the device from the same seed and
 * counters (core/rng.c's hash and normal).
 *
 *     kiln_apollo_dims d = kiln__apollo_dims(node);
 *     uint64_t s = kiln__apollo_proj_seed((uint64_t)node->ip[4], node->ip[2]); // (t - 1) / gap
 *     kiln__apollo_projector(P, d.np, s, (int)d.rank, n_threads);
 */
#ifndef KILN_LOWRANK_H
#define KILN_LOWRANK_H

#include "backend.h"

/* The steps' geometry: src[0] the parameter [m, n]; R = G P^T [m, r] when
 * m >= n ("right"), else R = P^T G [r, n]. GALORE(8)_STEP: P is src[2]
 * ([r, n] or [m, r]), R's element count. */
static inline int64_t kiln__galore_state_numel(const kiln_tensor *t) {
    const kiln_tensor *p = t->src[0], *proj = t->src[2];
    bool right = p->shape[0] >= p->shape[1];
    return (right ? p->shape[0] : p->shape[1]) * (right ? proj->shape[0] : proj->shape[1]);
}

/* APOLLO_STEP (rank ip[0]): the projector's elements np, R's nr, its rows
 * and the channels nch (R's rows when right, else its columns). */
typedef struct kiln_apollo_dims {
    int64_t m, n, rank, np, nr, nch, rows;
    bool right;
} kiln_apollo_dims;

static inline kiln_apollo_dims kiln__apollo_dims(const kiln_tensor *t) {
    kiln_apollo_dims d = {.m = t->src[0]->shape[0], .n = t->src[0]->shape[1], .rank = t->ip[0]};
    d.right = d.m >= d.n;
    d.np = d.right ? d.rank * d.n : d.m * d.rank;
    d.nr = d.right ? d.m * d.rank : d.rank * d.n;
    d.nch = d.right ? d.m : d.n;
    d.rows = d.right ? d.m : d.rank;
    return d;
}

/* GaLore's projector from the SVD of g [m, n] (f32, row-major) into proj:
 * Vh[:r] [r, n] when m >= n, else U[:, :r] [m, r]. Fails on a non-finite
 * g, and with KILN_ERR_UNSUPPORTED in a build without LAPACK. */
kiln_status kiln__galore_refresh(const char *who, const float *g, int64_t m, int64_t n, int64_t r, float *proj);
/* The same on a device backend b: G downloaded, P uploaded; t is the
 * GALORE(8)_STEP node. */
kiln_status kiln__galore_refresh_device(kiln_backend *b, const kiln_tensor *t, const char *who);

uint64_t kiln__apollo_param_seed(uint64_t seed, int index);
uint64_t kiln__apollo_proj_seed(uint64_t param_seed, int64_t refresh);
/* P[0..n) of the projector with seed proj_seed (from kiln__apollo_proj_seed). */
void kiln__apollo_projector(float *P, int64_t n, uint64_t proj_seed, int rank, int n_threads);

#endif
