/* vk_optim_8bit.c — the 8-bit Adam/AdamW step (KILN_OP_ADAM8_STEP, layout
 * in optim/opt8bit.c) on the Vulkan backend: one workgroup per block of 256
 * (shaders/opt_adam8.glsl), giving the CPU kernel's parameters, codes and
 * absmax bit for bit. 8-bit Lion and SGD have no device kernel yet. */
#include "vk.h"

/* dtype, contiguous, bindable, with n elements. */
static bool leaf_ok(const kiln_vk *vk, const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n && kiln__vk_fits(vk, t);
}

static bool adam8_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (t->nsrc != 8) return false;
    int64_t n = kiln_tensor_numel(t->src[0]), nb = (n + 255) / 256;
    const kiln_tensor *h = t->src[7];
    return n <= INT32_MAX - 255 && leaf_ok(vk, t->src[0], KILN_F32, n) && leaf_ok(vk, t->src[1], KILN_F32, n) &&
           leaf_ok(vk, t->src[2], KILN_I32, (n + 3) / 4) && leaf_ok(vk, t->src[3], KILN_F32, nb) &&
           leaf_ok(vk, t->src[4], KILN_I32, (n + 3) / 4) && leaf_ok(vk, t->src[5], KILN_F32, nb) &&
           leaf_ok(vk, t->src[6], KILN_F32, 512) && leaf_ok(vk, h, KILN_F32, kiln_tensor_numel(h)) &&
           kiln_tensor_numel(h) >= 5;
}

static kiln_status adam8_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    if (t->ip[2] < 1 || t->ip[2] > UINT32_MAX)
        return kiln__errs(KILN_ERR_STATE, "adam8_step: step number %lld (must be >= 1)", (long long)t->ip[2]);
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, mq0, ma0, vq0, va0, mp0, h0, t, decoupled;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            kiln__vk_base(vk, t->src[4]),
            kiln__vk_base(vk, t->src[5]),
            kiln__vk_base(vk, t->src[6]),
            kiln__vk_base(vk, t->src[7]),
            (uint32_t)t->ip[2],
            t->ip[1] != 0};
    kiln_vk_dispatch dp = {.shader = "opt_adam8", .n = 8, .push = &pc, .push_size = sizeof pc};
    for (int k = 0; k < 8; k++) dp.bind[k] = t->src[k];
    /* whole blocks: the shader's block index is its global id / 256 */
    kiln__vk_groups_1d(vk, (uint64_t)((n + 255) / 256) * 256, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_optim_8bit(kiln_vk_kernel *tab) {
    tab[KILN_OP_ADAM8_STEP] = (kiln_vk_kernel){adam8_supports, adam8_record};
}
