/* vk_reduce.c — the reduce kernels of the Vulkan backend (see vk.h): SUM,
 * MAX, MIN and ARGMAX of f32, f16 or bf16 over one axis (ip[0], any strides) or,
 * for SUM/MAX/MIN, over all elements (ip[0] = -1). f16 and bf16 compute in f32 and
 * rounds the result once, as the CPU's widened path does.
 *
 * Kernels are built once per op (shaders/red_fast.glsl: llvmpipe pays for
 * every side of a branch). red_row takes reductions along a short-stride
 * axis (contiguous rows: sums over features, whole reductions), a few
 * lanes per output with vec4 loads where aligned; red_col takes those
 * whose neighbouring outputs are neighbouring elements (a sum over a
 * leading axis), one invocation per output or per four, walking in order.
 * Long walks with few outputs are split: partials go to scratch and
 * red_fin merges them. A whole reduction whose elements do not coalesce
 * into one dim reduces the innermost dim of each row to partials, which
 * carry their flat indices (the tie rule), and red_fin merges them all. */
#include "vk.h"

#include <stdio.h>

static bool reduce_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    bool h16 = x->dtype == KILN_F16 || x->dtype == KILN_BF16;
    if ((x->dtype != KILN_F32 && !h16) || t->dtype != (t->op == KILN_OP_ARGMAX ? KILN_I32 : x->dtype)) return false;
    if (h16 && !kiln__vk_caps(vk)->f16) return false;
    if (axis < -1 || axis >= x->ndim || (axis < 0 && t->op == KILN_OP_ARGMAX)) return false;
    int64_t numel = kiln_tensor_numel(x);
    /* flat indices below RED_EMPTY; output indices below ew_udiv's 2^31 */
    if (numel == 0 || numel >= (int64_t)UINT32_MAX || kiln_tensor_numel(t) >= (int64_t)1 << 31) return false;
    return kiln__vk_fits(vk, x) && kiln__vk_fits(vk, t);
}

typedef struct red_push {
    uint32_t n, chunk, S, nout, x0, y0, rs, lgl, part, nk, ksl, iflat;
    uint32_t kshape[KILN_MAX_DIMS], kmg[KILN_MAX_DIMS], kst[KILN_MAX_DIMS];
} red_push;
_Static_assert(sizeof(red_push) <= KILN_VK_MAX_PUSH, "red_fast_io.glsl's push constants");

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

/* floor(i / d) = (2i * m) >> (32 + l) for i < 2^31 (ew_udiv in ew_fast.glsl). */
static void magic(uint32_t d, uint32_t *m, uint32_t *l) {
    uint32_t k = 0;
    while (((uint64_t)1 << k) < d) k++;
    *l = k;
    *m = (uint32_t)(((uint64_t)1 << (31 + k)) / d + 1);
}

