/* vk_optim.c — in-place updates on the Vulkan backend: gradient
 * accumulation and the optimizers' step ops (see vk.h), f32 only. The step
 * kernels read the hyperparameters from the hyper leaf on the device (it
 * changes between steps; the step number is there too) and SGD's
 * first-step flag from the node's ip[2], which kiln_optim_step writes
 * before each compute; they give
 * the CPU kernels' bits (shaders/opt_exact.glsl). */
#include "vk.h"

/* f32, contiguous, bindable, with n elements. */
static bool f32_ok(const kiln_vk *vk, const kiln_tensor *t, int64_t n) {
    return t->dtype == KILN_F32 && kiln_tensor_is_contiguous(t) && kiln_tensor_numel(t) == n && kiln__vk_fits(vk, t);
}

/* src[0] (the gradient, whose storage the node is) += src[1]; f32, or f16
 * where the device has 16-bit storage */
static bool acc_grad_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    bool dt = g->dtype == d->dtype &&
              (g->dtype == KILN_F32 || ((g->dtype == KILN_F16 || g->dtype == KILN_BF16) && kiln__vk_caps(vk)->f16));
    return dt && kiln_tensor_is_contiguous(g) && kiln_tensor_is_contiguous(d) && kiln__vk_fits(vk, g) &&
           kiln__vk_fits(vk, d);
}

static kiln_status acc_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    int64_t n = kiln_tensor_numel(g);
    struct {
        uint32_t n, g0, d0;
    } pc = {(uint32_t)n, kiln__vk_base(vk, g), kiln__vk_base(vk, d)};
    kiln_vk_dispatch dp = {.shader = g->dtype == KILN_F16 ? "acc_grad_f16" : g->dtype == KILN_BF16 ? "acc_grad_bf16" : "acc_grad", .n = 2, .bind = {g, d}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* Every source but the hyper leaf (the last) is an f32 array shaped like
 * the parameter; the hyper leaf holds at least n_hyper f32. */
static bool step_ok(const kiln_vk *vk, const kiln_tensor *t, int n_hyper) {
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n > INT32_MAX) return false;
    for (int k = 0; k < t->nsrc - 1; k++)
        if (!f32_ok(vk, t->src[k], n)) return false;
    const kiln_tensor *h = t->src[t->nsrc - 1];
    return f32_ok(vk, h, kiln_tensor_numel(h)) && kiln_tensor_numel(h) >= n_hyper;
}

/* ---- SGD: src p, grad, [momentum buffer], hyper; ip[0]=nesterov ip[1]=has_momentum ip[2]=0 first, 1 after ---- */

static bool sgd_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return t->nsrc == (t->ip[1] ? 4 : 3) && step_ok(vk, t, 4);
}

static kiln_status sgd_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool mom = t->ip[1] != 0;
    const kiln_tensor *p = t->src[0], *g = t->src[1], *b = mom ? t->src[2] : NULL, *h = t->src[mom ? 3 : 2];
    int64_t n = kiln_tensor_numel(p);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, b0, h0, nesterov, first;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, p),
            kiln__vk_base(vk, g),
            b ? kiln__vk_base(vk, b) : 0,
            kiln__vk_base(vk, h),
            t->ip[0] != 0,
            t->ip[2] == 0};
    kiln_vk_dispatch dp = {.shader = mom ? "opt_sgd_mom" : "opt_sgd", .push = &pc, .push_size = sizeof pc};
    dp.n = mom ? 4 : 3;
    for (int k = 0; k < dp.n; k++) dp.bind[k] = t->src[k];
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* ---- Adam/AdamW: src p, grad, exp_avg, exp_avg_sq, [max_exp_avg_sq], hyper
 *      (5 values and the step number); ip[0]=amsgrad ip[1]=decoupled ---- */

static bool adam_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return t->nsrc == (t->ip[0] ? 6 : 5) && step_ok(vk, t, 5 + KILN__HYPER_STEP_SLOTS);
}

static kiln_status adam_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool ams = t->ip[0] != 0;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, m0, v0, vm0, h0, decoupled;
    } pc = {(uint32_t)n,
            kiln__vk_base(vk, t->src[0]),
            kiln__vk_base(vk, t->src[1]),
            kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3]),
            ams ? kiln__vk_base(vk, t->src[4]) : 0,
            kiln__vk_base(vk, t->src[t->nsrc - 1]),
            t->ip[1] != 0};
    kiln_vk_dispatch dp = {
        .shader = ams ? "opt_adam_ams" : "opt_adam", .n = t->nsrc, .push = &pc, .push_size = sizeof pc};
    for (int k = 0; k < t->nsrc; k++) dp.bind[k] = t->src[k];
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* ---- Lion: src p, grad, exp_avg, hyper; no ip ---- */

static bool lion_supports(const kiln_vk *vk, const kiln_tensor *t) { return t->nsrc == 4 && step_ok(vk, t, 4); }

static kiln_status lion_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t n = kiln_tensor_numel(t->src[0]);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, p0, g0, m0, h0;
    } pc = {(uint32_t)n, kiln__vk_base(vk, t->src[0]), kiln__vk_base(vk, t->src[1]), kiln__vk_base(vk, t->src[2]),
            kiln__vk_base(vk, t->src[3])};
    kiln_vk_dispatch dp = {.shader = "opt_lion", .n = 4, .push = &pc, .push_size = sizeof pc};
    for (int k = 0; k < 4; k++) dp.bind[k] = t->src[k];
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_optim(kiln_vk_kernel *tab) {
    tab[KILN_OP_ACC_GRAD] = (kiln_vk_kernel){acc_grad_supports, acc_grad_record};
    tab[KILN_OP_SGD_STEP] = (kiln_vk_kernel){sgd_supports, sgd_record};
    tab[KILN_OP_ADAM_STEP] = (kiln_vk_kernel){adam_supports, adam_record};
    tab[KILN_OP_LION_STEP] = (kiln_vk_kernel){lion_supports, lion_record};
}
