/* vk_elementwise.c — the element-wise kernels of the Vulkan backend (see
 * vk.h): CONTIGUOUS and CAST (f32, f16, bf16, i32), every unary op, the
 * binary ops with broadcasting, CMP, WHERE (f32 and f16; CMP also i32) and
 * DROPOUT (f32, the CPU's mask and values bit for bit).
 *
 * Sources may be any strided view: the host aligns each source's strides
 * to the contiguous output (0 on broadcast dims) and merges the dims every
 * source walks as one, as the CPU kernels do (core/bcast.h), so
 * the shader turns a flat output index into each source's offset. f64 and
 * anything else stays on the CPU.
 *
 * Speed (measured on llvmpipe, which runs both sides of every branch and
 * has no vector integer division): each kernel is built for one op or a
 * few cheap ones (a switch over all of them costs the sum), dividing by
 * the walk's dims is a multiplication by a magic number (kiln__vk_magic), and
 * the common layouts get kernels of their own, picked here: contiguous
 * sources, scalars, rows (a bias) and columns ([rows, 1]) move four
 * elements at a time as vectors, with the n % 4 left over run by the
 * strided kernel; CONTIGUOUS of a transpose moves 4x4 blocks. Every
 * kernel computes each element with the same code, so the choice never
 * changes a bit. */
#include "vk.h"

#include "bcast.h"

#include <math.h>
#include <stdio.h>

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
 * and the output's element count below 2^31 (empty outputs stay on
 * the CPU: nothing to dispatch). */
static bool operands_ok(const kiln_vk *vk, const kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t);
    if (n == 0 || n >= ((int64_t)1 << 31) || !kiln__vk_fits(vk, t)) return false; /* ew_udiv's range */
    if (is16(t->dtype) && !kiln__vk_caps(vk)->f16) return false;
    for (int k = 0; k < t->nsrc; k++) {
        const kiln_tensor *s = t->src[k];
        if (!kiln__vk_fits(vk, s) || (is16(s->dtype) && !kiln__vk_caps(vk)->f16)) return false;
    }
    return true;
}

/* The walk of node's output over nsrc sources: coalesced shape and each
 * source's strides, as 32-bit push constants, with each dim's magic
 * divisor (ew_fast.glsl) for the fast kernels. */
typedef struct ew_walk {
    uint32_t nd, sl; /* sl: dim d's shift in bits 5d..5d+4 */
    uint32_t shape[KILN_MAX_DIMS], mg[KILN_MAX_DIMS];
    uint32_t st[KILN_BCAST_MAX][KILN_MAX_DIMS];
} ew_walk;

/* floor(i / d) = (2 i m) >> (32 + l) for all i < 2^31, with l = ceil(log2 d)
 * and m = floor(2^(31 + l) / d) + 1 < 2^32 (Granlund and Montgomery). */
void kiln__vk_magic(uint32_t d, uint32_t *m, uint32_t *l) {
    uint32_t k = 0;
    while (((uint64_t)1 << k) < d) k++;
    *l = k;
    *m = (uint32_t)(((uint64_t)1 << (31 + k)) / d + 1);
}

static ew_walk walk_of(const kiln_tensor *t, int nsrc) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, nsrc, t->src);
    kiln_bcast_coalesce(&it);
    ew_walk w = {.nd = (uint32_t)it.nd};
    for (int d = 0; d < it.nd; d++) {
        uint32_t l;
        w.shape[d] = (uint32_t)it.shape[d];
        kiln__vk_magic(w.shape[d], &w.mg[d], &l);
        w.sl |= l << (5 * d);
        for (int k = 0; k < nsrc; k++) w.st[k][d] = (uint32_t)it.st[k][d];
    }
    return w;
}

/* How source k reads along walk w: each of the output's elements in turn
 * (CONTIG), one element for all (SCALAR), one row for every row (ROW: a
 * bias), one element for each row (COL: a [rows, 1] operand), or anything
 * else (STRIDED). */
typedef enum { SRC_STRIDED, SRC_CONTIG, SRC_SCALAR, SRC_ROW, SRC_COL } src_kind;

