/* k_search.c — the searches ggml's K quantizers run per sub-block
 * (ggml-quants.c: make_qx_quants, make_q3_quants, make_qkx2_quants), the
 * same f32 operations in the same order, so that the blocks they lead to
 * are llama-quantize's byte for byte. Each returns the sub-block's scale
 * and writes its codes L (and, with a min, the min's magnitude). */
#include "k_quants.h"

#include <math.h>

#define GROUP_MAX_EPS 1e-15f

static int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* The value of largest magnitude (the first such), or 0 below the epsilon. */
static float signed_max(int n, const float *x) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < n; i++)
        if (fabsf(x[i]) > amax) amax = fabsf(x[i]), max = x[i];
    return amax < GROUP_MAX_EPS ? 0.0f : max;
}

float kiln__make_qx_quants(int n, int nmax, const float *x, int8_t *L) {
    const float max = signed_max(n, x);
    if (max == 0.0f) {
        for (int i = 0; i < n; i++) L[i] = 0;
        return 0.0f;
    }
    /* weights x^2 (ggml's rmse_type 1 without importance) */
    float iscale = -nmax / max, sumlx = 0.0f, suml2 = 0.0f;
    for (int i = 0; i < n; i++) {
        const int l = clampi(kiln__nearest_int(iscale * x[i]), -nmax, nmax - 1);
        const float w = x[i] * x[i];
        L[i] = (int8_t)(l + nmax);
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f, best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (!is) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clampi(kiln__nearest_int(iscale * x[i]), -nmax, nmax - 1);
            const float w = x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(kiln__nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
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

float kiln__make_qkx2_quants(int n, int nmax, const float *x, const float *weights, uint8_t *L, float *the_min,
                             float rmin, float rdelta, int nstep, bool use_mad) {
    uint8_t Laux[32];
    float min = x[0], max = x[0], sum_w = weights[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += weights[i];
        sum_x += weights[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        for (int i = 0; i < n; i++) L[i] = 0;
        *the_min = -min;
        return 0.0f;
    }
    float iscale = nmax / (max - min), scale = 1 / iscale, best_error = 0.0f;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(kiln__nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += weights[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
        for (int i = 0; i < n; i++) {
            const int l = clampi(kiln__nearest_int(iscale * (x[i] - min)), 0, nmax);
            const float w = weights[i];
            Laux[i] = (uint8_t)l;
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        const float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D, this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float cur_error = 0.0f;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                cur_error += weights[i] * diff;
            }
            if (cur_error < best_error) {
                for (int i = 0; i < n; i++) L[i] = Laux[i];
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *the_min = -min;
    return scale;
}
