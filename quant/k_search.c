/* k_search.c — the searches ggml's K quantizers run per sub-block
 * (ggml-quants.c: make_qx_quants, make_q3_quants, make_qkx2_quants), the
 * same f32 operations in the same order, so that the blocks they lead to
 * are llama-quantize's byte for byte. Each returns the sub-block's scale
 * and writes its codes L (and, with a min, the min's magnitude).
 *
 * make_qx_quants and make_qkx2_quants run KILN_KL sub-blocks at once, one
 * per lane of k_quants.h's vectors: each lane's sums keep the reference's
 * order (a sub-block's sums are sequential chains; side by side, KILN_KL
 * chains fill the vector units where one would wait on each add's
 * latency), and what the reference decides by branches each lane decides
 * by selects. */
#include "k_quants.h"

#include <math.h>

#define GROUP_MAX_EPS 1e-15f
#define KL KILN_KL

typedef kiln_kvf vf;
typedef kiln_kvi vi;

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

#define CLAMPV(v, lo, hi) clampv_hi(KILN_KV_SELI((v) < (lo), (vi){0} + (lo), (v)), (hi))
#define clampv_hi(v, hi) KILN_KV_SELI((v) > (hi), (vi){0} + (hi), (v))

/* The value of largest magnitude (the first such), or 0 below the epsilon. */
static float signed_max(int n, const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    return amax < GROUP_MAX_EPS ? 0.0f : max;
}

void kiln__make_qx_quants_lanes(int n, int nmax, const float *x, int8_t *L, float *scale_out) {
    vf xt[32], max, sumlx = {0}, suml2 = {0};
    vi lt[32], la[32];
    kiln__kv_transpose(n, x, xt);
    for (int s = 0; s < KL; s++) max[s] = signed_max(n, x + s * n);
    /* weights x^2 (ggml's rmse_type 1 without importance) */
    vf iscale = (float)-nmax / max;
    for (int i = 0; i < n; i++) {
        const vi l = CLAMPV(KILN_KV_NEAREST(iscale * xt[i]), -nmax, nmax - 1);
        const vf w = xt[i] * xt[i], lf = KILN_KV_FLOAT(l);
        lt[i] = l + nmax;
        sumlx += w * xt[i] * lf;
        suml2 += w * lf * lf;
    }
    vf scale = KILN_KV_SEL(suml2 != 0, sumlx / suml2, (vf){0}), best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (!is) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = (vf){0};
        for (int i = 0; i < n; i++) {
            const vi l = CLAMPV(KILN_KV_NEAREST(iscale * xt[i]), -nmax, nmax - 1);
            const vf w = xt[i] * xt[i], lf = KILN_KV_FLOAT(l);
            la[i] = l + nmax;
            sumlx += w * xt[i] * lf;
            suml2 += w * lf * lf;
        }
        const vi up = (suml2 > 0) & (sumlx * sumlx > best * suml2);
        const vf sc = sumlx / suml2;
        scale = KILN_KV_SEL(up, sc, scale);
        best = KILN_KV_SEL(up, sc * sumlx, best);
        for (int i = 0; i < n; i++) lt[i] = KILN_KV_SELI(up, la[i], lt[i]);
    }
    for (int s = 0; s < KL; s++) {
        for (int i = 0; i < n; i++) L[s * n + i] = (int8_t)(max[s] == 0.0f ? 0 : lt[i][s]);
        scale_out[s] = max[s] == 0.0f ? 0.0f : scale[s];
    }
}

float kiln__make_q3_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_max(n, x);
    if (max == 0.0f) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = clampi(kiln__nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        L[i] = (int8_t)l;
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    /* move one code at a time while the weighted fit improves */
    for (int itry = 0; itry < 5; itry++) {
        int changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                const int nl = clampi(kiln__nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (nl != L[i]) {
                    slx += w * x[i] * nl;
                    sl2 += w * nl * nl;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)nl, sumlx = slx, suml2 = sl2;
                        changed++;
                    }
                }
            }
        }
        if (!changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* use_mad a constant once inlined: no branch in the loops */
static inline __attribute__((always_inline)) void qkx2(int n, int nmax, const float *x, const float *weights,
                                                       uint8_t *L, float *scale_out, float *the_min, float rmin,
                                                       float rdelta, int nstep, const bool use_mad) {
    vf xt[32] = {{0}}, wt[32] = {{0}}; /* (n >= 1, which the compiler cannot see) */
    vi lt[32], la[32];
    kiln__kv_transpose(n, x, xt);
    kiln__kv_transpose(n, weights, wt);
    vf min = xt[0], max = xt[0], sum_w = wt[0], sum_x = sum_w * xt[0];
    for (int i = 1; i < n; i++) {
        min = KILN_KV_SEL(xt[i] < min, xt[i], min);
        max = KILN_KV_SEL(xt[i] > max, xt[i], max);
        sum_w += wt[i];
        sum_x += wt[i] * xt[i];
    }
    min = KILN_KV_SEL(min > 0, (vf){0}, min);
    const vi flat = max == min;
    const vf min0 = min;
    vf iscale = (float)nmax / (max - min), scale = 1.0f / iscale, best_error = {0};
    for (int i = 0; i < n; i++) {
        lt[i] = CLAMPV(KILN_KV_NEAREST(iscale * (xt[i] - min)), 0, nmax);
        vf diff = scale * KILN_KV_FLOAT(lt[i]) + min - xt[i];
        diff = use_mad ? (vf)((vi)diff & 0x7fffffff) : diff * diff;
        best_error += wt[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        vf sum_l = {0}, sum_l2 = {0}, sum_xl = {0}, cur_error = {0};
        for (int i = 0; i < n; i++) {
            la[i] = CLAMPV(KILN_KV_NEAREST(iscale * (xt[i] - min)), 0, nmax);
            const vf w = wt[i], l = KILN_KV_FLOAT(la[i]);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * xt[i];
        }
        const vf D = sum_w * sum_l2 - sum_l * sum_l;
        vf this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
        const vi pos = this_min > 0;
        this_min = KILN_KV_SEL(pos, (vf){0}, this_min);
        this_scale = KILN_KV_SEL(pos, sum_xl / sum_l2, this_scale);
        for (int i = 0; i < n; i++) {
            vf diff = this_scale * KILN_KV_FLOAT(la[i]) + this_min - xt[i];
            diff = use_mad ? (vf)((vi)diff & 0x7fffffff) : diff * diff;
            cur_error += wt[i] * diff;
        }
        const vi up = (D > 0) & (cur_error < best_error);
        best_error = KILN_KV_SEL(up, cur_error, best_error);
        scale = KILN_KV_SEL(up, this_scale, scale);
        min = KILN_KV_SEL(up, this_min, min);
        for (int i = 0; i < n; i++) lt[i] = KILN_KV_SELI(up, la[i], lt[i]);
    }
    /* a flat sub-block (max == min): codes 0, scale 0, its first min */
    for (int s = 0; s < KL; s++) {
        for (int i = 0; i < n; i++) L[s * n + i] = (uint8_t)(flat[s] ? 0 : lt[i][s]);
        the_min[s] = -(flat[s] ? min0[s] : min[s]);
        scale_out[s] = flat[s] ? 0.0f : scale[s];
    }
}

void kiln__make_qkx2_quants_lanes(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *scale,
                                  float *the_min, float rmin, float rdelta, int nstep, bool use_mad) {
    if (use_mad) qkx2(n, nmax, x, weights, L, scale, the_min, rmin, rdelta, nstep, true);
    else qkx2(n, nmax, x, weights, L, scale, the_min, rmin, rdelta, nstep, false);
}
