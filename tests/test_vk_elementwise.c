/* test_vk_elementwise.c — the Vulkan backend's element-wise and reduce
 * kernels against the CPU backend on the same inputs: every unary op,
 * binary ops and where with broadcasts and strided views, casts and
 * copies, dropout (bit for bit), reductions (NaN and tie rules; each
 * layout path of vk_reduce.c), and
 * gradients through kiln_graph_backward; then each fast path of
 * vk_elementwise.c (vector kernels for contiguous, scalar, row and column
 * sources with sizes not a multiple of 4 and unaligned starts, 4x4
 * transposes, per-pair casts), including bit equality of the vector and
 * strided unary kernels. Every node must run on the device
 * (nodes_fallback == 0) without validation messages. */
#include "kt_device.h"
#include "internal.h" /* kiln__node_new: ops without a public constructor (sign, gelu_grad, ...) */

#include <string.h>

typedef kiln_tensor *(*vk_build)(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg);

typedef struct vk_in {
    kiln_dtype dt;
    int nd;
    int64_t shape[KILN_MAX_DIMS];
    double lo, hi;       /* uniform range (i32: integers in [lo, hi)) */
    const double *vals;  /* fixed values, repeated, instead */
    int nvals;
    bool grad;
} vk_in;

#define IN(dt_, lo_, hi_, nd_, ...) ((vk_in){.dt = (dt_), .nd = (nd_), .shape = {__VA_ARGS__}, .lo = (lo_), .hi = (hi_)})

typedef struct vk_case {
    const char *name;
    int nin;
    vk_in in[3];
    vk_build build;
    const void *arg;
    double atol, rtol; /* both 0: exact (NaN matches NaN, zeros' signs match) */
    bool backward;     /* also compare the inputs' gradients of sum(y * R) */
    int computes;      /* run the graph this many times (dropout's run counter); 0 means 1 */
    bool eval;         /* graph in eval mode */
} vk_case;

typedef struct vk_result {
    double *y, *g[3];
    int64_t n, ng[3];
    kiln_graph_stats st;
} vk_result;


static uint64_t lcg(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 11;
}

static kiln_status fill(kiln_tensor *t, const vk_in *in, uint64_t seed) {
    int64_t n = kiln_tensor_numel(t);
    double *v = malloc((size_t)n * sizeof *v);
    uint64_t s = seed;
    for (int64_t i = 0; i < n; i++) {
        double u = (double)lcg(&s) / 9007199254740992.0;
        if (in->vals) v[i] = in->vals[i % in->nvals];
        else if (in->dt == KILN_I32) v[i] = floor(in->lo + u * (in->hi - in->lo));
        else v[i] = in->lo + u * (in->hi - in->lo);
    }
    kiln_status st;
    if (in->dt == KILN_I32) {
        int32_t *iv = malloc((size_t)n * sizeof *iv);
        for (int64_t i = 0; i < n; i++) iv[i] = (int32_t)v[i];
        st = kiln_tensor_set_i32(t, iv, n);
        free(iv);
    } else st = kiln_tensor_set_f64(t, v, n);
    free(v);
    return st;
}

static double *read_all(kiln_tensor *t, int64_t *n) {
    *n = kiln_tensor_numel(t);
    double *v = malloc((size_t)*n * sizeof *v + 1);
    if (kiln_tensor_get_f64(t, v, *n) != KILN_OK) {
        free(v);
        return NULL;
    }
    return v;
}

/* Build and run the case on backend b (NULL: CPU). */
static bool run_side(const vk_case *c, kiln_backend *b, vk_result *r) {
    memset(r, 0, sizeof *r);
    kiln_ctx *ctx = kiln_ctx_new();
    bool ok = false;
    if (b && kiln_ctx_set_backend(ctx, b) != KILN_OK) goto done;
    kiln_tensor *in[3] = {0};
    for (int k = 0; k < c->nin; k++) {
        in[k] = kiln_tensor_new(ctx, c->in[k].dt, c->in[k].nd, c->in[k].shape);
        if (!in[k] || fill(in[k], &c->in[k], 1000 + 17 * (uint64_t)k) != KILN_OK) goto done;
        if (c->backward && c->in[k].grad && kiln_tensor_set_requires_grad(in[k], true) != KILN_OK) goto done;
    }
    kiln_tensor *y = c->build(ctx, in, c->arg);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!y || !g || kiln_graph_add(g, y) != KILN_OK) goto done;
    if (c->backward) {
        kiln_tensor *w = kiln_tensor_new(ctx, y->dtype, y->ndim, y->shape);
        vk_in wi = {.dt = y->dtype, .lo = -1, .hi = 1};
        if (!w || fill(w, &wi, 99) != KILN_OK) goto done;
        kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, w));
        if (!loss || kiln_graph_add(g, loss) != KILN_OK || kiln_graph_backward(g, loss) != KILN_OK) goto done;
    }
    if (c->eval) kiln_graph_set_training(g, false);
    for (int i = 0; i < (c->computes ? c->computes : 1); i++)
        if (kiln_graph_compute(g) != KILN_OK) goto done;
    if (!(r->y = read_all(y, &r->n))) goto done;
    for (int k = 0; k < c->nin && c->backward; k++)
        if (c->in[k].grad && !(r->g[k] = read_all(kiln_tensor_grad(in[k]), &r->ng[k]))) goto done;
    r->st = kiln_graph_get_stats(g);
    ok = true;
done:
    if (!ok) kt_fail(__FILE__, __LINE__, "%s on %s: %s", c->name, b ? "vulkan" : "cpu", kiln_last_error());
    kiln_ctx_free(ctx);
    return ok;
}

static void free_result(vk_result *r) {
    free(r->y);
    for (int k = 0; k < 3; k++) free(r->g[k]);
}

/* Largest error of a (device) against b (CPU) in units of the tolerance;
 * exact when atol = rtol = 0. */
static double compare(const double *a, const double *b, int64_t n, double atol, double rtol, int64_t *worst) {
    double w = 0;
    *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e;
        if (a[i] != a[i] || b[i] != b[i]) e = (a[i] != a[i]) == (b[i] != b[i]) ? 0 : INFINITY;
        else if (isinf(a[i]) || isinf(b[i])) e = a[i] == b[i] ? 0 : INFINITY;
        else if (atol == 0 && rtol == 0) e = a[i] == b[i] && signbit(a[i]) == signbit(b[i]) ? 0 : INFINITY;
        else e = fabs(a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (e > w) w = e, *worst = i;
    }
    return w;
}

static void check_case(const vk_case *c) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    int64_t msgs0 = kiln_backend_validation_messages(vk);
    vk_result cpu, dev;
    if (!run_side(c, NULL, &cpu)) return;
    if (!run_side(c, vk, &dev)) {
        free_result(&cpu);
        return;
    }
    int64_t at;
    double e = compare(dev.y, cpu.y, cpu.n, c->atol, c->rtol, &at);
    KT_CHECK(dev.n == cpu.n && e <= 1, "%s: error %g at %lld: vulkan %.9g, cpu %.9g", c->name, e, (long long)at,
             dev.y[at], cpu.y[at]);
    for (int k = 0; k < c->nin; k++) {
        if (!cpu.g[k]) continue;
        double ga = c->atol ? c->atol : 1e-6, gr = c->rtol ? c->rtol : 1e-6;
        e = compare(dev.g[k], cpu.g[k], cpu.ng[k], ga, gr, &at);
        KT_CHECK(e <= 1, "%s: gradient %d error %g at %lld: vulkan %.9g, cpu %.9g", c->name, k, e, (long long)at,
                 dev.g[k][at], cpu.g[k][at]);
    }
    KT_CHECK(dev.st.nodes_fallback == 0, "%s: %lld nodes fell back to the CPU (KILN_BACKEND_DEBUG=1 names them)",
             c->name, (long long)dev.st.nodes_fallback);
    KT_CHECK(dev.st.nodes_on_backend > 0, "%s: nothing ran on the device", c->name);
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs0, "%s: %lld validation messages", c->name,
             (long long)(kiln_backend_validation_messages(vk) - msgs0));
    free_result(&cpu);
    free_result(&dev);
}

