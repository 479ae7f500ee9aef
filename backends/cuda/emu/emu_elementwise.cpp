// emu_elementwise.cpp — k_elementwise.cu's kernels on the host against the
// CPU backend, f64 and f32: CAST (i32 <-> f64, f32 <-> f64, of a
// transposed view), unary ops of a transposed view, a broadcast binary op,
// CMP, WHERE with an f64 condition, SUM / MAX / ARGMAX over an axis of a
// permuted view and SUM over everything. The walks are built here as
// cu_util.c builds them (without its coalescing, which changes no offset).
#include "emu.h"
namespace {
#include "k_elementwise.body"
}
#include "emu_cpu.h"

static int code(kiln_dtype t) {
    return t == KILN_F64 ? CU_F64 : t == KILN_F32 ? CU_F32 : t == KILN_I32 ? CU_I32 : -1;
}

// out's walk over sources s[0..n) (right-aligned, stride 0 where broadcast)
static cu_walk walk_of(const kiln_tensor *out, int n, const kiln_tensor *const *s) {
    cu_walk w{};
    w.nd = out->ndim;
    for (int d = 0; d < out->ndim; d++) {
        w.shape[d] = out->shape[d];
        for (int k = 0; k < n; k++) {
            int sd = d - (out->ndim - s[k]->ndim);
            w.st[k][d] = sd >= 0 && s[k]->shape[sd] != 1 ? s[k]->stride[sd] : 0;
        }
    }
    return w;
}

// the storage a source reads (a leaf, or the leaf a view starts at)
static std::vector<char> storage(const kiln_tensor *t) { return emu_bytes(t->view_src ? t->view_src : t); }

static void compute(kiln_ctx *ctx, kiln_tensor *y) {
    kiln_graph *g = kiln_graph_new(ctx);
    if (kiln_graph_add(g, y) || kiln_graph_compute(g)) {
        printf("cpu graph failed: %s\n", kiln_last_error());
        emu_failures++;
    }
}

static void cast_case(kiln_dtype from, kiln_dtype to) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[2] = {9, 5};
    kiln_tensor *x = emu_input(ctx, from, 2, sh, from == KILN_I32 ? -1000 : -6, from == KILN_I32 ? 1000 : 6, false, from == KILN_I32);
    kiln_tensor *xt = kiln_transpose(ctx, x, 0, 1), *y = kiln_cast(ctx, xt, to);
    compute(ctx, y);
    auto xb = emu_bytes(x), yb = emu_bytes(y);
    cu_walk w = walk_of(y, 1, &xt);
    emu_launch(256, [&] { copy_k(code(from), xb.data(), code(to), yb.data(), kiln_tensor_numel(y), w); });
    char name[64];
    snprintf(name, sizeof name, "cast %s -> %s (transposed)", kiln_dtype_name(from), kiln_dtype_name(to));
    emu_check(name, y, yb, -1);
    kiln_ctx_free(ctx);
}

static void unary_case(kiln_dtype dt, kiln_tensor *(*f)(kiln_ctx *, kiln_tensor *), kiln_op op, const char *what) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[2] = {9, 5};
    kiln_tensor *x = emu_input(ctx, dt, 2, sh, -2, 2, false), *xt = kiln_transpose(ctx, x, 0, 1), *y = f(ctx, xt);
    compute(ctx, y);
    auto xb = emu_bytes(x), yb = emu_bytes(y);
    cu_walk w = walk_of(y, 1, &xt);
    emu_launch(256, [&] { unary_k((int)(op - KILN_OP_NEG), 0, code(dt), xb.data(), yb.data(), kiln_tensor_numel(y), w); });
    emu_check(what, y, yb, dt == KILN_F64 ? 1e-15 : -1);
    kiln_ctx_free(ctx);
}

// relu with NaN in every fifth element: NaN stays NaN
static void relu_nan_case(kiln_dtype dt) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t n = 40;
    kiln_tensor *x = emu_input(ctx, dt, 1, &n, -2, 2, false);
    for (int64_t i = 0; i < n; i += 5) {
        if (dt == KILN_F32) ((float *)kiln_tensor_data(x))[i] = NAN;
        else ((double *)kiln_tensor_data(x))[i] = NAN;
    }
    kiln_tensor *y = kiln_relu(ctx, x);
    compute(ctx, y);
    auto xb = emu_bytes(x), yb = emu_bytes(y);
    cu_walk w = walk_of(y, 1, &x);
    emu_launch(256, [&] { unary_k((int)(KILN_OP_RELU - KILN_OP_NEG), 0, code(dt), xb.data(), yb.data(), n, w); });
    emu_check("relu of NaN", y, yb, -1);
    kiln_ctx_free(ctx);
}

static void binary_case(kiln_dtype dt) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t as[3] = {4, 1, 7}, bs[2] = {3, 1};
    kiln_tensor *a = emu_input(ctx, dt, 3, as, -1, 1, false), *b = emu_input(ctx, dt, 2, bs, 0.5, 2, false);
    kiln_tensor *y = kiln_div(ctx, a, b), *c = kiln_cmp(ctx, a, kiln_div(ctx, b, b), KILN_CMP_LE);
    compute(ctx, y);
    compute(ctx, c);
    const kiln_tensor *src[2] = {a, b};
    auto ab = emu_bytes(a), bb = emu_bytes(b), yb = emu_bytes(y), cb = emu_bytes(c);
    cu_walk w = walk_of(y, 2, src);
    emu_launch(256, [&] { binary_k(CU_DIV, 0, code(dt), ab.data(), bb.data(), yb.data(), kiln_tensor_numel(y), w); });
    emu_check("div, broadcast", y, yb, -1);
    std::vector<char> ones = bb;
    for (int64_t i = 0; i < 3; i++) {
        if (dt == KILN_F64) ((double *)ones.data())[i] = 1;
        else ((float *)ones.data())[i] = 1;
    }
    emu_launch(256, [&] { binary_k(CU_CMP, KILN_CMP_LE, code(dt), ab.data(), ones.data(), cb.data(), kiln_tensor_numel(c), w); });
    emu_check("cmp le, broadcast", c, cb, -1);
    kiln_ctx_free(ctx);
}

