/* vk_reduce.c — the reduce kernels of the Vulkan backend (see vk.h): SUM,
 * MAX, MIN and ARGMAX of f32 or f16 over one axis (ip[0], any strides) or,
 * for SUM/MAX/MIN, over all elements (ip[0] = -1). f16 computes in f32 and
 * rounds the result once, as the CPU's widened path does.
 *
 * f32 takes kernels built once per op (red_fast.glsl; llvmpipe pays for
 * every side of a branch): red_row when the reduced axis has a short
 * stride (contiguous rows, or a whole reduction whose elements coalesce
 * into one dim), a few lanes per output with vec4 loads where aligned;
 * red_col when neighbouring outputs are neighbouring elements (a sum over
 * a leading axis), one invocation per output or four, walking in order.
 * Long reductions with few outputs split the walk: partials go to scratch
 * and red_fin merges them in order. Everything else (f16, whole
 * reductions of views that do not coalesce) takes the general kernels of
 * red_common.glsl: red_rows gives each output a workgroup of 256
 * invocations and a shared-memory tree, red_cols one invocation that walks
 * its elements in order. */
#include "vk.h"

#include <stdio.h>

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

/* ---- f32: red_row / red_col (+ red_fin) ---- */

typedef struct fast_push {
    uint32_t n, chunk, S, nout, x0, y0, rs, lgl, part, nk, ksl, pad;
    uint32_t kshape[KILN_MAX_DIMS], kmg[KILN_MAX_DIMS], kst[KILN_MAX_DIMS];
} fast_push;
_Static_assert(sizeof(fast_push) <= KILN_VK_MAX_PUSH, "red_fast_io.glsl's push constants");

/* floor(i / d) = (2i * m) >> (32 + l) for i < 2^31 (ew_udiv in ew_fast.glsl). */
static void magic(uint32_t d, uint32_t *m, uint32_t *l) {
    uint32_t k = 0;
    while (((uint64_t)1 << k) < d) k++;
    *l = k;
    *m = (uint32_t)(((uint64_t)1 << (31 + k)) / d + 1);
}

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* Splits of n elements for `units` walkers so that about `want` run at
 * once, each walk at least `least` long (a multiple of `align`). */
static void split(uint32_t n, uint32_t units, uint32_t want, uint32_t least, uint32_t align, uint32_t *S,
                  uint32_t *chunk) {
    uint32_t s = units >= want ? 1 : ceil_div(want, units);
    if (s > n / least) s = n / least ? n / least : 1;
    uint32_t c = (ceil_div(n, s) + align - 1) / align * align;
    *chunk = c;
    *S = ceil_div(n, c);
}

/* red_<kind>_<op><sfx>: sfx "" (f32), "_v4" (f32 as vec4), "_h" (f16) */
static const char *fast_name(char *buf, size_t size, const char *kind, kiln_op op, const char *sfx) {
    const char *o = op == KILN_OP_SUM ? "sum" : op == KILN_OP_MAX ? "max" : op == KILN_OP_MIN ? "min" : "amax";
    snprintf(buf, size, "red_%s_%s%s", kind, o, sfx);
    return buf;
}

/* Lanes to share a walk of `want` steps or more: a power of two. */
static uint32_t lanes(const kiln_vk *vk, uint32_t want) {
    uint32_t most = kiln__vk_caps(vk)->subgroup_size >= 16 ? 32 : 2, L = 1;
    while (2 * L <= most && 2 * L <= want) L *= 2;
    return L;
}