/* ---- views applied to input 0 before the op ---- */

typedef enum { V_NONE, V_TRANSPOSE, V_SLICE, V_BCAST, V_ROWS, V_TT } view_kind;

static kiln_tensor *view(kiln_ctx *ctx, kiln_tensor *x, view_kind v) {
    switch (v) {
    case V_TRANSPOSE: return kiln_transpose(ctx, x, 0, x->ndim - 1);
    case V_SLICE: return kiln_slice(ctx, x, x->ndim - 1, 1, x->shape[x->ndim - 1], 2);
    case V_BCAST: { /* [1, D] -> [5, D] */
        int64_t shape[2] = {5, x->shape[x->ndim - 1]};
        return kiln_broadcast_to(ctx, x, 2, shape);
    }
    /* rows 1..: contiguous, starting shape[1] elements in (not a multiple of 4 when shape[1] is odd) */
    case V_ROWS: return kiln_slice(ctx, x, 0, 1, x->shape[0], 1);
    case V_TT: /* x's values through strides {1, rows}: the strided kernels */
        return kiln_transpose(ctx, kiln_contiguous(ctx, kiln_transpose(ctx, x, 0, 1)), 0, 1);
    default: return x;
    }
}

/* ---- unary ---- */

typedef struct unary_arg {
    kiln_op op;
    double p;
    view_kind v;
} unary_arg;

static kiln_tensor *build_unary(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const unary_arg *a = arg;
    kiln_tensor *x = view(ctx, in[0], a->v);
    if (!x) return NULL;
    kiln_tensor *t = kiln__node_new(ctx, a->op, x->dtype, x->ndim, x->shape, 1, &x);
    if (t) t->fp[0] = a->p;
    return t;
}

static const struct {
    kiln_op op;
    double p, lo, hi;
} unary_ops[] = {
    {KILN_OP_NEG, 0, -5, 5},          {KILN_OP_SCALE, 0.37, -5, 5},      {KILN_OP_ADD_SCALAR, -1.25, -5, 5},
    {KILN_OP_EXP, 0, -60, 60},        {KILN_OP_LOG, 0, 1e-3, 1e3},        {KILN_OP_SQRT, 0, 0, 100},
    {KILN_OP_RSQRT, 0, 1e-3, 100},    {KILN_OP_ABS, 0, -5, 5},            {KILN_OP_SIGN, 0, -5, 5},
    {KILN_OP_POW, 2, -5, 5},          {KILN_OP_POW, 3, -5, 5},            {KILN_OP_POW, -2, 0.1, 5},
    {KILN_OP_POW, 2.5, 0, 10},        {KILN_OP_POW, 0.5, 0, 10},          {KILN_OP_POW, -1, 0.1, 5},
    {KILN_OP_TANH, 0, -8, 8},         {KILN_OP_SIGMOID, 0, -30, 30},      {KILN_OP_RELU, 0, -5, 5},
    {KILN_OP_LEAKY_RELU, 0.1, -5, 5}, {KILN_OP_GELU, 0, -8, 8},           {KILN_OP_GELU_TANH, 0, -8, 8},
    {KILN_OP_SILU, 0, -20, 20},       {KILN_OP_SOFTPLUS, 0, -30, 30},     {KILN_OP_GELU_GRAD, 0, -8, 8},
    {KILN_OP_GELU_TANH_GRAD, 0, -8, 8},
};

/* f32 transcendental ops: 1e-5 relative; the absolute floor covers the
 * results that cancel to near zero (gelu_grad, silu around their roots). */
KT_TEST(vk_unary_f32) {
    static const view_kind views[] = {V_NONE, V_TRANSPOSE, V_SLICE, V_BCAST};
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++)
        for (size_t v = 0; v < 4; v++) {
            unary_arg a = {unary_ops[i].op, unary_ops[i].p, views[v]};
            char name[96];
            snprintf(name, sizeof name, "%s(p=%g) view %d", kiln__op_table[a.op].name, a.p, (int)views[v]);
            vk_case c = {name, 1, {IN(KILN_F32, unary_ops[i].lo, unary_ops[i].hi, 2, views[v] == V_BCAST ? 1 : 37, 29)},
                         build_unary, &a, 1e-6, 1e-5, false, 0, false};
            check_case(&c);
        }
}

/* Special values through every unary op: NaN, infinities, signed zeros,
 * subnormal-adjacent and huge magnitudes. */
KT_TEST(vk_unary_special) {
    static const double vals[] = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 1e30, -1e30,
                                  88.5, -88.5, 100, -100, 0.5, -0.5, 3.0, -3.0, 15, -15, 1.17549435e-38};
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++) {
        unary_arg a = {unary_ops[i].op, unary_ops[i].p, V_NONE};
        vk_case c = {kiln__op_table[a.op].name, 1, {IN(KILN_F32, 0, 0, 1, 22)}, build_unary, &a, 1e-30, 1e-5, false, 0, false};
        c.in[0].vals = vals, c.in[0].nvals = 22;
        check_case(&c);
    }
}

KT_TEST(vk_unary_f16) {
    static const kiln_op ops[] = {KILN_OP_EXP, KILN_OP_GELU, KILN_OP_SILU, KILN_OP_SCALE, KILN_OP_RELU, KILN_OP_TANH};
    for (size_t i = 0; i < sizeof ops / sizeof *ops; i++) {
        unary_arg a = {ops[i], 0.3, V_TRANSPOSE};
        vk_case c = {kiln__op_table[ops[i]].name, 1, {IN(KILN_F16, -4, 4, 2, 19, 23)}, build_unary, &a, 1e-3, 1e-3, false, 0, false};
        check_case(&c);
    }
}

/* ---- binary, cmp, where ---- */

typedef struct binary_arg {
    kiln_op op;
    int cmp;
    view_kind va, vb;
} binary_arg;

static kiln_tensor *build_binary(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const binary_arg *a = arg;
    kiln_tensor *x = view(ctx, in[0], a->va), *y = view(ctx, in[1], a->vb);
    switch (a->op) {
    case KILN_OP_ADD: return kiln_add(ctx, x, y);
    case KILN_OP_SUB: return kiln_sub(ctx, x, y);
    case KILN_OP_MUL: return kiln_mul(ctx, x, y);
    case KILN_OP_DIV: return kiln_div(ctx, x, y);
    default: return kiln_cmp(ctx, x, y, (kiln_cmp_op)a->cmp);
    }
}