static src_kind src_kind_of(const ew_walk *w, int k) {
    const uint32_t *st = w->st[k];
    bool zero = true;
    for (uint32_t d = 0; d < w->nd; d++) zero = zero && st[d] == 0;
    if (zero) return SRC_SCALAR;
    bool contig = true; /* row-major strides of the walk's shape */
    for (uint32_t d = w->nd, e = 1; d-- > 0; e *= w->shape[d]) contig = contig && st[d] == e;
    if (contig) return SRC_CONTIG;
    if (w->nd == 2 && st[0] == 0 && st[1] == 1) return SRC_ROW;
    if (w->nd == 2 && st[0] == 1 && st[1] == 0) return SRC_COL;
    return SRC_STRIDED;
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

/* Are all of x's strides but dim `skip`'s multiples of 4? */
static bool strides_mult4(const ew_walk *w, uint32_t skip) {
    for (uint32_t d = 0; d < w->nd; d++)
        if (d != skip && w->st[0][d] % 4) return false;
    return true;
}

/* CONTIGUOUS of a transpose of the last two dims of 32-bit elements, in
 * 4x4 blocks (ew_move_tile.glsl): the walk over the blocks, column blocks
 * outside row blocks, with x's and y's strides. */
static kiln_status move_tile(kiln_vk *vk, const kiln_tensor *t, const ew_walk *w, uint32_t x0, uint32_t y0) {
    uint32_t nd = w->nd, rows = w->shape[nd - 2], cols = w->shape[nd - 1];
    struct {
        uint32_t n, x0, y0, nd, sl, xs, ys;
        uint32_t shape[KILN_MAX_DIMS], mg[KILN_MAX_DIMS], sx[KILN_MAX_DIMS], sy[KILN_MAX_DIMS];
    } pc = {(uint32_t)(kiln_tensor_numel(t) / 16), x0, y0, nd, 0, w->st[0][nd - 1], cols, {0}, {0}, {0}, {0}};
    _Static_assert(sizeof pc <= KILN_VK_MAX_PUSH, "move_tile's push constants");
    uint32_t ys = rows * cols;
    for (uint32_t d = nd - 2; d-- > 0; ys *= w->shape[d]) pc.shape[d] = w->shape[d], pc.sx[d] = w->st[0][d], pc.sy[d] = ys;
    pc.shape[nd - 2] = cols / 4, pc.sx[nd - 2] = 4 * w->st[0][nd - 1], pc.sy[nd - 2] = 4;
    pc.shape[nd - 1] = rows / 4, pc.sx[nd - 1] = 4, pc.sy[nd - 1] = 4 * cols;
    for (uint32_t d = 0; d < nd; d++) {
        uint32_t l;
        kiln__vk_magic(pc.shape[d], &pc.mg[d], &l);
        pc.sl |= l << (5 * d);
    }
    const kiln_tensor *bind[2] = {t->src[0], t};
    return run(vk, "ew_move_32_tile", 2, bind, &pc, sizeof pc, pc.n);
}

static kiln_status copy_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    ew_walk w = walk_of(t, 1);
    struct {
        uint32_t n, x0, y0, nd, sl, i0;
        uint32_t shape[KILN_MAX_DIMS], mg[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
    } pc = {(uint32_t)kiln_tensor_numel(t), kiln__vk_base(vk, x), kiln__vk_base(vk, t), w.nd, w.sl, 0, {0}, {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.mg, w.mg, sizeof pc.mg);
    memcpy(pc.st, w.st[0], sizeof pc.st);
    const kiln_tensor *bind[2] = {x, t};
    uint32_t nd = w.nd;
    bool move = x->dtype == t->dtype;
    if (move && !is16(x->dtype) && nd > 0 && pc.y0 % 4 == 0) { /* 32-bit moves by quads or blocks */
        bool x4 = pc.x0 % 4 == 0;
        if (nd >= 2 && w.st[0][nd - 2] == 1 && w.shape[nd - 2] % 4 == 0 && w.shape[nd - 1] % 4 == 0 && x4 &&
            strides_mult4(&w, nd - 2))
            return move_tile(vk, t, &w, pc.x0, pc.y0);
        if (w.shape[nd - 1] % 4 == 0) { /* whole quads of the innermost dim */
            bool vload = w.st[0][nd - 1] == 1 && x4 && strides_mult4(&w, nd - 1);
            pc.n /= 4, pc.y0 /= 4;
            return run(vk, vload ? "ew_move_32_qv" : "ew_move_32_q", 2, bind, &pc, sizeof pc, pc.n);
        }
    }
    static const char *const names[] = {"f32", "f16", "bf16", "i32"}; /* by dtype_code */
    char shader[32];
    if (move) snprintf(shader, sizeof shader, "ew_move_%s", is16(x->dtype) ? "16" : "32");
    else snprintf(shader, sizeof shader, "ew_cast_%s_%s", names[dtype_code(x->dtype)], names[dtype_code(t->dtype)]);
    if (!move && src_kind_of(&w, 0) == SRC_CONTIG && pc.x0 % 4 == 0 && pc.y0 % 4 == 0 && pc.n >= 4) {
        /* whole quads as vectors, the n % 4 left over by the element kernel */
        char v4[40];
        snprintf(v4, sizeof v4, "%s_v4", shader);
        uint32_t n = pc.n;
        pc.n = n / 4, pc.x0 /= 4, pc.y0 /= 4;
        kiln_status s = run(vk, v4, 2, bind, &pc, sizeof pc, pc.n);
        if (s || n % 4 == 0) return s;
        pc.n = n % 4, pc.x0 *= 4, pc.y0 *= 4, pc.i0 = n - n % 4;
    }
    return run(vk, shader, 2, bind, &pc, sizeof pc, pc.n);
}

/* ---- unary ---- */

_Static_assert(KILN_OP_GELU_TANH_GRAD - KILN_OP_NEG == 19, "ew_unary_ops.glsl numbers the unary ops NEG..GELU_TANH_GRAD 0..19");

/* The kernel family of each unary op: the ops of a family share one
 * shader (ew_u_<family>_{v4,s,h}.comp, EW_OPS their bit mask), cheap ones
 * together, costly ones alone, since llvmpipe pays for every case of a
 * kernel's switch. */
static const char *unary_family(kiln_op op) {
    switch (op) {
    case KILN_OP_SQRT: case KILN_OP_RSQRT: return "sqrt";
    case KILN_OP_EXP: return "exp";
    case KILN_OP_LOG: return "log";
    case KILN_OP_POW: return "pow";
    case KILN_OP_TANH: return "tanh";
    case KILN_OP_SIGMOID: return "sigmoid";
    case KILN_OP_GELU: case KILN_OP_GELU_GRAD: return "gelu";
    case KILN_OP_GELU_TANH: return "gelu_tanh";
    case KILN_OP_SILU: return "silu"; /* with gelu_tanh, NaN's sign changed */
    case KILN_OP_SOFTPLUS: return "softplus";
    case KILN_OP_GELU_TANH_GRAD: return "gtgrad";
    default: return "cheap"; /* NEG SCALE ADD_SCALAR ABS SIGN RELU LEAKY_RELU */
    }
}

static bool float_io(const kiln_tensor *t) { return t->dtype == KILN_F32 || is16(t->dtype); }

/* The kernels' name suffix for a float dtype: f32's, "h" (f16) or "b" (bf16). */
static const char *sfx16(kiln_dtype t, const char *f32) { return t == KILN_F16 ? "h" : t == KILN_BF16 ? "b" : f32; }

static bool unary_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return float_io(t) && t->src[0]->dtype == t->dtype && operands_ok(vk, t);
}

/* The strided kernel over output elements i0 .. i0 + n - 1 of walk w. */
static kiln_status unary_strided(kiln_vk *vk, const kiln_tensor *t, const ew_walk *w, uint32_t i0, uint32_t n) {
    const kiln_tensor *x = t->src[0];
    struct {
        uint32_t n, x0, y0, nd, i0, sl, op;
        float p;
        uint32_t shape[KILN_MAX_DIMS], mg[KILN_MAX_DIMS], st[KILN_MAX_DIMS];
    } pc = {n, kiln__vk_base(vk, x), kiln__vk_base(vk, t), w->nd, i0, w->sl,
            (uint32_t)(t->op - KILN_OP_NEG), (float)t->fp[0], {0}, {0}, {0}};
    memcpy(pc.shape, w->shape, sizeof pc.shape);
    memcpy(pc.mg, w->mg, sizeof pc.mg);
    memcpy(pc.st, w->st[0], sizeof pc.st);
    char shader[32];
    snprintf(shader, sizeof shader, "ew_u_%s_%s", unary_family(t->op), sfx16(t->dtype, "s"));
    const kiln_tensor *bind[2] = {x, t};
    return run(vk, shader, 2, bind, &pc, sizeof pc, n);
}

static kiln_status unary_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    uint32_t n = (uint32_t)kiln_tensor_numel(t), x0 = kiln__vk_base(vk, x), y0 = kiln__vk_base(vk, t);
    ew_walk w = walk_of(t, 1);
    if (src_kind_of(&w, 0) != SRC_CONTIG || x0 % 4 || y0 % 4 || n < 4) return unary_strided(vk, t, &w, 0, n);
    /* whole quads as vectors, the n % 4 left over by the strided kernel */
    struct {
        uint32_t nq, x0, y0, op;
        float p;
    } pc = {n / 4, x0 / 4, y0 / 4, (uint32_t)(t->op - KILN_OP_NEG), (float)t->fp[0]};
    char shader[32];
    snprintf(shader, sizeof shader, "ew_u_%s_v4%s", unary_family(t->op), sfx16(t->dtype, ""));
    const kiln_tensor *bind[2] = {x, t};
    kiln_status s = run(vk, shader, 2, bind, &pc, sizeof pc, pc.nq);
    return s || n % 4 == 0 ? s : unary_strided(vk, t, &w, n - n % 4, n % 4);
}

