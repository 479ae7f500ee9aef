/* vk_optim_apollo.c — the APOLLO / APOLLO-Mini step (KILN_OP_APOLLO_STEP,
 * formula and layout in optim/apollo.c) on the Vulkan backend: five
 * dispatches of shaders/opt_apollo.glsl over scratch for P, R, the
 * per-channel sums and the factors of G:
 *   proj     P regenerated from the seed (core/rng.c's hash and normal
 *            ported: the CPU's P bit for bit but in rare last-ulp cases)
 *   project  R = G P^T or P^T G in 64 x 64 tiles (f32 sums, in another
 *            order than the CPU's GEMM: R agrees to f32 rounding, not bit
 *            for bit)
 *   moments  exp_avg, exp_avg_sq and per channel |Rt|^2, |R|^2, |G_c|^2
 *   norm     scaling factors, |u|, the norm-growth limiter on prev_norm
 *   update   p = p * (1 - lr wd) + f_c g
 * The norms and prev_norm are f64 as on the CPU, so the device needs
 * shaderFloat64 (kiln__vk_caps()->f64); without it the node stays on the
 * CPU. 64-bit integers are uint pairs (no shaderInt64 needed). */
#include "vk.h"
#include "lowrank.h"

#include <math.h>
#include <string.h>

/* dtype, contiguous, bindable, with n elements. */
static bool leaf_ok(const kiln_vk *vk, const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n && kiln__vk_fits(vk, t);
}

static bool apollo_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_vk_caps *caps = kiln__vk_caps(vk);
    if (!caps->f64 || t->nsrc != 6 || t->src[0]->ndim != 2 || t->ip[0] < 1 || t->ip[1] < 1) return false;
    kiln_apollo_dims d = kiln__apollo_dims(t);
    const int64_t lim = INT32_MAX - 255, mn = d.m * d.n;
    /* the scratch: P and R (f32), 3 sums per channel (f64), nch + 1 factors */
    const uint64_t scratch_max = (uint64_t)(d.np > d.nr ? d.np : d.nr) * 4;
    if (mn == 0 || mn > lim || d.np > lim || d.nr > lim || 3 * d.nch > lim || scratch_max > caps->max_range ||
        (uint64_t)d.nch * 24 > caps->max_range || (d.nr / d.rows + 63) / 64 > caps->max_groups[0] ||
        (d.rows + 63) / 64 > caps->max_groups[1])
        return false;
    const kiln_tensor *h = t->src[5];
    return leaf_ok(vk, t->src[0], KILN_F32, mn) && leaf_ok(vk, t->src[1], KILN_F32, mn) &&
           leaf_ok(vk, t->src[2], KILN_F32, d.nr) && leaf_ok(vk, t->src[3], KILN_F32, d.nr) &&
           leaf_ok(vk, t->src[4], KILN_F64, 1) && leaf_ok(vk, h, KILN_F32, kiln_tensor_numel(h)) &&
           kiln_tensor_numel(h) >= 5 + KILN__HYPER_STEP_SLOTS;
}

static void split_u64(uint64_t x, uint32_t *lo, uint32_t *hi) {
    *lo = (uint32_t)x;
    *hi = (uint32_t)(x >> 32);
}

static void split_f64(double x, uint32_t *lo, uint32_t *hi) {
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    split_u64(b, lo, hi);
}

static kiln_status apollo_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    kiln_apollo_dims d = kiln__apollo_dims(t);
    kiln_tensor sc[4]; /* P, R, the f64 norms S, the factors F */
    kiln_status s = kiln__vk_scratch_n(vk, 4, (int64_t[]){d.np, d.nr, 3 * d.nch, d.nch + 1},
                                       (kiln_dtype[]){KILN_F32, KILN_F32, KILN_F64, KILN_F32}, sc);
    if (s) return s;
    kiln_tensor *P = &sc[0], *R = &sc[1], *S = &sc[2], *F = &sc[3];
    struct {
        uint32_t m, n, rank, right, mini, np, nch, p0, g0, m0, v0, pv0, h0;
        uint32_t hs_lo, hs_hi, inv_lo, inv_hi, sq_lo, sq_hi;
    } pc = {(uint32_t)d.m,
            (uint32_t)d.n,
            (uint32_t)d.rank,
            d.right,
            t->ip[3] != 0,
            (uint32_t)d.np,
            (uint32_t)d.nch,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            kiln__vk_base(vk, t->src[4]),
            kiln__vk_base(vk, t->src[5]),
            0, 0, 0, 0, 0, 0}; /* the seed and the doubles, set below */
    /* the seed of this refresh, hashed once as kiln__uniform01 does */
    uint64_t seed = kiln__apollo_proj_seed((uint64_t)t->ip[4], t->ip[2]);
    split_u64(kiln__hash64(seed), &pc.hs_lo, &pc.hs_hi);
    split_f64(1.0 / sqrt((double)d.rank), &pc.inv_lo, &pc.inv_hi);
    split_f64(sqrt(t->fp[0]), &pc.sq_lo, &pc.sq_hi);

    const struct {
        const char *shader;
        int n;
        const kiln_tensor *bind[6];
        int64_t invocations;
    } pass[5] = {
        {"opt_apollo_proj", 1, {P}, d.np},
        {"opt_apollo_project", 3, {t->src[1], P, R}, d.nr},
        {"opt_apollo_moments", 6, {t->src[1], R, t->src[2], t->src[3], t->src[5], S}, d.nch},
        {"opt_apollo_norm", 4, {S, t->src[5], t->src[4], F}, 1},
        {"opt_apollo_update", 3, {t->src[0], t->src[1], F}, d.m * d.n},
    };
    for (int k = 0; k < 5; k++) {
        kiln_vk_dispatch dp = {.shader = pass[k].shader, .n = pass[k].n, .push = &pc, .push_size = sizeof pc};
        memcpy(dp.bind, pass[k].bind, sizeof pass[k].bind);
        if (k == 1) { /* 64 x 64 tiles of R */
            dp.groups[0] = (uint32_t)((d.nr / d.rows + 63) / 64);
            dp.groups[1] = (uint32_t)((d.rows + 63) / 64);
        } else {
            kiln__vk_groups_1d(vk, (uint64_t)pass[k].invocations, 256, dp.groups);
        }
        if ((s = kiln__vk_dispatch(vk, &dp))) return s;
    }
    return KILN_OK;
}

void kiln__vk_register_optim_apollo(kiln_vk_kernel *tab) {
    tab[KILN_OP_APOLLO_STEP] = (kiln_vk_kernel){apollo_supports, apollo_record};
}