KT_TEST(vk_binary) {
    static const struct {
        vk_in a, b;
        view_kind va;
    } shapes[] = {
        {IN(KILN_F32, -3, 3, 3, 4, 5, 6), IN(KILN_F32, 0.5, 3, 1, 6), V_NONE},       /* row broadcast */
        {IN(KILN_F32, -3, 3, 3, 4, 1, 6), IN(KILN_F32, 0.5, 3, 2, 5, 1), V_NONE},    /* both stretch */
        {IN(KILN_F32, -3, 3, 2, 33, 20), IN(KILN_F32, 0.5, 3, 2, 20, 33), V_TRANSPOSE}, /* strided a */
        {IN(KILN_F32, -3, 3, 2, 7, 9), IN(KILN_F32, 0.5, 3, 1, 1), V_SLICE},          /* scalar b */
        {IN(KILN_F32, -3, 3, 6, 2, 3, 1, 2, 3, 2), IN(KILN_F32, 0.5, 3, 6, 2, 1, 2, 1, 3, 1), V_NONE}, /* 6 dims */
    };
    static const kiln_op ops[] = {KILN_OP_ADD, KILN_OP_SUB, KILN_OP_MUL, KILN_OP_DIV};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t o = 0; o < 4 + 6; o++) {
            binary_arg a = {o < 4 ? ops[o] : KILN_OP_CMP, o < 4 ? 0 : (int)o - 4, shapes[s].va, V_NONE};
            char name[64];
            snprintf(name, sizeof name, "%s/%d shapes %zu", kiln__op_table[a.op].name, a.cmp, s);
            vk_case c = {name, 2, {shapes[s].a, shapes[s].b}, build_binary, &a, 0, 0, false, 0, false};
            check_case(&c); /* add/sub/mul/div round once, like the CPU: exact */
        }
}

KT_TEST(vk_binary_special_and_types) {
    static const double va[] = {0.0, -0.0, 1.0, NAN, INFINITY, -INFINITY, 2.0, 1e-30, 7.0, 3.0};
    static const double vb[] = {0.0, 0.0, NAN, 1.0, INFINITY, 2.0, 2.0, 1e30, 3.0, 7.0};
    for (int o = 0; o < 10; o++) {
        binary_arg a = {o < 4 ? KILN_OP_ADD + o : KILN_OP_CMP, o < 4 ? 0 : o - 4, V_NONE, V_NONE};
        vk_case c = {kiln__op_table[a.op].name, 2, {IN(KILN_F32, 0, 0, 1, 10), IN(KILN_F32, 0, 0, 1, 10)}, build_binary, &a, 0, 0, false, 0, false};
        c.in[0].vals = va, c.in[0].nvals = 10, c.in[1].vals = vb, c.in[1].nvals = 10;
        check_case(&c);
    }
    for (int cmp = 0; cmp < 6; cmp++) { /* i32 comparisons */
        binary_arg a = {KILN_OP_CMP, cmp, V_TRANSPOSE, V_NONE};
        vk_case c = {"cmp i32", 2, {IN(KILN_I32, -3, 3, 2, 9, 8), IN(KILN_I32, -3, 3, 1, 9)}, build_binary, &a, 0, 0, false, 0, false};
        check_case(&c);
    }
    for (int o = 0; o < 5; o++) { /* f16: computed in f32, rounded once */
        binary_arg a = {o < 4 ? KILN_OP_ADD + o : KILN_OP_CMP, KILN_CMP_LT, V_TRANSPOSE, V_NONE};
        vk_case c = {"f16 binary", 2, {IN(KILN_F16, -3, 3, 2, 9, 8), IN(KILN_F16, 0.5, 3, 2, 1, 9)}, build_binary, &a, 0, 0, false, 0, false};
        check_case(&c);
    }
}

static kiln_tensor *build_where(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_where(ctx, in[0], kiln_transpose(ctx, in[1], 0, 1), in[2]);
}

KT_TEST(vk_where) {
    static const double conds[] = {0.0, 1.0, -0.0, NAN, -2.0, 0.0};
    vk_case c = {"where f32 cond", 3, {IN(KILN_F32, 0, 0, 2, 6, 1), IN(KILN_F32, -2, 2, 2, 7, 6), IN(KILN_F32, -2, 2, 1, 7)},
                 build_where, NULL, 0, 0, false, 0, false};
    c.in[0].vals = conds, c.in[0].nvals = 6;
    check_case(&c);
    vk_case ci = {"where i32 cond", 3, {IN(KILN_I32, 0, 2, 2, 6, 7), IN(KILN_F32, -2, 2, 2, 7, 6), IN(KILN_F32, -2, 2, 2, 1, 7)},
                  build_where, NULL, 0, 0, false, 0, false};
    check_case(&ci);
    vk_case ch = {"where f16", 3, {IN(KILN_I32, 0, 2, 2, 6, 7), IN(KILN_F16, -2, 2, 2, 7, 6), IN(KILN_F16, -2, 2, 2, 1, 7)},
                  build_where, NULL, 0, 0, false, 0, false};
    check_case(&ch);
}

/* ---- copies and casts ---- */

typedef struct copy_arg {
    kiln_dtype to; /* the input's own dtype: a CONTIGUOUS copy */
    int perm;      /* 1: a permuted view, 2: a slice */
} copy_arg;

static kiln_tensor *build_copy(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const copy_arg *a = arg;
    static const int axes[3] = {2, 0, 1};
    kiln_tensor *x = a->perm == 1 ? kiln_permute(ctx, in[0], axes) : a->perm == 2 ? kiln_slice(ctx, in[0], 1, 1, 9, 3) : in[0];
    return a->to == x->dtype ? kiln_contiguous(ctx, x) : kiln_cast(ctx, x, a->to);
}

KT_TEST(vk_cast_contiguous) {
    static const double special[] = {0.5, 1.5, 2.5, -0.5, -1.5, 65504, 65520, 1e-7, -6e-8, 3e-5, NAN, INFINITY, -INFINITY,
                                     -0.0, 2147483520.0, 3e9, -3e9, 16777217, 123456789, 1.0009765625, 1.00048828125};
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_I32};
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            for (int perm = 0; perm < 3; perm++) {
                if (s == d && perm == 0) continue; /* no node: a contiguous tensor is its own copy */
                copy_arg a = {dts[d], perm};
                char name[64];
                snprintf(name, sizeof name, "%s -> %s view %d", kiln_dtype_name(dts[s]), kiln_dtype_name(dts[d]), perm);
                vk_case c = {name, 1, {IN(dts[s], -300, 300, 3, 4, 10, 6)}, build_copy, &a, 0, 0, false, 0, false};
                check_case(&c);
                if (dts[s] != KILN_I32) { /* ties, overflow, NaN, subnormal halves */
                    c.in[0].vals = special, c.in[0].nvals = 21;
                    check_case(&c);
                } else { /* large integers: rounding to f32/f16 */
                    c.in[0].lo = -2147483648.0, c.in[0].hi = 2147483647.0;
                    check_case(&c);
                }
            }
}

/* ---- dropout ---- */

static kiln_tensor *build_dropout(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    return kiln_dropout(ctx, in[0], *(const double *)arg, 1234);
}

KT_TEST(vk_dropout_bitwise) {
    static const double ps[] = {0.1, 0.5, 0.3, 0.9, 1.0 / 3};
    for (size_t i = 0; i < sizeof ps / sizeof *ps; i++)
        for (int computes = 1; computes <= 3; computes += 2) {
            vk_case c = {"dropout", 1, {IN(KILN_F32, -1e3, 1e3, 2, 50, 201)}, build_dropout, &ps[i], 0, 0, false, computes, false};
            check_case(&c);
        }
    double p = 0.25; /* eval mode: identity */
    vk_case e = {"dropout eval", 1, {IN(KILN_F32, -1, 1, 1, 1000)}, build_dropout, &p, 0, 0, false, 1, true};
    check_case(&e);
    /* extreme magnitudes: the double-rounded product near overflow and in the subnormals */
    static const double vals[] = {3.4e38, -3.0e38, 1e-38, 1.5e-39, -1e-44, 1.4e-45, 0.0, -0.0, NAN, INFINITY, 1.0, 0.7};
    vk_case x = {"dropout extremes", 1, {IN(KILN_F32, 0, 0, 1, 4096)}, build_dropout, &ps[4], 0, 0, false, 1, false};
    x.in[0].vals = vals, x.in[0].nvals = 12;
    check_case(&x);
}