/* f32 or f16 node t: red_row or red_col; false when the layout is not theirs. */
static bool fast_record(kiln_vk *vk, kiln_tensor *t, kiln_status *st) {
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    fast_push pc = {.x0 = kiln__vk_base(vk, x), .y0 = kiln__vk_base(vk, t)};
    uint32_t nr = 0, rshape[KILN_MAX_DIMS], rst[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (axis < 0 || d == axis) push_dim(&nr, rshape, rst, x->shape[d], x->stride[d]);
        else push_dim(&pc.nk, pc.kshape, pc.kst, x->shape[d], x->stride[d]);
    }
    if (nr > 1) return false; /* a whole reduction that does not coalesce */
    pc.n = nr ? rshape[0] : 1;
    pc.rs = nr ? rst[0] : 0;
    pc.nout = (uint32_t)kiln_tensor_numel(t);
    for (uint32_t d = 0; d < pc.nk; d++) {
        uint32_t l;
        magic(pc.kshape[d], &pc.kmg[d], &l);
        pc.ksl |= l << (5 * d);
    }
    /* vec4 loads: f32 starting at a multiple of 4 (the kept dims but a
     * column kernel's innermost, and each walk) */
    bool f16 = x->dtype == KILN_F16, kst4 = !f16 && pc.x0 % 4 == 0;
    for (uint32_t d = 0; d + 1 < pc.nk; d++) kst4 = kst4 && pc.kst[d] % 4 == 0;
    bool col = pc.rs > 1 && pc.nk > 0 && pc.kst[pc.nk - 1] == 1;
    bool v4;
    uint32_t units, L = 1;
    if (col) {
        /* four outputs as one vec4: the innermost kept dim contiguous */
        v4 = kst4 && pc.rs % 4 == 0 && pc.kshape[pc.nk - 1] % 4 == 0;
        units = v4 ? pc.nout / 4 : pc.nout;
        split(pc.n, units, 4096, 64, 1, &pc.S, &pc.chunk);
    } else {
        v4 = pc.rs == 1 && pc.n % 4 == 0 && kst4 && (pc.nk == 0 || pc.kst[pc.nk - 1] % 4 == 0);
        /* enough walks in flight first, then lanes per walk: a few on a
         * CPU (llvmpipe: barriers are dear, a wide subgroup a guess at a
         * GPU), up to a subgroup's worth elsewhere */
        split(pc.n, pc.nout, 2048, 1024, 4, &pc.S, &pc.chunk);
        uint32_t steps = v4 ? pc.chunk / 4 : pc.chunk;
        L = lanes(vk, steps / 8);
        units = pc.nout * pc.S * L;
        while ((1u << pc.lgl) < L) pc.lgl++;
    }
    if ((uint64_t)pc.nout * pc.S * L >= (uint64_t)1 << 31) return false; /* ew_udiv's limit */
    kiln_tensor z;
    if (pc.S > 1 && (*st = kiln__vk_scratch(vk, 3 * (int64_t)pc.S * pc.nout, KILN_F32, &z))) return true;
    pc.part = pc.S > 1;
    char name[32];
    const char *sfx = f16 ? "_h" : v4 ? "_v4" : "";
    kiln_vk_dispatch d = {.shader = fast_name(name, sizeof name, col ? "col" : "row", t->op, sfx), .n = 3,
                          .bind = {x, t, pc.part ? &z : t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, col ? (uint64_t)units * pc.S : units, 256, d.groups);
    if ((*st = kiln__vk_dispatch(vk, &d)) || !pc.part) return true;
    struct { uint32_t nout, S, y0, lgl; } fin = {pc.nout, pc.S, pc.y0, 0};
    uint32_t FL = lanes(vk, pc.S / 4);
    while ((1u << fin.lgl) < FL) fin.lgl++;
    char fname[32];
    sfx = f16 && t->op != KILN_OP_ARGMAX ? "_h" : ""; /* argmax writes i32 whatever x is */
    kiln_vk_dispatch f = {.shader = fast_name(fname, sizeof fname, "fin", t->op, sfx), .n = 2, .bind = {&z, t},
                          .push = &fin, .push_size = sizeof fin};
    kiln__vk_groups_1d(vk, (uint64_t)pc.nout * FL, 256, f.groups);
    *st = kiln__vk_dispatch(vk, &f);
    return true;
}

static kiln_status reduce_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    kiln_status st = KILN_OK;
    if (fast_record(vk, t, &st)) return st;
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
