/* k_quants.h — what ggml's K quantizers share (quant/k_search.c, the
 * files of the K types): the per-sub-block searches, as ggml-quants.c
 * runs them. Internal to quant/.
 *
 *     float d = kiln__make_qx_quants(16, 32, x, L);   // Q6_K's sub-block of 16
 */
#ifndef KILN_K_QUANTS_H
#define KILN_K_QUANTS_H

#include "quant.h"

/* Symmetric codes L in [0, 2 nmax) (q = L - nmax), weighted by x^2, the
 * scale searched over 19 trial reciprocals (make_qx_quants, rmse_type 1). */
float kiln__make_qx_quants(int n, int nmax, const float *x, int8_t *L);
/* Q3_K's: codes L in [0, 2 nmax), refined one code at a time. */
float kiln__make_q3_quants(int n, int nmax, const float *x, int8_t *L);
/* Codes L in [0, nmax] with a min (x = scale L - the_min), the weighted
 * error (absolute with use_mad, else squared) searched over nstep + 1
 * trial scales (rmin + rdelta is + nmax) / (max - min); n <= 32. */
float kiln__make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                             float rmin, float rdelta, int nstep, bool use_mad);

#endif