/* ---- reductions ---- */

typedef struct red_arg {
    kiln_op op;
    int axis; /* -1: over all elements (sum/max/min_all) */
    bool keepdim;
    view_kind v;
} red_arg;

static kiln_tensor *build_reduce(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const red_arg *a = arg;
    kiln_tensor *x = view(ctx, in[0], a->v);
    if (a->axis < 0)
        return a->op == KILN_OP_SUM ? kiln_sum_all(ctx, x) : a->op == KILN_OP_MAX ? kiln_max_all(ctx, x) : kiln_min_all(ctx, x);
    switch (a->op) {
    case KILN_OP_SUM: return kiln_sum(ctx, x, a->axis, a->keepdim);
    case KILN_OP_MAX: return kiln_max(ctx, x, a->axis, a->keepdim);
    case KILN_OP_MIN: return kiln_min(ctx, x, a->axis, a->keepdim);
    default: return kiln_argmax(ctx, x, a->axis, a->keepdim);
    }
}

KT_TEST(vk_reduce) {
    static const kiln_op ops[] = {KILN_OP_SUM, KILN_OP_MAX, KILN_OP_MIN, KILN_OP_ARGMAX};
    static const struct {
        vk_in x;
        view_kind v;
    } shapes[] = {
        {IN(KILN_F32, -2, 2, 3, 7, 300, 5), V_NONE},
        {IN(KILN_F32, -2, 2, 3, 5, 2000, 3), V_TRANSPOSE},
        {IN(KILN_F32, -2, 2, 2, 1500, 40), V_NONE},
        {IN(KILN_F32, -2, 2, 2, 33, 1100), V_SLICE},
        {IN(KILN_F32, -2, 2, 3, 2, 3, 4), V_NONE},
        {IN(KILN_F32, -2, 2, 2, 4, 3000), V_NONE}, /* long rows */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int o = 0; o < 4; o++)
            for (int axis = -1; axis < shapes[s].x.nd; axis++) {
                if (axis < 0 && ops[o] == KILN_OP_ARGMAX) continue;
                red_arg a = {ops[o], axis, axis == 1, shapes[s].v};
                char name[64];
                snprintf(name, sizeof name, "%s axis %d shapes %zu", kiln__op_table[a.op].name, axis, s);
                vk_case c = {name, 1, {shapes[s].x}, build_reduce, &a, o == 0 ? 1e-6 : 0, o == 0 ? 1e-6 : 0, false, 0, false};
                check_case(&c);
            }
}

KT_TEST(vk_reduce_nan_ties) {
    /* ties (small integers) and NaNs: max/min return NaN, argmax the first NaN or first maximum */
    static const double vals[] = {1, 3, 3, 2, NAN, 3, 0, -1, 3, NAN, 2, 1, 0, 0, -0.0, 3, 3, 1};
    static const kiln_op ops[] = {KILN_OP_SUM, KILN_OP_MAX, KILN_OP_MIN, KILN_OP_ARGMAX};
    for (int o = 0; o < 4; o++)
        for (int axis = 0; axis < 2; axis++) {
            red_arg a = {ops[o], axis, false, V_NONE};
            vk_case c = {kiln__op_table[ops[o]].name, 1, {IN(KILN_F32, 0, 0, 2, 37, 600)}, build_reduce, &a, 0, 0, false, 0, false};
            c.in[0].vals = vals, c.in[0].nvals = 18; /* 600 and 37 are no multiples of 18: NaNs land irregularly */
            check_case(&c);
            static const double ints[] = {1, 4, 2, 4, 0, 3, 4, 1, 2, 0, 4};
            c.in[0].vals = ints, c.in[0].nvals = 11;
            check_case(&c);
        }
    static const double big[] = {1, 2, 3, 4, 5, 6, 7, NAN};
    red_arg all = {KILN_OP_MAX, -1, false, V_NONE};
    vk_case c = {"max_all nan", 1, {IN(KILN_F32, 0, 0, 1, 100000)}, build_reduce, &all, 0, 0, false, 0, false};
    c.in[0].vals = big, c.in[0].nvals = 8;
    check_case(&c);
}

/* Each path of vk_reduce.c's f32 kernels: rows with vec4 loads and lanes,
 * rows not a multiple of 4 or starting unaligned, long rows split into
 * partials, columns four at a time or one, split columns, whole
 * reductions; with random values, NaNs and ties, -inf/+inf runs (a max of
 * nothing but -inf is index 0; inf - inf sums to NaN). */
KT_TEST(vk_reduce_paths) {
    static const kiln_op ops[] = {KILN_OP_SUM, KILN_OP_MAX, KILN_OP_MIN, KILN_OP_ARGMAX};
    static const struct {
        vk_in x;
        int axis;
        view_kind v;
    } cases[] = {
        {IN(KILN_F32, -2, 2, 2, 64, 768), 1, V_NONE},     /* rows, vec4, lanes */
        {IN(KILN_F32, -2, 2, 2, 9, 770), 1, V_NONE},      /* rows, not a multiple of 4 */
        {IN(KILN_F32, -2, 2, 2, 33, 1100), 1, V_ROWS},    /* rows starting unaligned */
        {IN(KILN_F32, -2, 2, 2, 3, 20000), 1, V_NONE},    /* split rows, vec4 */
        {IN(KILN_F32, -2, 2, 2, 3, 20001), 1, V_NONE},    /* split rows */
        {IN(KILN_F32, -2, 2, 2, 3000, 8), 0, V_NONE},     /* split columns, vec4 */
        {IN(KILN_F32, -2, 2, 2, 3000, 7), 0, V_NONE},     /* split columns */
        {IN(KILN_F32, -2, 2, 3, 4, 50, 12), 1, V_NONE},   /* columns, two kept dims, vec4 */
        {IN(KILN_F32, -2, 2, 3, 4, 50, 6), 1, V_NONE},    /* columns, two kept dims */
        {IN(KILN_F32, -2, 2, 2, 300, 8), 0, V_TRANSPOSE}, /* rows through a transpose */
        {IN(KILN_F32, -2, 2, 2, 300, 8), 1, V_TRANSPOSE}, /* columns through a transpose */
        {IN(KILN_F32, -2, 2, 1, 100003), -1, V_NONE},     /* whole, split */
        {IN(KILN_F32, -2, 2, 2, 4096, 64), -1, V_NONE},   /* whole, split, vec4 */
        {IN(KILN_F32, -2, 2, 2, 40, 64), -1, V_TRANSPOSE}, /* whole, not one dim */
        {IN(KILN_F32, -2, 2, 2, 40, 64), -1, V_SLICE},    /* whole, stride 2 */
    };
    static const double nan_ties[] = {1, 3, 3, 2, NAN, 3, 0, -1, 3, NAN, 2, 1, 0, 0, -0.0, 3, 3, 1};
    static const double ties[] = {1, 4, 2, 4, 0, 3, 4, 1, 2, 0, 4, 0, 0}; /* no -0: the CPU's SIMD min/max pick either zero */
    static const double infs[] = {-INFINITY, -INFINITY, -INFINITY, INFINITY, -INFINITY, -INFINITY, -INFINITY};
    static const double *const vals[] = {NULL, nan_ties, ties, infs};
    static const int nvals[] = {0, 18, 13, 7};
    for (size_t s = 0; s < sizeof cases / sizeof *cases; s++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < 4; k++) {
                if (cases[s].axis < 0 && ops[o] == KILN_OP_ARGMAX) continue;
                red_arg a = {ops[o], cases[s].axis, false, cases[s].v};
                char name[80];
                snprintf(name, sizeof name, "%s case %zu values %d", kiln__op_table[a.op].name, s, k);
                bool exact = o != 0 || k > 0;
                vk_case c = {name, 1, {cases[s].x}, build_reduce, &a, exact ? 0 : 1e-6, exact ? 0 : 1e-6, false, 0, false};
                c.in[0].vals = vals[k], c.in[0].nvals = nvals[k];
                check_case(&c);
            }
    /* f16 (no vec4): rows, split rows, split columns, whole */
    static const struct {
        vk_in x;
        int axis;
    } halves[] = {
        {IN(KILN_F16, -2, 2, 2, 64, 300), 1},
        {IN(KILN_F16, -2, 2, 2, 3, 20001), 1},
        {IN(KILN_F16, -2, 2, 2, 3000, 8), 0},
        {IN(KILN_F16, -2, 2, 1, 100003), -1},
    };
    for (size_t s = 0; s < sizeof halves / sizeof *halves; s++)
        for (int o = 0; o < 4; o++)
            for (int k = 0; k < 2; k++) {
                if (halves[s].axis < 0 && ops[o] == KILN_OP_ARGMAX) continue;
                red_arg a = {ops[o], halves[s].axis, false, V_NONE};
                char name[80];
                snprintf(name, sizeof name, "f16 %s case %zu values %d", kiln__op_table[a.op].name, s, k);
                bool exact = o != 0 || k > 0;
                vk_case c = {name, 1, {halves[s].x}, build_reduce, &a, exact ? 0 : 1e-3, exact ? 0 : 1e-3, false, 0, false};
                c.in[0].vals = vals[k], c.in[0].nvals = nvals[k];
                check_case(&c);
            }
    /* a max of nothing but -inf (and a min of +inf): the first index */
    static const double ninf[] = {-INFINITY}, pinf[] = {INFINITY};
    for (int o = 1; o < 4; o++)
        for (int axis = 0; axis < 2; axis++) {
            red_arg a = {ops[o], axis, false, V_NONE};
            vk_case c = {kiln__op_table[a.op].name, 1, {IN(KILN_F32, 0, 0, 2, 3000, 8)}, build_reduce, &a, 0, 0, false, 0, false};
            c.in[0].vals = ops[o] == KILN_OP_MIN ? pinf : ninf, c.in[0].nvals = 1;
            check_case(&c);
            c.in[0].shape[0] = 8, c.in[0].shape[1] = 3000;
            check_case(&c);
        }
}