/* ---- binary and CMP ---- */

static bool binary_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool types = a->dtype == b->dtype && a->dtype == t->dtype &&
                 (float_io(t) || (t->dtype == KILN_I32 && t->op == KILN_OP_CMP));
    return types && (t->op != KILN_OP_CMP || (t->ip[0] >= KILN_CMP_EQ && t->ip[0] <= KILN_CMP_GE)) &&
           operands_ok(vk, t);
}

static uint32_t binary_opc(const kiln_tensor *t) {
    return (uint32_t)(t->op - KILN_OP_ADD) | (t->op == KILN_OP_CMP ? (uint32_t)t->ip[0] << 8 : 0);
}

/* The strided kernel over output elements i0 .. i0 + n - 1 of walk w. */
static kiln_status binary_strided(kiln_vk *vk, const kiln_tensor *t, const ew_walk *w, uint32_t i0, uint32_t n) {
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    struct {
        uint32_t n, a0, b0, y0, nd, i0, sl, opc;
        uint32_t shape[KILN_MAX_DIMS], mg[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    } pc = {n, kiln__vk_base(vk, a), kiln__vk_base(vk, b), kiln__vk_base(vk, t), w->nd, i0, w->sl, binary_opc(t),
            {0}, {0}, {0}, {0}};
    _Static_assert(sizeof pc <= KILN_VK_MAX_PUSH, "binary's push constants");
    memcpy(pc.shape, w->shape, sizeof pc.shape);
    memcpy(pc.mg, w->mg, sizeof pc.mg);
    memcpy(pc.sa, w->st[0], sizeof pc.sa);
    memcpy(pc.sb, w->st[1], sizeof pc.sb);
    char shader[32] = "ew_b_cmp_i";
    if (t->dtype != KILN_I32)
        snprintf(shader, sizeof shader, "ew_b_%s_%s", t->op == KILN_OP_DIV ? "div" : "arith", sfx16(t->dtype, "s"));
    const kiln_tensor *bind[3] = {a, b, t};
    return run(vk, shader, 3, bind, &pc, sizeof pc, n);
}

/* A source of the quad kernel: its first quad (element when splat), the
 * period of its quads with their magic divisor, and whether it is splat;
 * false if it is none. Rows (for ROW and COL) must be whole quads. */
static bool quad_source(const ew_walk *w, int k, uint32_t base, uint32_t nq, uint32_t v[4], bool *splat) {
    src_kind kind = src_kind_of(w, k);
    uint32_t row_quads = w->nd == 2 && w->shape[1] % 4 == 0 ? w->shape[1] / 4 : 0;
    uint32_t period = kind == SRC_CONTIG || kind == SRC_SCALAR ? nq : kind == SRC_ROW || kind == SRC_COL ? row_quads : 0;
    *splat = kind == SRC_SCALAR || kind == SRC_COL;
    if (!period || (!*splat && base % 4)) return false;
    v[0] = *splat ? base : base / 4;
    kiln__vk_magic(period, &v[1], &v[2]);
    v[3] = period;
    return true;
}

static kiln_status binary_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    uint32_t n = (uint32_t)kiln_tensor_numel(t), y0 = kiln__vk_base(vk, t), nq = n / 4;
    ew_walk w = walk_of(t, 2);
    uint32_t qa[4], qb[4];
    bool sa, sb; /* splat */
    if (t->dtype == KILN_I32 || y0 % 4 || nq == 0 || !quad_source(&w, 0, kiln__vk_base(vk, a), nq, qa, &sa) ||
        !quad_source(&w, 1, kiln__vk_base(vk, b), nq, qb, &sb) || (sa && sb))
        return binary_strided(vk, t, &w, 0, n);
    /* whole quads as vectors (a row's length is a multiple of 4, so the
     * quads of the output and of the row line up), the n % 4 left over by
     * the strided kernel */
    struct {
        uint32_t nq, a0, b0, y0, opc;
        uint32_t ma, la, da, mb, lb, db;
    } pc = {nq, qa[0], qb[0], y0 / 4, binary_opc(t), qa[1], qa[2], qa[3], qb[1], qb[2], qb[3]};
    char shader[32];
    snprintf(shader, sizeof shader, "ew_b_%s_%s%s", t->op == KILN_OP_DIV ? "div" : "arith", sa ? "sq" : sb ? "qs" : "qq",
             sfx16(t->dtype, ""));
    const kiln_tensor *bind[3] = {a, b, t};
    kiln_status s = run(vk, shader, 3, bind, &pc, sizeof pc, nq);
    return s || n % 4 == 0 ? s : binary_strided(vk, t, &w, n - n % 4, n % 4);
}