static void where_case(kiln_dtype dt, kiln_dtype ct) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t cs[3] = {4, 1, 6}, as[2] = {3, 6}, bs[1] = {6};
    kiln_tensor *c = emu_input(ctx, ct, 3, cs, 0, 1, false, true), *a = emu_input(ctx, dt, 2, as, -1, 1, false);
    kiln_tensor *b = emu_input(ctx, dt, 1, bs, -1, 1, false), *y = kiln_where(ctx, c, a, b);
    compute(ctx, y);
    const kiln_tensor *src[3] = {c, a, b};
    auto cb = emu_bytes(c), ab = emu_bytes(a), bb = emu_bytes(b), yb = emu_bytes(y);
    cu_walk w = walk_of(y, 3, src);
    emu_launch(256, [&] { where_k(code(ct), cb.data(), code(dt), ab.data(), bb.data(), yb.data(), kiln_tensor_numel(y), w); });
    char name[64];
    snprintf(name, sizeof name, "where (%s condition)", kiln_dtype_name(ct));
    emu_check(name, y, yb, -1);
    kiln_ctx_free(ctx);
}

// over axis of x [6, 7, 5] permuted to [5, 6, 7] (as cu_reduce.c walks it)
static void reduce_case(kiln_dtype dt, int op, int axis) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[3] = {6, 7, 5};
    kiln_tensor *x = emu_input(ctx, dt, 3, sh, -2, 2, false, op == CU_RED_ARGMAX);
    int perm[3] = {2, 0, 1};
    kiln_tensor *xp = kiln_permute(ctx, x, perm);
    kiln_tensor *y = op == CU_RED_SUM ? kiln_sum(ctx, xp, axis, false) : op == CU_RED_MAX ? kiln_max(ctx, xp, axis, false)
                                                                                        : kiln_argmax(ctx, xp, axis, false);
    compute(ctx, y);
    cu_walk w{};
    for (int d = 0; d < 3; d++) {
        if (d == axis) continue;
        w.shape[w.nd] = xp->shape[d];
        w.st[0][w.nd++] = xp->shape[d] == 1 ? 0 : xp->stride[d];
    }
    auto xb = emu_bytes(x), yb = emu_bytes(y);
    int yt = op == CU_RED_ARGMAX ? CU_I32 : code(dt);
    emu_launch(256, [&] { reduce_k(op, code(dt), xb.data(), yt, yb.data(), kiln_tensor_numel(y), w, xp->shape[axis], xp->stride[axis]); });
    char name[64];
    snprintf(name, sizeof name, "%s axis %d (permuted)", op == CU_RED_SUM ? "sum" : op == CU_RED_MAX ? "max" : "argmax", axis);
    emu_check(name, y, yb, op == CU_RED_SUM ? (dt == KILN_F64 ? 1e-15 : 1e-7) : -1);
    kiln_ctx_free(ctx);
}

static void reduce_all_case(kiln_dtype dt) {
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t sh[2] = {3, 1500};
    kiln_tensor *x = emu_input(ctx, dt, 2, sh, -1, 1, false), *y = kiln_sum_all(ctx, x);
    compute(ctx, y);
    cu_walk w{};
    w.nd = 1, w.shape[0] = 4500, w.st[0][0] = 1;
    auto xb = emu_bytes(x), yb = emu_bytes(y);
    emu_launch(256, [&] { reduce_all_k(CU_RED_SUM, code(dt), xb.data(), code(dt), yb.data(), 4500, w); });
    emu_check("sum_all", y, yb, dt == KILN_F64 ? 1e-13 : 1e-6);
    kiln_ctx_free(ctx);
}

int main() {
    cast_case(KILN_I32, KILN_F64), cast_case(KILN_F64, KILN_I32), cast_case(KILN_F32, KILN_F64), cast_case(KILN_F64, KILN_F32);
    cast_case(KILN_I32, KILN_F32), cast_case(KILN_F64, KILN_F64);
    for (kiln_dtype dt : {KILN_F32, KILN_F64}) {
        unary_case(dt, kiln_exp, KILN_OP_EXP, "exp (transposed)");
        unary_case(dt, kiln_gelu_tanh, KILN_OP_GELU_TANH, "gelu_tanh (transposed)");
        relu_nan_case(dt);
        binary_case(dt);
        where_case(dt, KILN_F64), where_case(dt, KILN_I32), where_case(dt, KILN_F32);
        reduce_case(dt, CU_RED_SUM, 1), reduce_case(dt, CU_RED_MAX, 2), reduce_case(dt, CU_RED_ARGMAX, 0);
        reduce_all_case(dt);
    }
    printf("emu_elementwise: %s\n", emu_failures ? "FAIL" : "ok");
    return emu_failures != 0;
}
