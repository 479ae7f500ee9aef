/* vk_optim_galore.c — GaLore's steps (KILN_OP_GALORE_STEP and
 * KILN_OP_GALORE8_STEP, layouts in optim/galore.c) on the Vulkan backend.
 *
 * The SVD stays on the host (LAPACK's sgesdd, as the CPU kernel: a device
 * SVD would be a project of its own, and it runs once every update_gap
 * steps): on a refresh step the record function flushes the recorded work,
 * downloads G, runs core's kiln__galore_refresh (core/lowrank.c) and uploads P
 * into the command stream. Every step then records, with R in scratch:
 *   opt_galore_proj   R = G P^T or P^T G
 *   opt_galore_adam   Adam on R with f32 moments (R becomes N), or
 *   opt_galore_adam8  8-bit GaLore's block-wise 8-bit Adam
 *   opt_galore_back   p += alpha (N P or P N), then the weight decay
 * so a step that does not refresh never touches the host. The sums run in
 * a different order from the CPU's GEMM: results agree to f32 rounding,
 * not bit for bit. */
#include "vk.h"
#include "vk_runtime.h"
#include "lowrank.h"

#include <stdlib.h>

/* dtype, contiguous, bindable, with n elements. */
static bool leaf_ok(const kiln_vk *vk, const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n && kiln__vk_fits(vk, t);
}

static bool galore_supports(const kiln_vk *vk, const kiln_tensor *t) {
    bool q8 = t->op == KILN_OP_GALORE8_STEP && t->ip[2] != 0;
    if (t->nsrc != (q8 ? 8 : 6) || t->src[0]->ndim != 2 || t->src[2]->ndim != 2) return false;
    const kiln_tensor *p = t->src[0], *h = t->src[t->nsrc - 1];
    int64_t m = p->shape[0], n = p->shape[1], nr = kiln__galore_state_numel(t), nb = (nr + 255) / 256;
    bool right = m >= n;
    int64_t r = right ? t->src[2]->shape[0] : t->src[2]->shape[1];
    bool ok = m * n <= INT32_MAX && nr <= INT32_MAX - 255 && leaf_ok(vk, p, KILN_F32, m * n) &&
              leaf_ok(vk, t->src[1], KILN_F32, m * n) && leaf_ok(vk, t->src[2], KILN_F32, r * (right ? n : m)) &&
              leaf_ok(vk, h, KILN_F32, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= 5 + KILN__HYPER_STEP_SLOTS;
    if (q8)
        return ok && leaf_ok(vk, t->src[3], KILN_I32, (nr + 3) / 4) && leaf_ok(vk, t->src[4], KILN_I32, (nr + 3) / 4) &&
               leaf_ok(vk, t->src[5], KILN_F32, 2 * nb) && leaf_ok(vk, t->src[6], KILN_F32, 512);
    return ok && leaf_ok(vk, t->src[3], KILN_F32, nr) && leaf_ok(vk, t->src[4], KILN_F32, nr);
}

static kiln_status galore_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool eight = t->op == KILN_OP_GALORE8_STEP, q8 = eight && t->ip[2] != 0;
    const char *who = eight ? "galore8_step" : "galore_step";
    kiln_tensor *p = t->src[0], *proj = t->src[2], *h = t->src[t->nsrc - 1];
    int64_t m = p->shape[0], n = p->shape[1], nr = kiln__galore_state_numel(t);
    bool right = m >= n;
    uint32_t r = (uint32_t)(right ? proj->shape[0] : proj->shape[1]);
    kiln_status s;
    if (t->ip[1] && (s = kiln__galore_refresh_device(&vk->base, t, who))) return s;
    kiln_tensor low;
    if ((s = kiln__vk_scratch(vk, nr, KILN_F32, &low))) return s;
    uint32_t r0 = kiln__vk_base(vk, &low);
    /* R = G P^T or P^T G */
    struct {
        uint32_t m, n, r, right, g0, p0, r0;
    } pp = {(uint32_t)m, (uint32_t)n, r, right, kiln__vk_base(vk, t->src[1]), kiln__vk_base(vk, proj), r0};
    kiln_vk_dispatch d = {.shader = "opt_galore_proj", .n = 3, .bind = {t->src[1], proj, &low}, .push = &pp,
                          .push_size = sizeof pp};
    kiln__vk_groups_1d(vk, (uint64_t)nr, 256, d.groups);
    if ((s = kiln__vk_dispatch(vk, &d))) return s;
    /* Adam on R: R becomes N */
    if (q8) {
        struct {
            uint32_t n, r0, mq0, vq0, a0, nb, mp0, h0;
        } pa = {(uint32_t)nr,
                r0,
                kiln__vk_base(vk, t->src[3]),
                kiln__vk_base(vk, t->src[4]),
                kiln__vk_base(vk, t->src[5]),
                (uint32_t)((nr + 255) / 256),
                kiln__vk_base(vk, t->src[6]),
                kiln__vk_base(vk, h)};
        d = (kiln_vk_dispatch){.shader = "opt_galore_adam8", .n = 6,
                               .bind = {&low, t->src[3], t->src[4], t->src[5], t->src[6], h}, .push = &pa,
                               .push_size = sizeof pa};
        /* whole blocks: the shader's block index is its global id / 256 */
        kiln__vk_groups_1d(vk, (uint64_t)((nr + 255) / 256) * 256, 256, d.groups);
        /* dispatched here: d.push points at pa, which ends with this block */
        if ((s = kiln__vk_dispatch(vk, &d))) return s;
    } else {
        struct {
            uint32_t n, r0, m0, v0, h0, bnb;
        } pa = {(uint32_t)nr, r0, kiln__vk_base(vk, t->src[3]), kiln__vk_base(vk, t->src[4]), kiln__vk_base(vk, h), eight};
        d = (kiln_vk_dispatch){.shader = "opt_galore_adam", .n = 4, .bind = {&low, t->src[3], t->src[4], h},
                               .push = &pa, .push_size = sizeof pa};
        kiln__vk_groups_1d(vk, (uint64_t)nr, 256, d.groups);
        if ((s = kiln__vk_dispatch(vk, &d))) return s;
    }
    /* p += alpha (N P or P N); p *= 1 - lr wd */
    struct {
        uint32_t m, n, r, right, p0, q0, r0, h0;
        float scale;
    } pb = {(uint32_t)m, (uint32_t)n, r, right, kiln__vk_base(vk, p), kiln__vk_base(vk, proj), r0, kiln__vk_base(vk, h),
            (float)t->fp[0]};
    d = (kiln_vk_dispatch){.shader = "opt_galore_back", .n = 4, .bind = {p, proj, &low, h}, .push = &pb,
                           .push_size = sizeof pb};
    kiln__vk_groups_1d(vk, (uint64_t)(m * n), 256, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

void kiln__vk_register_optim_galore(kiln_vk_kernel *tab) {
    tab[KILN_OP_GALORE_STEP] = (kiln_vk_kernel){galore_supports, galore_record};
    tab[KILN_OP_GALORE8_STEP] = (kiln_vk_kernel){galore_supports, galore_record};
}
