/* vk_reduce.c — the reduce kernels of the Vulkan backend (see vk.h): SUM,
 * MAX, MIN and ARGMAX of f32 or f16 over one axis (ip[0], any strides) or,
 * for SUM/MAX/MIN, over all elements (ip[0] = -1). f16 computes in f32 and
 * rounds the result once, as the CPU's widened path does.
 *
 * Two shaders share red_common.glsl: red_rows gives each output a
 * workgroup of 256 invocations and a shared-memory tree (long reductions,
 * few outputs), red_cols gives each output one invocation that walks its
 * elements in order (many outputs, e.g. a reduction over a leading axis,
 * where neighbouring invocations read neighbouring elements). */
#include "vk.h"

enum { RED_SUM, RED_MAX, RED_MIN, RED_ARGMAX };

static bool reduce_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    bool f16 = x->dtype == KILN_F16;
    if ((x->dtype != KILN_F32 && !f16) || t->dtype != (t->op == KILN_OP_ARGMAX ? KILN_I32 : x->dtype)) return false;
    if (f16 && !kiln__vk_caps(vk)->f16) return false;
    if (axis < -1 || axis >= x->ndim || (axis < 0 && t->op == KILN_OP_ARGMAX)) return false;
    int64_t numel = kiln_tensor_numel(x);
    if (numel == 0 || numel > (int64_t)UINT32_MAX) return false;
    return kiln__vk_fits(vk, x) && kiln__vk_fits(vk, t);
}

typedef struct red_push {
    uint32_t n, nout, x0, y0, op, nk, nr;
    uint32_t kshape[KILN_MAX_DIMS], kst[KILN_MAX_DIMS], rshape[KILN_MAX_DIMS], rst[KILN_MAX_DIMS];
} red_push;
_Static_assert(sizeof(red_push) <= KILN_VK_MAX_PUSH, "red_common.glsl's push constants");

/* Append dim (size, stride) to a row-major list, dropping size 1 and
 * merging with the previous dim when the two walk as one. */
static void push_dim(uint32_t *nd, uint32_t *shape, uint32_t *st, int64_t size, int64_t stride) {
    if (size == 1) return;
    if (*nd && st[*nd - 1] == (uint64_t)stride * (uint64_t)size) {
        shape[*nd - 1] *= (uint32_t)size;
        st[*nd - 1] = (uint32_t)stride;
        return;
    }
    shape[*nd] = (uint32_t)size;
    st[(*nd)++] = (uint32_t)stride;
}

static kiln_status reduce_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    red_push pc = {.x0 = kiln__vk_base(vk, x), .y0 = kiln__vk_base(vk, t)};
    switch (t->op) {
    case KILN_OP_SUM: pc.op = RED_SUM; break;
    case KILN_OP_MAX: pc.op = RED_MAX; break;
    case KILN_OP_MIN: pc.op = RED_MIN; break;
    default: pc.op = RED_ARGMAX; break;
    }
    for (int d = 0; d < x->ndim; d++) {
        if (axis < 0) push_dim(&pc.nr, pc.rshape, pc.rst, x->shape[d], x->stride[d]);
        else if (d != axis) push_dim(&pc.nk, pc.kshape, pc.kst, x->shape[d], x->stride[d]);
    }
    if (axis >= 0) pc.nr = 1, pc.rshape[0] = (uint32_t)x->shape[axis], pc.rst[0] = (uint32_t)x->stride[axis];
    if (pc.nr == 0) pc.nr = 1, pc.rshape[0] = 1, pc.rst[0] = 0; /* a whole reduction of one element */
    pc.n = (uint32_t)(axis < 0 ? kiln_tensor_numel(x) : x->shape[axis]);
    pc.nout = (uint32_t)kiln_tensor_numel(t);
    /* many outputs reducing along a strided axis, or short reductions: one
     * invocation each; otherwise a workgroup each */
    bool per_invocation = pc.nout > 1 && (pc.n <= 32 || (pc.nout >= 1024 && pc.nr == 1 && pc.rst[0] != 1));
    static const char *const shaders[2][3] = {{"red_rows", "red_rows_f16", "red_rows_f16i"},
                                              {"red_cols", "red_cols_f16", "red_cols_f16i"}};
    int variant = x->dtype != KILN_F16 ? 0 : t->dtype == KILN_F16 ? 1 : 2;
    kiln_vk_dispatch d = {.shader = shaders[per_invocation][variant], .n = 2, .bind = {x, t}, .push = &pc,
                          .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, per_invocation ? pc.nout : (uint64_t)pc.nout * 256, 256, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

void kiln__vk_register_reduce(kiln_vk_kernel *tab) {
    tab[KILN_OP_SUM] = tab[KILN_OP_MAX] = tab[KILN_OP_MIN] = tab[KILN_OP_ARGMAX] =
        (kiln_vk_kernel){reduce_supports, reduce_record};
}