/* ---- gradients through kiln_graph_backward ---- */

static kiln_tensor *build_mlp_like(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg; /* gelu(x) / (1 + b) - max(x, axis 1) + silu(x) * mean */
    kiln_tensor *x = in[0], *b = in[1];
    kiln_tensor *h = kiln_div(ctx, kiln_gelu(ctx, x), kiln_add_scalar(ctx, kiln_abs(ctx, b), 1.0));
    h = kiln_sub(ctx, h, kiln_max(ctx, x, 1, true));
    h = kiln_add(ctx, h, kiln_mul(ctx, kiln_silu(ctx, x), kiln_mean(ctx, x, 0, true)));
    return kiln_add(ctx, kiln_gelu_tanh(ctx, h), kiln_sqrt(ctx, kiln_softplus(ctx, x)));
}

KT_TEST(vk_backward) {
    vk_case c = {"backward", 2, {IN(KILN_F32, -3, 3, 2, 24, 17), IN(KILN_F32, -2, 2, 1, 17)}, build_mlp_like, NULL,
                 1e-5, 1e-4, true, 0, false};
    c.in[0].grad = c.in[1].grad = true;
    check_case(&c);
}

static kiln_tensor *build_dropout_tanh(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_tanh(ctx, kiln_dropout(ctx, kiln_transpose(ctx, in[0], 0, 1), 0.3, 77));
}

KT_TEST(vk_backward_dropout) {
    vk_case c = {"dropout backward", 1, {IN(KILN_F32, -2, 2, 2, 30, 40)}, build_dropout_tanh, NULL, 1e-6, 1e-5, true, 2, false};
    c.in[0].grad = true;
    check_case(&c);
}

KT_TEST(vk_reduce_f16) {
    static const kiln_op ops[] = {KILN_OP_SUM, KILN_OP_MAX, KILN_OP_MIN, KILN_OP_ARGMAX};
    for (int o = 0; o < 4; o++)
        for (int axis = -1; axis < 2; axis++) {
            if (axis < 0 && ops[o] == KILN_OP_ARGMAX) continue;
            red_arg a = {ops[o], axis, false, V_TRANSPOSE};
            vk_case c = {kiln__op_table[ops[o]].name, 1, {IN(KILN_F16, -2, 2, 2, 300, 7)}, build_reduce, &a,
                         o == 0 ? 1e-3 : 0, o == 0 ? 1e-3 : 0, false, 0, false};
            check_case(&c);
        }
}

static kiln_tensor *build_permute6(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg;
    static const int axes[6] = {5, 3, 1, 0, 2, 4};
    return kiln_contiguous(ctx, kiln_slice(ctx, kiln_permute(ctx, in[0], axes), 2, 0, 3, 2));
}

KT_TEST(vk_contiguous_6d) {
    vk_case c = {"contiguous 6-d", 1, {IN(KILN_F32, -1, 1, 6, 2, 3, 4, 3, 2, 5)}, build_permute6, NULL, 0, 0, false, 0, false};
    check_case(&c);
    c.in[0].dt = KILN_F16;
    check_case(&c);
}

/* ---- the fast paths (vk_elementwise.c picks them by layout) ---- */

/* Unary ops on contiguous inputs take the uvec4 kernel (the n % 4 left
 * over, and inputs not starting at a multiple of 4, the strided one):
 * sizes below 4, multiples of 4, and 1..3 over; rows sliced off the front
 * so the input starts 29 (unaligned) or 28 (aligned) elements in. */
KT_TEST(vk_unary_fast_paths) {
    static const int64_t shapes[][2] = {{1, 3}, {8, 28}, {9, 29}, {5, 30}, {3, 31}, {1, 1}};
    static const view_kind views[] = {V_NONE, V_ROWS};
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++)
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
            for (size_t v = 0; v < 2; v++) {
                if (views[v] == V_ROWS && shapes[s][0] < 2) continue;
                unary_arg a = {unary_ops[i].op, unary_ops[i].p, views[v]};
                char name[96];
                snprintf(name, sizeof name, "%s(p=%g) [%lld, %lld] view %d", kiln__op_table[a.op].name, a.p,
                         (long long)shapes[s][0], (long long)shapes[s][1], (int)views[v]);
                vk_case c = {name, 1, {IN(KILN_F32, unary_ops[i].lo, unary_ops[i].hi, 2, shapes[s][0], shapes[s][1])},
                             build_unary, &a, 1e-6, 1e-5, false, 0, false};
                check_case(&c);
            }
}

/* Read t's f32 values as bits. */
static uint32_t *bits_of(kiln_tensor *t, int64_t n) {
    float *f = malloc((size_t)n * sizeof *f);
    if (kiln_tensor_get_f32(t, f, n) != KILN_OK) {
        free(f);
        return NULL;
    }
    return (uint32_t *)f;
}

/* The vector kernel and the strided one give the same bits for every op,
 * f32 and f16, special values included (both run on the device). */
