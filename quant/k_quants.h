/* k_quants.h — what ggml's K quantizers share (quant/k_search.c, the
 * files of the K types): the per-sub-block searches, as ggml-quants.c
 * runs them. Internal to quant/.
 *
 *     float d[KILN_KL];
 *     kiln__make_qx_quants_lanes(16, 32, x, L, d);   // Q6_K's sub-blocks 0 .. KILN_KL - 1
 */
#ifndef KILN_K_QUANTS_H
#define KILN_K_QUANTS_H

#include "quant.h"

/* The searches below run KILN_KL sub-blocks of n <= 32 at once: sub-block
 * s at x + s n (its weights at weights + s n, its codes to L + s n), its
 * scale to scale[s] (its min's magnitude to the_min[s]). 4: one 16-byte
 * vector, which every baseline has (SSE2, NEON); 8 lanes in GCC's 32-byte
 * generic vectors ran slower than the scalar search on x86-64's baseline
 * (lowered through memory). */
#define KILN_KL 4

/* KILN_KL lanes as GCC's generic vectors (the compiler maps them to the
 * target's baseline, or to scalars): each lane's f32 operations are
 * IEEE's, as scalar ones, so a lane computes the reference's values;
 * comparisons give -1 / 0 per lane. No CPU caps are read. */
typedef float kiln_kvf __attribute__((vector_size(4 * KILN_KL)));
typedef int32_t kiln_kvi __attribute__((vector_size(4 * KILN_KL)));

/* a where m (-1), else b */
#define KILN_KV_SEL(m, a, b) ((kiln_kvf)(((kiln_kvi)(a) & (m)) | ((kiln_kvi)(b) & ~(m))))
#define KILN_KV_SELI(m, a, b) (((a) & (m)) | ((b) & ~(m)))
/* kiln__nearest_int per lane */
#define KILN_KV_NEAREST(v) (((kiln_kvi)((v) + 12582912.0f) & 0x007fffff) - 0x00400000)
#define KILN_KV_FLOAT(v) __builtin_convertvector((v), kiln_kvf)
/* sub-blocks s of n values (s at x + s n) as one vector per element */
static inline void kiln__kv_transpose(int n, const float *x, kiln_kvf *t) {
    for (int i = 0; i < n; i++)
        for (int s = 0; s < KILN_KL; s++) t[i][s] = x[s * n + i];
}

/* Symmetric codes L in [0, 2 nmax) (q = L - nmax), weighted by x^2, the
 * scale searched over 19 trial reciprocals (make_qx_quants, rmse_type 1). */
void kiln__make_qx_quants_lanes(int n, int nmax, const float *x, int8_t *L, float *scale);
/* Q3_K's: codes L in [0, 2 nmax), refined one code at a time. */
float kiln__make_q3_quants(int n, int nmax, const float *x, int8_t *L);
/* Codes L in [0, nmax] with a min (x = scale L - the_min), the weighted
 * error (absolute with use_mad, else squared) searched over nstep + 1
 * trial scales (rmin + rdelta is + nmax) / (max - min). */
void kiln__make_qkx2_quants_lanes(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale,
                                  float *the_min, float rmin, float rdelta, int nstep, bool use_mad);

#endif