static uint32_t ceil_div(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

/* Splits of n elements for `units` walks so that about `want` walks run
 * at once, each at least `least` long (chunks a multiple of `align`). */
static void split(uint32_t n, uint32_t units, uint32_t want, uint32_t least, uint32_t align, uint32_t *S,
                  uint32_t *chunk) {
    uint32_t s = units >= want ? 1 : ceil_div(want, units);
    if (s > n / least) s = n / least ? n / least : 1;
    *chunk = (ceil_div(n, s) + align - 1) / align * align;
    *S = ceil_div(n, *chunk);
}

/* Lanes to share a walk of `want` steps or more, a power of two: 2 at
 * most on a CPU device (llvmpipe: barriers are dear; a subgroup narrower
 * than 16 is the guess), up to 32 elsewhere. */
static uint32_t lanes(const kiln_vk *vk, uint32_t want) {
    uint32_t most = kiln__vk_caps(vk)->subgroup_size >= 16 ? 32 : 2, L = 1;
    while (2 * L <= most && 2 * L <= want) L *= 2;
    return L;
}

static uint32_t log2u(uint32_t L) {
    uint32_t l = 0;
    while ((1u << l) < L) l++;
    return l;
}

/* red_<kind>_<op><sfx>: sfx "" (f32), "_v4" (f32 as vec4), "_h" (f16), "_b" (bf16) */
static const char *kernel_name(char *buf, size_t size, const char *kind, kiln_op op, const char *sfx) {
    const char *o = op == KILN_OP_SUM ? "sum" : op == KILN_OP_MAX ? "max" : op == KILN_OP_MIN ? "min" : "amax";
    snprintf(buf, size, "red_%s_%s%s", kind, o, sfx);
    return buf;
}

static kiln_status reduce_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    red_push pc = {.x0 = kiln__vk_base(vk, x), .y0 = kiln__vk_base(vk, t)};
    uint32_t nr = 0, rshape[KILN_MAX_DIMS], rst[KILN_MAX_DIMS];
    for (int d = 0; d < x->ndim; d++) {
        if (axis < 0 || d == axis) push_dim(&nr, rshape, rst, x->shape[d], x->stride[d]);
        else push_dim(&pc.nk, pc.kshape, pc.kst, x->shape[d], x->stride[d]);
    }
    if (nr > 1) { /* a whole reduction in rows: the outer dims kept, partials with flat indices */
        for (uint32_t d = 0; d + 1 < nr; d++) pc.kshape[d] = rshape[d], pc.kst[d] = rst[d];
        pc.nk = nr - 1;
        pc.iflat = 1;
        rshape[0] = rshape[nr - 1], rst[0] = rst[nr - 1];
    }
    pc.n = nr ? rshape[0] : 1;
    pc.rs = nr ? rst[0] : 0;
    pc.nout = (uint32_t)(kiln_tensor_numel(x) / pc.n);
    for (uint32_t d = 0; d < pc.nk; d++) {
        uint32_t l;
        magic(pc.kshape[d], &pc.kmg[d], &l);
        pc.ksl |= l << (5 * d);
    }
    /* vec4 loads: f32, every walk starting at a multiple of 4 (the kept
     * dims but a column kernel's innermost, then below) */
    bool h16 = x->dtype == KILN_F16 || x->dtype == KILN_BF16, v4 = !h16 && pc.x0 % 4 == 0;
    const char *s16 = x->dtype == KILN_BF16 ? "_b" : "_h";
    for (uint32_t d = 0; d + 1 < pc.nk; d++) v4 = v4 && pc.kst[d] % 4 == 0;
    bool col = pc.rs > 1 && pc.nk > 0 && pc.kst[pc.nk - 1] == 1;
    uint64_t invocations;
    if (col) { /* four outputs as one vec4: the innermost kept dim contiguous */
        v4 = v4 && pc.rs % 4 == 0 && pc.kshape[pc.nk - 1] % 4 == 0;
        uint32_t units = v4 ? pc.nout / 4 : pc.nout;
        split(pc.n, units, 4096, 64, 1, &pc.S, &pc.chunk);
        invocations = (uint64_t)units * pc.S;
    } else { /* enough walks in flight first, then lanes per walk */
        v4 = v4 && pc.rs == 1 && pc.n % 4 == 0 && (pc.nk == 0 || pc.kst[pc.nk - 1] % 4 == 0);
        split(pc.n, pc.nout, 2048, 1024, 4, &pc.S, &pc.chunk);
        uint32_t L = lanes(vk, (v4 ? pc.chunk / 4 : pc.chunk) / 8);
        while (L > 1 && (uint64_t)pc.nout * pc.S * L >= (uint64_t)1 << 31) L /= 2;
        pc.lgl = log2u(L);
        invocations = (uint64_t)pc.nout * pc.S * L;
    }
    pc.part = pc.S > 1 || pc.iflat;
    kiln_tensor z;
    kiln_status st;
    if (pc.part && (st = kiln__vk_scratch(vk, 3 * (int64_t)pc.S * pc.nout, KILN_F32, &z))) return st;
    char name[32];
    const char *sfx = h16 ? s16 : v4 ? "_v4" : "";
    kiln_vk_dispatch d = {.shader = kernel_name(name, sizeof name, col ? "col" : "row", t->op, sfx), .n = 3,
                          .bind = {x, t, pc.part ? &z : t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, invocations, 256, d.groups);
    if ((st = kiln__vk_dispatch(vk, &d)) || !pc.part) return st;
    /* red_fin: each output's S partials, or all rows' for a whole reduction */
    struct { uint32_t nout, S, y0, lgl; } fin = {pc.iflat ? 1 : pc.nout, pc.iflat ? pc.S * pc.nout : pc.S, pc.y0, 0};
    uint32_t L = lanes(vk, fin.S / 4);
    fin.lgl = log2u(L);
    sfx = h16 && t->op != KILN_OP_ARGMAX ? s16 : ""; /* argmax writes i32 whatever x is */
    kiln_vk_dispatch f = {.shader = kernel_name(name, sizeof name, "fin", t->op, sfx), .n = 2, .bind = {&z, t},
                          .push = &fin, .push_size = sizeof fin};
    kiln__vk_groups_1d(vk, (uint64_t)fin.nout * L, 256, f.groups);
    return kiln__vk_dispatch(vk, &f);
}

void kiln__vk_register_reduce(kiln_vk_kernel *tab) {
    tab[KILN_OP_SUM] = tab[KILN_OP_MAX] = tab[KILN_OP_MIN] = tab[KILN_OP_ARGMAX] =
        (kiln_vk_kernel){reduce_supports, reduce_record};
}
