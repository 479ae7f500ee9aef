/* apollo.h — APOLLO's random projector (optim/apollo.c), shared by the
 * CPU step kernel and the tests; not installed.
 *
 * The projector of parameter i at refresh k (the k-th block of update_gap
 * steps, k = (t - 1) / update_gap) is regenerated, never stored:
 *   s_0 = kiln__apollo_param_seed(cfg.seed, i), s_{k+1} = hash64(s_k)
 *   P[j] = normal(s_k, j) / sqrt(rank), j the row-major index of P
 * (apollo_torch likewise seeds parameter i's projector with i and advances
 * the seed at each refresh; its P ~ N(0, 1/rank) is not orthogonalized). */
#ifndef KILN_OPTIM_APOLLO_H
#define KILN_OPTIM_APOLLO_H

#include "internal.h"

uint64_t kiln__apollo_param_seed(uint64_t seed, int index);
uint64_t kiln__apollo_proj_seed(uint64_t param_seed, int64_t refresh);
/* P[0..n) of the projector with seed proj_seed (from kiln__apollo_proj_seed). */
void kiln__apollo_projector(float *P, int64_t n, uint64_t proj_seed, int rank, int n_threads);

#endif