KT_TEST(vk_unary_fast_equals_strided) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    static const double special[] = {0.0, -0.0, 1.0, -1.0, INFINITY, -INFINITY, NAN, 1e-30, -1e-30, 1e30, -1e30,
                                     88.5, -88.5, 100, -100, 0.5, -0.5, 3.0, -3.0, 15, -15, 1.17549435e-38, 1.4e-45};
    for (size_t i = 0; i < sizeof unary_ops / sizeof *unary_ops; i++)
        for (int vals = 0; vals < 4; vals++) {
            kiln_ctx *ctx = kiln_ctx_new();
            vk_in in = IN(vals < 2 ? KILN_F32 : KILN_F16, unary_ops[i].lo, unary_ops[i].hi, 2, 23, 12);
            if (vals % 2) in.vals = special, in.nvals = 23;
            unary_arg fast = {unary_ops[i].op, unary_ops[i].p, V_NONE}, strided = {unary_ops[i].op, unary_ops[i].p, V_TT};
            kiln_tensor *x = NULL, *y1 = NULL, *y2 = NULL;
            kiln_graph *g = NULL;
            bool ok = kiln_ctx_set_backend(ctx, vk) == KILN_OK && (x = kiln_tensor_new(ctx, in.dt, 2, in.shape)) &&
                      fill(x, &in, 5) == KILN_OK && (y1 = build_unary(ctx, &x, &fast)) &&
                      (y2 = build_unary(ctx, &x, &strided)) && (g = kiln_graph_new(ctx)) &&
                      kiln_graph_add(g, y1) == KILN_OK && kiln_graph_add(g, y2) == KILN_OK &&
                      kiln_graph_compute(g) == KILN_OK;
            KT_CHECK(ok, "%s: %s", kiln__op_table[fast.op].name, kiln_last_error());
            if (ok) {
                KT_CHECK(kiln_graph_get_stats(g).nodes_fallback == 0, "%s fell back", kiln__op_table[fast.op].name);
                uint32_t *b1 = bits_of(y1, 23 * 12), *b2 = bits_of(y2, 23 * 12);
                int64_t at = -1;
                for (int64_t k = 0; b1 && b2 && k < 23 * 12 && at < 0; k++)
                    if (b1[k] != b2[k]) at = k;
                KT_CHECK(b1 && b2 && at < 0, "%s(p=%g) case %d: element %lld: vector %08x, strided %08x",
                         kiln__op_table[fast.op].name, fast.p, vals, (long long)at, at >= 0 ? b1[at] : 0,
                         at >= 0 ? b2[at] : 0);
                free(b1);
                free(b2);
            }
            kiln_ctx_free(ctx);
        }
}

/* Binary ops, exact against the CPU, through each layout: both sources
 * shaped like the output, a row broadcast (bias) on either side with rows
 * of a multiple of 4 or not, a scalar or a column ([rows, 1]) on either
 * side, a column against a row, sources starting
 * off a multiple of 4 (rows sliced off the front), element counts not a
 * multiple of 4, and fewer than 4 elements. */
KT_TEST(vk_binary_fast_paths) {
    static const struct {
        vk_in a, b;
        view_kind va, vb;
    } shapes[] = {
        {IN(KILN_F32, -3, 3, 2, 7, 36), IN(KILN_F32, 0.5, 3, 2, 7, 36), V_NONE, V_NONE},     /* same shape */
        {IN(KILN_F32, -3, 3, 2, 7, 37), IN(KILN_F32, 0.5, 3, 2, 7, 37), V_NONE, V_NONE},     /* 3 over */
        {IN(KILN_F32, -3, 3, 2, 9, 12), IN(KILN_F32, 0.5, 3, 1, 12), V_NONE, V_NONE},        /* row bias */
        {IN(KILN_F32, -3, 3, 1, 12), IN(KILN_F32, 0.5, 3, 2, 9, 12), V_NONE, V_NONE},        /* bias first */
        {IN(KILN_F32, -3, 3, 3, 4, 5, 8), IN(KILN_F32, 0.5, 3, 1, 8), V_NONE, V_NONE},       /* 3-d, row bias */
        {IN(KILN_F32, -3, 3, 2, 9, 13), IN(KILN_F32, 0.5, 3, 1, 13), V_NONE, V_NONE},        /* row of 13 */
        {IN(KILN_F32, -3, 3, 2, 7, 9), IN(KILN_F32, 0.5, 3, 1, 1), V_NONE, V_NONE},          /* scalar b */
        {IN(KILN_F32, -3, 3, 1, 1), IN(KILN_F32, 0.5, 3, 2, 5, 8), V_NONE, V_NONE},          /* scalar a */
        {IN(KILN_F32, -3, 3, 2, 9, 28), IN(KILN_F32, 0.5, 3, 2, 8, 28), V_ROWS, V_NONE},     /* a 28 in */
        {IN(KILN_F32, -3, 3, 2, 9, 29), IN(KILN_F32, 0.5, 3, 2, 8, 29), V_ROWS, V_NONE},     /* a 29 in */
        {IN(KILN_F32, -3, 3, 2, 8, 29), IN(KILN_F32, 0.5, 3, 2, 9, 29), V_NONE, V_ROWS},     /* b 29 in */
        {IN(KILN_F32, -3, 3, 2, 9, 12), IN(KILN_F32, 0.5, 3, 2, 2, 12), V_ROWS, V_ROWS},     /* bias 12 in */
        {IN(KILN_F32, -3, 3, 2, 6, 8), IN(KILN_F32, 0.5, 3, 2, 6, 1), V_NONE, V_NONE},       /* column bcast */
        {IN(KILN_F32, -3, 3, 2, 6, 1), IN(KILN_F32, 0.5, 3, 2, 6, 8), V_NONE, V_NONE},       /* column first */
        {IN(KILN_F32, -3, 3, 2, 6, 9), IN(KILN_F32, 0.5, 3, 2, 6, 1), V_NONE, V_NONE},       /* rows of 9 */
        {IN(KILN_F32, -3, 3, 3, 2, 3, 8), IN(KILN_F32, 0.5, 3, 3, 2, 3, 1), V_NONE, V_NONE}, /* 3-d column */
        {IN(KILN_F32, -3, 3, 2, 5, 1), IN(KILN_F32, 0.5, 3, 1, 8), V_NONE, V_NONE},          /* column x row */
        {IN(KILN_F32, -3, 3, 1, 1), IN(KILN_F32, 0.5, 3, 2, 5, 1), V_NONE, V_NONE},          /* scalar, column */
        {IN(KILN_F32, -3, 3, 2, 9, 12), IN(KILN_F32, 0.5, 3, 2, 10, 1), V_NONE, V_ROWS},     /* column 1 in */
        {IN(KILN_F32, -3, 3, 1, 3), IN(KILN_F32, 0.5, 3, 1, 3), V_NONE, V_NONE},             /* 3 elements */
        {IN(KILN_F32, -3, 3, 2, 9, 12), IN(KILN_F32, 0.5, 3, 2, 12, 9), V_NONE, V_TRANSPOSE}, /* strided b */
    };
    static const kiln_op ops[] = {KILN_OP_ADD, KILN_OP_SUB, KILN_OP_MUL, KILN_OP_DIV};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (size_t o = 0; o < 4 + 6; o++) {
            binary_arg a = {o < 4 ? ops[o] : KILN_OP_CMP, o < 4 ? 0 : (int)o - 4, shapes[s].va, shapes[s].vb};
            char name[64];
            snprintf(name, sizeof name, "%s/%d fast shapes %zu", kiln__op_table[a.op].name, a.cmp, s);
            vk_case c = {name, 2, {shapes[s].a, shapes[s].b}, build_binary, &a, 0, 0, false, 0, false};
            check_case(&c);
        }
    /* special values through the uvec4 kernels, with a scalar and with a row */
    static const double va[] = {0.0, -0.0, 1.0, NAN, INFINITY, -INFINITY, 2.0, 1e-30, 7.0, 3.0, -5.0, 1e38};
    for (int o = 0; o < 10; o++) {
        binary_arg a = {o < 4 ? KILN_OP_ADD + o : KILN_OP_CMP, o < 4 ? 0 : o - 4, V_NONE, V_NONE};
        vk_case c = {"special row", 2, {IN(KILN_F32, 0, 0, 2, 5, 12), IN(KILN_F32, 0, 0, 1, 12)}, build_binary, &a, 0, 0, false, 0, false};
        c.in[0].vals = va, c.in[0].nvals = 11, c.in[1].vals = va, c.in[1].nvals = 12;
        check_case(&c);
        vk_case d = {"special scalar", 2, {IN(KILN_F32, 0, 0, 2, 5, 12), IN(KILN_F32, 0, 0, 1, 1)}, build_binary, &a, 0, 0, false, 0, false};
        d.in[0].vals = va, d.in[0].nvals = 12, d.in[1].vals = va + 4, d.in[1].nvals = 1; /* inf */
        check_case(&d);
        vk_case e = {"special column", 2, {IN(KILN_F32, 0, 0, 2, 12, 8), IN(KILN_F32, 0, 0, 2, 12, 1)}, build_binary, &a, 0, 0, false, 0, false};
        e.in[0].vals = va, e.in[0].nvals = 11, e.in[1].vals = va, e.in[1].nvals = 12;
        check_case(&e);
    }
}