/* ---- WHERE ---- */

static bool where_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    return float_io(t) && a->dtype == t->dtype && b->dtype == t->dtype &&
           (c->dtype == KILN_F32 || c->dtype == KILN_I32) && operands_ok(vk, t);
}

/* The magic-number kernel (walks of up to 4 dims) over output elements
 * i0 .. i0 + n - 1. */
static kiln_status where_magic(kiln_vk *vk, const kiln_tensor *t, const ew_walk *w, uint32_t i0, uint32_t n) {
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    const kiln_tensor *bind[4] = {c, a, b, t};
    struct {
        uint32_t n, c0, a0, b0, y0, nd, c_i32, sl, i0, mg[4];
        uint32_t shape[4], sc[4], sa[4], sb[4];
    } pc = {n, kiln__vk_base(vk, c), kiln__vk_base(vk, a), kiln__vk_base(vk, b), kiln__vk_base(vk, t), w->nd,
            c->dtype == KILN_I32, w->sl, i0, {0}, {0}, {0}, {0}, {0}};
    _Static_assert(sizeof pc <= KILN_VK_MAX_PUSH, "where's push constants");
    memcpy(pc.mg, w->mg, sizeof pc.mg);
    memcpy(pc.shape, w->shape, sizeof pc.shape);
    memcpy(pc.sc, w->st[0], sizeof pc.sc);
    memcpy(pc.sa, w->st[1], sizeof pc.sa);
    memcpy(pc.sb, w->st[2], sizeof pc.sb);
    char shader[32];
    snprintf(shader, sizeof shader, "ew_where_m%s", sfx16(t->dtype, ""));
    return run(vk, shader, 4, bind, &pc, sizeof pc, n);
}

