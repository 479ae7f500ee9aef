/* vk_elementwise.c — the element-wise kernels of the Vulkan backend (see
 * vk.h): CONTIGUOUS and CAST (f32, f16, bf16, i32), every unary op, the
 * binary ops with broadcasting, CMP, WHERE (f32 and f16; CMP also i32) and
 * DROPOUT (f32, the CPU's mask and values bit for bit).
 *
 * Sources may be any strided view: the host aligns each source's strides
 * to the contiguous output (0 on broadcast dims) and merges the dims every
 * source walks as one, as the CPU kernels do (backends/cpu/bcast.h), so
 * the shader turns a flat output index into each source's offset. f64 and
 * anything else stays on the CPU. */
#include "vk.h"

#include "../cpu/bcast.h"

#include <math.h>

/* The shaders' dtype codes (ew_half.glsl); -1: not handled here. */
static int dtype_code(kiln_dtype t) {
    switch (t) {
    case KILN_F32: return 0;
    case KILN_F16: return 1;
    case KILN_BF16: return 2;
    case KILN_I32: return 3;
    default: return -1;
    }
}

static bool is16(kiln_dtype t) { return t == KILN_F16 || t == KILN_BF16; }

/* Every operand bindable, 16-bit ones only with the device's f16 support,
 * and the output's element count a 32-bit index (empty outputs stay on
 * the CPU: nothing to dispatch). */
static bool operands_ok(const kiln_vk *vk, const kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t);
    if (n == 0 || n > (int64_t)UINT32_MAX || !kiln__vk_fits(vk, t)) return false;
    if (is16(t->dtype) && !kiln__vk_caps(vk)->f16) return false;
    for (int k = 0; k < t->nsrc; k++) {
        const kiln_tensor *s = t->src[k];
        if (!kiln__vk_fits(vk, s) || (is16(s->dtype) && !kiln__vk_caps(vk)->f16)) return false;
    }
    return true;
}

/* The walk of node's output over nsrc sources: coalesced shape and each
 * source's strides, as 32-bit push constants. */
typedef struct ew_walk {
    uint32_t nd;
    uint32_t shape[KILN_MAX_DIMS];
    uint32_t st[KILN_BCAST_MAX][KILN_MAX_DIMS];
} ew_walk;

static ew_walk walk_of(const kiln_tensor *t, int nsrc) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, nsrc, t->src);
    kiln_bcast_coalesce(&it);
    ew_walk w = {.nd = (uint32_t)it.nd};
    for (int d = 0; d < it.nd; d++) {
        w.shape[d] = (uint32_t)it.shape[d];
        for (int k = 0; k < nsrc; k++) w.st[k][d] = (uint32_t)it.st[k][d];
    }
    return w;
}

static kiln_status run(kiln_vk *vk, const char *shader, int n, const kiln_tensor *const *bind, const void *pc,
                       uint32_t pc_size, uint64_t invocations) {
    kiln_vk_dispatch d = {.shader = shader, .n = n, .push = pc, .push_size = pc_size};
    for (int k = 0; k < n; k++) d.bind[k] = bind[k];
    kiln__vk_groups_1d(vk, invocations, 256, d.groups);
    return kiln__vk_dispatch(vk, &d);
}

/* ---- CONTIGUOUS and CAST ---- */

static bool copy_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return dtype_code(t->dtype) >= 0 && dtype_code(t->src[0]->dtype) >= 0 && operands_ok(vk, t);
}

static kiln_status copy_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    ew_walk w = walk_of(t, 1);
    struct {
        uint32_t n, x0, y0, nd, sdt, ddt;
        uint32_t shape[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
    } pc = {(uint32_t)kiln_tensor_numel(t), kiln__vk_base(vk, x), kiln__vk_base(vk, t), w.nd,
            (uint32_t)dtype_code(x->dtype), (uint32_t)dtype_code(t->dtype), {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.st, w.st[0], sizeof pc.st);
    static const char *const shaders[2][2] = {{"ew_copy_32_32", "ew_copy_32_16"}, {"ew_copy_16_32", "ew_copy_16_16"}};
    const kiln_tensor *bind[2] = {x, t};
    return run(vk, shaders[is16(x->dtype)][is16(t->dtype)], 2, bind, &pc, sizeof pc, pc.n);
}

/* ---- unary ---- */

_Static_assert(KILN_OP_GELU_TANH_GRAD - KILN_OP_NEG == 19, "ew_unary.glsl numbers the unary ops NEG..GELU_TANH_GRAD 0..19");

static bool float_io(const kiln_tensor *t) { return t->dtype == KILN_F32 || t->dtype == KILN_F16; }

static bool unary_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return float_io(t) && t->src[0]->dtype == t->dtype && operands_ok(vk, t);
}

