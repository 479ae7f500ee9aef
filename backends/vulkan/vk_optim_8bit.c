/* vk_optim_8bit.c — the 8-bit Adam/AdamW, Lion and SGD-momentum steps
 * (KILN_OP_ADAM8_STEP, LION8_STEP, SGD8_STEP, layouts in optim/opt8bit.c)
 * on the Vulkan backend: one workgroup per block of 256 (shaders/opt_adam8,
 * opt_lion8, opt_sgd8.glsl over opt_q8.glsl), giving the CPU kernel's
 * parameters, codes and absmax bit for bit. */
#include "vk.h"

/* dtype, contiguous, bindable, with n elements. */
static bool leaf_ok(const kiln_vk *vk, const kiln_tensor *t, kiln_dtype dt, int64_t n) {
    return t->dtype == dt && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n && kiln__vk_fits(vk, t);
}

/* p, grad, then n_states (codes, absmax) pairs, maps, hyper of >= n_hyper. */
static bool step8_supports(const kiln_vk *vk, const kiln_tensor *t, int n_states, int n_hyper) {
    int ns = 4 + 2 * n_states;
    if (t->nsrc != ns) return false;
    int64_t n = kiln_tensor_numel(t->src[0]), nb = (n + 255) / 256;
    const kiln_tensor *h = t->src[ns - 1];
    bool ok = n <= INT32_MAX - 255 && leaf_ok(vk, t->src[0], KILN_F32, n) && leaf_ok(vk, t->src[1], KILN_F32, n) &&
              leaf_ok(vk, t->src[ns - 2], KILN_F32, 512) && leaf_ok(vk, h, KILN_F32, kiln_tensor_numel(h)) &&
              kiln_tensor_numel(h) >= n_hyper;
    for (int k = 0; k < n_states && ok; k++)
        ok = leaf_ok(vk, t->src[2 + 2 * k], KILN_I32, (n + 3) / 4) && leaf_ok(vk, t->src[3 + 2 * k], KILN_F32, nb);
    return ok;
}

static bool adam8_supports(const kiln_vk *vk, const kiln_tensor *t) { return step8_supports(vk, t, 2, 5 + KILN__HYPER_STEP_SLOTS); }
static bool lion8_supports(const kiln_vk *vk, const kiln_tensor *t) { return step8_supports(vk, t, 1, 4); }
static bool sgd8_supports(const kiln_vk *vk, const kiln_tensor *t) { return step8_supports(vk, t, 1, 4); }

/* shader over t's sources, one workgroup per block of 256 (the shader's
 * block index is its global id / 256). */
static kiln_status dispatch8(kiln_vk *vk, kiln_tensor *t, const char *shader, const void *push, uint32_t push_size) {
    kiln_vk_dispatch dp = {.shader = shader, .n = t->nsrc, .push = push, .push_size = push_size};
    for (int k = 0; k < t->nsrc; k++) dp.bind[k] = t->src[k];
    kiln__vk_groups_1d(vk, (uint64_t)((kiln_tensor_numel(t->src[0]) + 255) / 256) * 256, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

static kiln_status adam8_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, mq0, ma0, vq0, va0, mp0, h0, decoupled;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            kiln__vk_base(vk, t->src[4]),
            kiln__vk_base(vk, t->src[5]),
            kiln__vk_base(vk, t->src[6]),
            kiln__vk_base(vk, t->src[7]),
            t->ip[1] != 0};
    return dispatch8(vk, t, "opt_adam8", &pc, sizeof pc);
}

static kiln_status lion8_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, mq0, ma0, mp0, h0;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            kiln__vk_base(vk, t->src[4]),
            kiln__vk_base(vk, t->src[5])};
    return dispatch8(vk, t, "opt_lion8", &pc, sizeof pc);
}

static kiln_status sgd8_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, bq0, ba0, mp0, h0, nesterov, first;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            kiln__vk_base(vk, t->src[4]),
            kiln__vk_base(vk, t->src[5]),
            t->ip[0] != 0,
            t->ip[2] == 0};
    return dispatch8(vk, t, "opt_sgd8", &pc, sizeof pc);
}

void kiln__vk_register_optim_8bit(kiln_vk_kernel *tab) {
    tab[KILN_OP_ADAM8_STEP] = (kiln_vk_kernel){adam8_supports, adam8_record};
    tab[KILN_OP_LION8_STEP] = (kiln_vk_kernel){lion8_supports, lion8_record};
    tab[KILN_OP_SGD8_STEP] = (kiln_vk_kernel){sgd8_supports, sgd8_record};
}