typedef struct move_arg {
    int kind; /* 0: transpose of the first two dims, 1: permute (2, 0, 1), 2: slice of rows 1.., 3: step-2 slice,
                 4: transpose of the last two dims, 5: permute (1, 0, 2) of rows sliced from 1 */
} move_arg;

static kiln_tensor *build_move(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    static const int axes[3] = {2, 0, 1};
    kiln_tensor *x = in[0];
    switch (((const move_arg *)arg)->kind) {
    case 0: x = kiln_transpose(ctx, x, 0, 1); break;
    case 1: x = kiln_permute(ctx, x, axes); break;
    case 2: x = kiln_slice(ctx, kiln_transpose(ctx, x, 0, 1), 0, 1, x->shape[1], 1); break;
    case 3: x = kiln_slice(ctx, x, x->ndim - 1, 0, x->shape[x->ndim - 1], 2); break;
    case 4: x = kiln_transpose(ctx, x, x->ndim - 2, x->ndim - 1); break;
    default: x = kiln_transpose(ctx, kiln_slice(ctx, x, 0, 1, x->shape[0], 1), 0, 1); break;
    }
    return kiln_contiguous(ctx, x);
}

/* CONTIGUOUS copies, exact: innermost dims of a multiple of 4 (four
 * elements an invocation, one uvec4 load where x is contiguous along it)
 * or not, transposes of the last two dims (4x4 blocks) with and without
 * an outer dim, sources starting off a multiple of 4, f32, i32 and f16. */
KT_TEST(vk_contiguous_fast_paths) {
    static const struct {
        int nd;
        int64_t shape[3];
    } shapes[] = {{2, {12, 8}}, {2, {13, 9}}, {2, {40, 36}}, {3, {4, 8, 12}}, {3, {5, 7, 3}}, {2, {2, 4}}, {2, {16, 2}},
                  {3, {3, 8, 12}}, {3, {5, 4, 8}}, {2, {9, 8}}, {2, {5, 12}}};
    static const kiln_dtype dts[] = {KILN_F32, KILN_I32, KILN_F16};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int kind = 0; kind < 6; kind++)
            for (int d = 0; d < 3; d++) {
                if ((kind == 1 && shapes[s].nd != 3) || (kind == 2 && shapes[s].shape[1] < 2) ||
                    (kind == 5 && shapes[s].shape[0] < 3))
                    continue;
                move_arg a = {kind};
                char name[64];
                snprintf(name, sizeof name, "contiguous %s shapes %zu kind %d", kiln_dtype_name(dts[d]), s, kind);
                vk_case c = {name, 1, {IN(dts[d], -1000, 1000, shapes[s].nd, shapes[s].shape[0], shapes[s].shape[1], shapes[s].shape[2])},
                             build_move, &a, 0, 0, false, 0, false};
                check_case(&c);
            }
}

typedef struct cast_arg {
    kiln_dtype to;
    bool rows; /* from rows 1.. of the input: starting off a multiple of 4 when its rows are odd */
} cast_arg;

static kiln_tensor *build_cast(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const cast_arg *a = arg;
    kiln_tensor *x = a->rows ? kiln_slice(ctx, in[0], 0, 1, in[0]->shape[0], 1) : in[0];
    return kiln_cast(ctx, x, a->to);
}

/* CAST of contiguous inputs (vector kernels, the n % 4 left over by the
 * element kernel), every pair, exact: element counts of a multiple of 4,
 * 1..3 over, below 4, and inputs starting 7 (unaligned) or 8 (aligned)
 * elements in; special values too. */
KT_TEST(vk_cast_fast_paths) {
    static const double special[] = {0.5, 1.5, 2.5, -0.5, -1.5, 65504, 65520, 1e-7, -6e-8, 3e-5, NAN, INFINITY, -INFINITY,
                                     -0.0, 2147483520.0, 3e9, -3e9, 16777217, 123456789, 1.0009765625, 1.00048828125};
    static const kiln_dtype dts[] = {KILN_F32, KILN_F16, KILN_BF16, KILN_I32};
    static const struct {
        int64_t r, c;
        bool rows;
    } shapes[] = {{4, 6, false}, {5, 7, false}, {1, 3, false}, {6, 7, true}, {6, 8, true}, {2, 9, true}};
    for (int s = 0; s < 4; s++)
        for (int d = 0; d < 4; d++)
            for (size_t k = 0; k < sizeof shapes / sizeof *shapes; k++)
                for (int vals = 0; vals < 2; vals++) {
                    if (s == d) continue;
                    cast_arg a = {dts[d], shapes[k].rows};
                    char name[80];
                    snprintf(name, sizeof name, "cast %s -> %s [%lld, %lld]%s%s", kiln_dtype_name(dts[s]), kiln_dtype_name(dts[d]),
                             (long long)shapes[k].r, (long long)shapes[k].c, shapes[k].rows ? " rows 1.." : "", vals ? " special" : "");
                    vk_case c = {name, 1, {IN(dts[s], -300, 300, 2, shapes[k].r, shapes[k].c)}, build_cast, &a, 0, 0, false, 0, false};
                    if (vals && dts[s] != KILN_I32) c.in[0].vals = special, c.in[0].nvals = 21;
                    if (vals && dts[s] == KILN_I32) c.in[0].lo = -2147483648.0, c.in[0].hi = 2147483647.0;
                    check_case(&c);
                }
}

/* f16 through the vector kernels: unary ops on contiguous inputs (within
 * the f16 tolerance of the other f16 tests) and binary layouts (exact). */