static kiln_status unary_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    ew_walk w = walk_of(t, 1);
    struct {
        uint32_t n, x0, y0, nd, op;
        float p;
        uint32_t shape[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
    } pc = {(uint32_t)kiln_tensor_numel(t), kiln__vk_base(vk, x), kiln__vk_base(vk, t), w.nd,
            (uint32_t)(t->op - KILN_OP_NEG), (float)t->fp[0], {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.st, w.st[0], sizeof pc.st);
    const kiln_tensor *bind[2] = {x, t};
    return run(vk, t->dtype == KILN_F16 ? "ew_unary_f16" : "ew_unary", 2, bind, &pc, sizeof pc, pc.n);
}

/* ---- binary and CMP ---- */

static bool binary_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool types = a->dtype == b->dtype && a->dtype == t->dtype &&
                 (float_io(t) || (t->dtype == KILN_I32 && t->op == KILN_OP_CMP));
    return types && (t->op != KILN_OP_CMP || (t->ip[0] >= KILN_CMP_EQ && t->ip[0] <= KILN_CMP_GE)) &&
           operands_ok(vk, t);
}

static kiln_status binary_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    ew_walk w = walk_of(t, 2);
    struct {
        uint32_t n, a0, b0, y0, nd, op, cmp;
        uint32_t shape[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    } pc = {(uint32_t)kiln_tensor_numel(t), kiln__vk_base(vk, a), kiln__vk_base(vk, b), kiln__vk_base(vk, t), w.nd,
            (uint32_t)(t->op - KILN_OP_ADD), t->op == KILN_OP_CMP ? (uint32_t)t->ip[0] : 0, {0}, {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.sa, w.st[0], sizeof pc.sa);
    memcpy(pc.sb, w.st[1], sizeof pc.sb);
    const char *shader = t->dtype == KILN_I32 ? "ew_binary_i32" : t->dtype == KILN_F16 ? "ew_binary_f16" : "ew_binary";
    const kiln_tensor *bind[3] = {a, b, t};
    return run(vk, shader, 3, bind, &pc, sizeof pc, pc.n);
}

/* ---- WHERE ---- */

static bool where_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    return float_io(t) && a->dtype == t->dtype && b->dtype == t->dtype &&
           (c->dtype == KILN_F32 || c->dtype == KILN_I32) && operands_ok(vk, t);
}

static kiln_status where_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    ew_walk w = walk_of(t, 3);
    struct {
        uint32_t n, c0, a0, b0, y0, nd, c_i32;
        uint32_t shape[KILN_MAX_DIMS], sc[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    } pc = {(uint32_t)kiln_tensor_numel(t), kiln__vk_base(vk, c), kiln__vk_base(vk, a), kiln__vk_base(vk, b),
            kiln__vk_base(vk, t), w.nd, c->dtype == KILN_I32, {0}, {0}, {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.sc, w.st[0], sizeof pc.sc);
    memcpy(pc.sa, w.st[1], sizeof pc.sa);
    memcpy(pc.sb, w.st[2], sizeof pc.sb);
    _Static_assert(sizeof pc <= KILN_VK_MAX_PUSH, "where's push constants");
    const kiln_tensor *bind[4] = {c, a, b, t};
    return run(vk, t->dtype == KILN_F16 ? "ew_where_f16" : "ew_where", 4, bind, &pc, sizeof pc, pc.n);
}

/* ---- DROPOUT ---- */

static bool dropout_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    double p = t->fp[0];
    return t->dtype == KILN_F32 && x->dtype == KILN_F32 && kiln_tensor_is_contiguous(x) && p >= 0.0 && p < 1.0 &&
           operands_ok(vk, t);
}

static kiln_status dropout_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[0];
    double p = t->fp[0];
    /* kept when uniform01 = (h >> 11) 2^-53 >= p, i.e. (h >> 11) >= ceil(p 2^53) */
    double pt = p * 9007199254740992.0;
    uint64_t thr = (uint64_t)pt;
    if ((double)thr < pt) thr++;
    uint64_t hs = kiln__hash64((uint64_t)t->ip[0] ^ (ex->run * 0x9e3779b97f4a7c15ull));
    /* 1/(1-p) = mk 2^ek with mk a 53-bit integer */
    int e;
    double f = frexp(1.0 / (1.0 - p), &e);
    uint64_t mk = (uint64_t)ldexp(f, 53);
    struct {
        uint32_t n, x0, y0, keep_all;
        uint32_t hseed[2], t[2], mk[2];
        int32_t ek;
    } pc = {(uint32_t)kiln_tensor_numel(t),
            kiln__vk_base(vk, x),
            kiln__vk_base(vk, t),
            !ex->training,
            {(uint32_t)hs, (uint32_t)(hs >> 32)},
            {(uint32_t)thr, (uint32_t)(thr >> 32)},
            {(uint32_t)mk, (uint32_t)(mk >> 32)},
            e - 53};
    const kiln_tensor *bind[2] = {x, t};
    return run(vk, "ew_dropout", 2, bind, &pc, sizeof pc, pc.n);
}

void kiln__vk_register_elementwise(kiln_vk_kernel *tab) {
    tab[KILN_OP_CONTIGUOUS] = tab[KILN_OP_CAST] = (kiln_vk_kernel){copy_supports, copy_record};
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = (kiln_vk_kernel){unary_supports, unary_record};
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = (kiln_vk_kernel){binary_supports, binary_record};
    tab[KILN_OP_WHERE] = (kiln_vk_kernel){where_supports, where_record};
    tab[KILN_OP_DROPOUT] = (kiln_vk_kernel){dropout_supports, dropout_record};
}
