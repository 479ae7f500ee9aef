/* vk_optim.c — in-place updates on the Vulkan backend: gradient
 * accumulation and the optimizers' step ops (see vk.h). */
#include "vk.h"

/* src[0] (the gradient, whose storage the node is) += src[1] */
static bool acc_grad_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    return g->dtype == KILN_F32 && d->dtype == KILN_F32 && kiln_tensor_is_contiguous(g) &&
           kiln_tensor_is_contiguous(d) && kiln__vk_fits(vk, g) && kiln__vk_fits(vk, d);
}

static kiln_status acc_grad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    int64_t n = kiln_tensor_numel(g);
    struct {
        uint32_t n, g0, d0;
    } pc = {(uint32_t)n, kiln__vk_base(vk, g), kiln__vk_base(vk, d)};
    kiln_vk_dispatch dp = {.shader = "acc_grad", .n = 2, .bind = {g, d}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_optim(kiln_vk_kernel *tab) {
    tab[KILN_OP_ACC_GRAD] = (kiln_vk_kernel){acc_grad_supports, acc_grad_record};
}