static kiln_status where_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    const kiln_tensor *bind[4] = {c, a, b, t};
    ew_walk w = walk_of(t, 3);
    uint32_t n = (uint32_t)kiln_tensor_numel(t), y0 = kiln__vk_base(vk, t), nq = n / 4;
    uint32_t qc[4], qa[4], qb[4];
    bool sc, sa, sb; /* splat */
    if (y0 % 4 == 0 && nq > 0 && quad_source(&w, 0, kiln__vk_base(vk, c), nq, qc, &sc) && !sc &&
        quad_source(&w, 1, kiln__vk_base(vk, a), nq, qa, &sa) && quad_source(&w, 2, kiln__vk_base(vk, b), nq, qb, &sb) &&
        !(sa && sb)) {
        /* whole quads as vectors, the n % 4 left over by the element kernel */
        struct {
            uint32_t nq, c0, a0, b0, y0, c_i32;
            uint32_t mc, lc, dc, ma, la, da, mb, lb, db;
        } pc = {nq, qc[0], qa[0], qb[0], y0 / 4, c->dtype == KILN_I32, qc[1], qc[2], qc[3], qa[1], qa[2], qa[3], qb[1], qb[2], qb[3]};
        char shader[32];
        snprintf(shader, sizeof shader, "ew_where_%s%s", sa ? "sq" : sb ? "qs" : "qq", sfx16(t->dtype, ""));
        kiln_status s = run(vk, shader, 4, bind, &pc, sizeof pc, nq);
        return s || n % 4 == 0 ? s : where_magic(vk, t, &w, n - n % 4, n % 4);
    }
    if (w.nd <= 4) return where_magic(vk, t, &w, 0, n);
    struct {
        uint32_t n, c0, a0, b0, y0, nd, c_i32;
        uint32_t shape[KILN_MAX_DIMS], sc[KILN_MAX_DIMS], sa[KILN_MAX_DIMS], sb[KILN_MAX_DIMS];
    } pc = {n, kiln__vk_base(vk, c), kiln__vk_base(vk, a), kiln__vk_base(vk, b), y0, w.nd, c->dtype == KILN_I32,
            {0}, {0}, {0}, {0}};
    memcpy(pc.shape, w.shape, sizeof pc.shape);
    memcpy(pc.sc, w.st[0], sizeof pc.sc);
    memcpy(pc.sa, w.st[1], sizeof pc.sa);
    memcpy(pc.sb, w.st[2], sizeof pc.sb);
    _Static_assert(sizeof pc <= KILN_VK_MAX_PUSH, "where's push constants");
    return run(vk, t->dtype == KILN_F16 ? "ew_where_f16" : t->dtype == KILN_BF16 ? "ew_where_bf16" : "ew_where", 4, bind, &pc,
               sizeof pc, n);
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
    uint64_t seed = (uint64_t)t->ip[0];
    kiln_tensor run_word;
    kiln_status s = ex->training ? kiln__vk_run_word(vk, &run_word) : KILN_OK;
    if (s) return s;
    /* 1/(1-p) = mk 2^ek with mk a 53-bit integer */
    int e;
    double f = frexp(1.0 / (1.0 - p), &e);
    uint64_t mk = (uint64_t)ldexp(f, 53);
    struct {
        uint32_t n, x0, y0, keep_all;
        uint32_t seed[2], t[2], mk[2];
        int32_t ek;
    } pc = {(uint32_t)kiln_tensor_numel(t),
            kiln__vk_base(vk, x),
            kiln__vk_base(vk, t),
            !ex->training,
            {(uint32_t)seed, (uint32_t)(seed >> 32)},
            {(uint32_t)thr, (uint32_t)(thr >> 32)},
            {(uint32_t)mk, (uint32_t)(mk >> 32)},
            e - 53};
    const kiln_tensor *bind[3] = {x, t, ex->training ? &run_word : x}; /* eval mode reads no run */
    return run(vk, "ew_dropout", 3, bind, &pc, sizeof pc, pc.n);
}

void kiln__vk_register_elementwise(kiln_vk_kernel *tab) {
    tab[KILN_OP_CONTIGUOUS] = tab[KILN_OP_CAST] = (kiln_vk_kernel){copy_supports, copy_record};
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = (kiln_vk_kernel){unary_supports, unary_record};
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = (kiln_vk_kernel){binary_supports, binary_record};
    tab[KILN_OP_WHERE] = (kiln_vk_kernel){where_supports, where_record};
    tab[KILN_OP_DROPOUT] = (kiln_vk_kernel){dropout_supports, dropout_record};
}