KT_TEST(vk_f16_fast_paths) {
    static const kiln_op uops[] = {KILN_OP_EXP, KILN_OP_GELU, KILN_OP_SILU, KILN_OP_SCALE, KILN_OP_RELU, KILN_OP_TANH, KILN_OP_SQRT};
    static const int64_t ushapes[][2] = {{8, 28}, {9, 29}, {1, 3}, {5, 30}};
    for (size_t i = 0; i < sizeof uops / sizeof *uops; i++)
        for (size_t s = 0; s < 4; s++)
            for (int v = 0; v < 2; v++) {
                if (v && ushapes[s][0] < 2) continue;
                unary_arg a = {uops[i], 0.3, v ? V_ROWS : V_NONE};
                vk_case c = {kiln__op_table[uops[i]].name, 1, {IN(KILN_F16, uops[i] == KILN_OP_SQRT ? 0 : -4, 4, 2, ushapes[s][0], ushapes[s][1])},
                             build_unary, &a, 1e-3, 1e-3, false, 0, false};
                check_case(&c);
            }
    static const struct {
        vk_in a, b;
        view_kind va, vb;
    } shapes[] = {
        {IN(KILN_F16, -3, 3, 2, 7, 37), IN(KILN_F16, 0.5, 3, 2, 7, 37), V_NONE, V_NONE}, /* same shape, 1 over */
        {IN(KILN_F16, -3, 3, 2, 9, 12), IN(KILN_F16, 0.5, 3, 1, 12), V_NONE, V_NONE},    /* row bias */
        {IN(KILN_F16, -3, 3, 1, 1), IN(KILN_F16, 0.5, 3, 2, 5, 9), V_NONE, V_NONE},      /* scalar a */
        {IN(KILN_F16, -3, 3, 2, 6, 8), IN(KILN_F16, 0.5, 3, 2, 6, 1), V_NONE, V_NONE},   /* column b */
        {IN(KILN_F16, -3, 3, 2, 9, 29), IN(KILN_F16, 0.5, 3, 2, 8, 29), V_ROWS, V_NONE}, /* a 29 in */
        {IN(KILN_F16, -3, 3, 2, 9, 28), IN(KILN_F16, 0.5, 3, 2, 8, 28), V_ROWS, V_NONE}, /* a 28 in */
    };
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++)
        for (int o = 0; o < 5; o++) {
            binary_arg a = {o < 4 ? KILN_OP_ADD + o : KILN_OP_CMP, KILN_CMP_LE, shapes[s].va, shapes[s].vb};
            char name[64];
            snprintf(name, sizeof name, "f16 %s shapes %zu", kiln__op_table[a.op].name, s);
            vk_case c = {name, 2, {shapes[s].a, shapes[s].b}, build_binary, &a, 0, 0, false, 0, false};
            check_case(&c);
        }
}

static kiln_tensor *build_where_plain(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_where(ctx, in[0], in[1], in[2]);
}

/* where's walks of up to 4 dims (magic-number division) and of 6 (the
 * plain kernel): alternating broadcasts keep every dim apart. */
KT_TEST(vk_where_dims) {
    static const double conds[] = {0.0, 1.0, -0.0, NAN, -2.0, 0.0, 3.0};
    vk_case c6 = {"where 6-d", 3, {IN(KILN_F32, 0, 0, 6, 2, 1, 2, 1, 2, 1), IN(KILN_F32, -2, 2, 6, 1, 2, 1, 2, 1, 2),
                                   IN(KILN_F32, -2, 2, 6, 2, 2, 2, 2, 2, 2)},
                  build_where_plain, NULL, 0, 0, false, 0, false};
    c6.in[0].vals = conds, c6.in[0].nvals = 7;
    check_case(&c6);
    vk_case c4 = {"where 4-d", 3, {IN(KILN_I32, 0, 2, 4, 3, 1, 4, 1), IN(KILN_F32, -2, 2, 4, 1, 5, 1, 6),
                                   IN(KILN_F32, -2, 2, 4, 3, 5, 4, 6)},
                  build_where_plain, NULL, 0, 0, false, 0, false};
    check_case(&c4);
    vk_case c3 = {"where 3-d f16", 3, {IN(KILN_F32, 0, 0, 3, 4, 1, 8), IN(KILN_F16, -2, 2, 3, 4, 5, 8), IN(KILN_F16, -2, 2, 1, 1)},
                  build_where_plain, NULL, 0, 0, false, 0, false};
    c3.in[0].vals = conds, c3.in[0].nvals = 7;
    check_case(&c3);
    c6.in[1].dt = c6.in[2].dt = KILN_F16;
    check_case(&c6);
}

/* where through the vector kernels: cond, a and b shaped like the output
 * or rows of a multiple of 4 (a mask over batches), a or b a scalar fill
 * or a column, element counts 1..3 over a multiple of 4, starts off a
 * multiple of 4 (rows sliced off the front: the element kernel). */
static kiln_tensor *build_where_rows(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    (void)arg;
    return kiln_where(ctx, kiln_slice(ctx, in[0], 0, 1, in[0]->shape[0], 1), in[1], in[2]);
}

KT_TEST(vk_where_fast_paths) {
    static const double conds[] = {0.0, 1.0, -0.0, NAN, -2.0, 0.0, 3.0};
    static const struct {
        vk_in c, a, b;
        bool rows;
    } cases[] = {
        {IN(KILN_F32, 0, 0, 2, 5, 12), IN(KILN_F32, -2, 2, 2, 5, 12), IN(KILN_F32, -2, 2, 2, 5, 12), false},
        {IN(KILN_I32, 0, 2, 2, 5, 13), IN(KILN_F32, -2, 2, 2, 5, 13), IN(KILN_F32, -2, 2, 2, 5, 13), false},
        {IN(KILN_I32, 0, 2, 2, 4, 8), IN(KILN_F32, -2, 2, 3, 3, 4, 8), IN(KILN_F32, -2, 2, 1, 1), false},  /* mask over batches, fill */
        {IN(KILN_F32, 0, 0, 2, 6, 8), IN(KILN_F32, -2, 2, 1, 1), IN(KILN_F32, -2, 2, 2, 6, 8), false},      /* fill first */
        {IN(KILN_I32, 0, 2, 2, 6, 8), IN(KILN_F32, -2, 2, 2, 6, 8), IN(KILN_F32, -2, 2, 2, 6, 1), false},   /* column b */
        {IN(KILN_I32, 0, 2, 2, 6, 8), IN(KILN_F32, -2, 2, 1, 8), IN(KILN_F32, -2, 2, 2, 6, 8), false},      /* row a */
        {IN(KILN_I32, 0, 2, 2, 7, 8), IN(KILN_F32, -2, 2, 2, 6, 8), IN(KILN_F32, -2, 2, 2, 6, 8), true},    /* cond 8 in */
        {IN(KILN_I32, 0, 2, 2, 7, 9), IN(KILN_F32, -2, 2, 2, 6, 9), IN(KILN_F32, -2, 2, 2, 6, 9), true},    /* cond 9 in */
        {IN(KILN_I32, 0, 2, 1, 1), IN(KILN_F32, -2, 2, 2, 6, 8), IN(KILN_F32, -2, 2, 2, 6, 8), false},      /* scalar cond */
        {IN(KILN_I32, 0, 2, 1, 3), IN(KILN_F32, -2, 2, 1, 3), IN(KILN_F32, -2, 2, 1, 1), false},            /* 3 elements */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++)
        for (int h = 0; h < 2; h++) {
            char name[48];
            snprintf(name, sizeof name, "where fast %zu%s", k, h ? " f16" : "");
            vk_case c = {name, 3, {cases[k].c, cases[k].a, cases[k].b}, cases[k].rows ? build_where_rows : build_where_plain,
                         NULL, 0, 0, false, 0, false};
            if (h) c.in[1].dt = c.in[2].dt = KILN_F16;
            if (c.in[0].dt == KILN_F32) c.in[0].vals = conds, c.in[0].nvals = 7;
            check_case(&c);
        }
}
