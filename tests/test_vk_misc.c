/* test_vk_misc.c — the Vulkan movement, rows and optimizer kernels against
 * the CPU: concat, pad, slice_scatter (every width, strided sources),
 * get_rows, scatter_add_rows, one_hot, the gradients of concat, pad and
 * get_rows through kiln_graph_backward, and SGD and Adam/AdamW steps (on
 * set gradients, and training a small linear model). Each case is built
 * twice from the same seeds, in a CPU context and in a Vulkan one: the
 * results must be the same bits (the trained model, whose graph holds other
 * families' kernels, to 1e-5), every node of these families must run on the
 * device and the validation layer must stay silent. */
#include "internal.h"
#include "kt_device.h"
#include "test_mov_util.h"
#include "../ops/movement_copy.h"
#include "../optim/optim_impl.h"

#ifdef KILN_VULKAN
#include "../backends/vulkan/vk.h"

/* The backend; the test is skipped where there is no Vulkan device. */
static kiln_backend *vk_backend(void) { return kt_device("vulkan"); }

static bool vk_f16(kiln_backend *b) { return kiln__vk_caps(b->impl)->f16; }

/* The supports() of this file's families, to check what a graph mixing
 * them with other ops leaves on the device. */
static bool claimed(kiln_backend *b, const kiln_tensor *t) {
    kiln_vk_kernel tab[KILN_OP_COUNT] = {0};
    kiln__vk_register_movement(tab);
    kiln__vk_register_rows(tab);
    kiln__vk_register_optim(tab);
    return tab[t->op].supports && tab[t->op].supports(b->impl, t);
}

/* Builds a case in ctx: its outputs into out, their count returned (0: failed). */
typedef int (*build_fn)(kiln_ctx *ctx, kiln_tensor **out, const void *arg);

#define MAX_OUT 4

/* Build and compute the case on the CPU and on Vulkan; the outputs must be
 * the same bits and the Vulkan graph must fall back want_fallback times. */
static void check_same(const char *what, build_fn build, const void *arg, int64_t want_fallback) {
    kiln_backend *vk = vk_backend();
    int64_t msgs = kiln_backend_validation_messages(vk);
    kiln_ctx *cc = kiln_ctx_new(), *vc = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(vc, vk));
    kiln_tensor *co[MAX_OUT], *vo[MAX_OUT];
    int n = build(cc, co, arg);
    KT_REQUIRE(n > 0 && build(vc, vo, arg) == n, "%s: build failed: %s", what, kiln_last_error());
    kiln_graph *cg = kiln_graph_new(cc), *vg = kiln_graph_new(vc);
    for (int i = 0; i < n; i++) {
        KT_OK(kiln_graph_add(cg, co[i]));
        KT_OK(kiln_graph_add(vg, vo[i]));
    }
    KT_OK(kiln_graph_compute(cg));
    KT_OK(kiln_graph_compute(vg));
    KT_OK(kiln_graph_compute(vg)); /* a second compute reuses what the first set up */
    kiln_graph_stats st = kiln_graph_get_stats(vg);
    KT_CHECK(st.nodes_fallback == 2 * want_fallback, "%s: %lld nodes fell back to the CPU, want %lld", what,
             (long long)st.nodes_fallback, (long long)(2 * want_fallback));
    for (int i = 0; i < n; i++) {
        int64_t m = kiln_tensor_numel(co[i]);
        KT_CHECK(kiln_tensor_numel(vo[i]) == m, "%s: output %d sizes differ", what, i);
        double *a = malloc((size_t)m * sizeof *a + 1), *b = malloc((size_t)m * sizeof *b + 1);
        KT_REQUIRE(a && b, "out of memory");
        KT_OK(kiln_tensor_get_f64(vo[i], a, m));
        KT_OK(kiln_tensor_get_f64(co[i], b, m));
        for (int64_t j = 0; j < m; j++)
            if (memcmp(&a[j], &b[j], sizeof a[j])) {
                kt_fail(__FILE__, __LINE__, "%s: output %d element %lld: Vulkan %.9g, CPU %.9g", what, i,
                        (long long)j, a[j], b[j]);
                break;
            }
        free(a);
        free(b);
    }
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs, "%s: %lld validation messages", what,
             (long long)(kiln_backend_validation_messages(vk) - msgs));
    kiln_ctx_free(cc);
    kiln_ctx_free(vc);
}

/* A leaf of dtype dt with values from seed (integers in [-50, 50) for i32). */
static kiln_tensor *leaf(kiln_ctx *ctx, kiln_dtype dt, int ndim, const int64_t *shape, int seed) {
    if (dt != KILN_I32) return mt_leaf(ctx, dt, ndim, shape, seed);
    kiln_tensor *t = kiln_tensor_new(ctx, dt, ndim, shape);
    if (!t) return NULL;
    int32_t *v = kiln_tensor_data(t);
    for (int64_t i = 0; i < kiln_tensor_numel(t); i++) v[i] = (int32_t)floor(mt_val(i, seed) * 25);
    return t;
}

/* A node of op over srcs made by hand, so that views the constructors
 * would have copied reach the Vulkan kernels as they are; the CPU kernels
 * expect contiguous sources, so the CPU side gets contiguous copies. */
static kiln_tensor *raw_node(kiln_ctx *ctx, kiln_op op, kiln_dtype dt, int ndim, const int64_t *shape, int nsrc,
                             kiln_tensor *const *src) {
    kiln_tensor *s[KILN_MAX_SRC];
    bool cpu = !strcmp(kiln_backend_name(kiln_ctx_backend(ctx)), "cpu");
    for (int i = 0; i < nsrc; i++) s[i] = cpu ? kiln_contiguous(ctx, src[i]) : src[i];
    return kiln__node_new(ctx, op, dt, ndim, shape, nsrc, s);
}

/* ---- concat ---- */

static int build_concat(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *a = leaf(ctx, dt, 3, (int64_t[]){2, 3, 5}, 1), *b = leaf(ctx, dt, 3, (int64_t[]){2, 4, 5}, 2);
    kiln_tensor *c = leaf(ctx, dt, 3, (int64_t[]){2, 1, 5}, 3);
    out[0] = kiln_concat(ctx, (kiln_tensor *[]){a, b, c}, 3, 1);
    out[1] = kiln_concat(ctx, (kiln_tensor *[]){a, a}, 2, -1);
    out[2] = kiln_concat(ctx, (kiln_tensor *[]){c, b, a}, 3, 1);
    /* ten parts: two chained nodes */
    kiln_tensor *parts[10];
    for (int i = 0; i < 10; i++) parts[i] = leaf(ctx, dt, 2, (int64_t[]){i % 3 + 1, 7}, 10 + i);
    out[3] = kiln_concat(ctx, parts, 10, 0);
    return out[0] && out[1] && out[2] && out[3] ? 4 : 0;
}

static int build_concat_strided(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    (void)arg;
    kiln_tensor *a = leaf(ctx, KILN_F32, 2, (int64_t[]){6, 4}, 1), *b = leaf(ctx, KILN_F32, 2, (int64_t[]){3, 9}, 2);
    kiln_tensor *at = kiln_transpose(ctx, a, 0, 1);                       /* [4, 6], strides 1, 4 */
    kiln_tensor *bs = kiln_slice(ctx, b, 1, 1, 9, 2);                     /* [3, 4], stride 2 */
    kiln_tensor *bt = kiln_transpose(ctx, bs, 0, 1);                      /* [4, 3] */
    kiln_tensor *e = kiln_broadcast_to(ctx, kiln_slice(ctx, b, 0, 0, 1, 1), 2, (int64_t[]){4, 9}); /* stride 0 */
    if (!at || !bt || !e) return 0;
    out[0] = raw_node(ctx, KILN_OP_CONCAT, KILN_F32, 2, (int64_t[]){4, 18}, 3, (kiln_tensor *[]){at, bt, e});
    if (out[0]) out[0]->ip[0] = 1;
    return out[0] ? 1 : 0;
}

KT_TEST(vk_concat) {
    kiln_dtype dts[] = {KILN_F32, KILN_I32, KILN_F64, KILN_F16, KILN_BF16};
    bool f16 = vk_f16(vk_backend());
    for (int i = 0; i < 5; i++) {
        bool half = kiln_dtype_size(dts[i]) == 2;
        check_same(kiln_dtype_name(dts[i]), build_concat, &dts[i], half && !f16 ? 5 : 0);
    }
    check_same("strided parts", build_concat_strided, NULL, 0);
}

/* ---- pad ---- */

typedef struct pad_case {
    kiln_dtype dt;
    double value;
} pad_case;

static int build_pad(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    const pad_case *c = arg;
    kiln_tensor *x = leaf(ctx, c->dt, 3, (int64_t[]){3, 4, 5}, 4);
    out[0] = kiln_pad(ctx, x, (int64_t[]){1, 2, 0, 0, 3, 1}, c->value);
    out[1] = kiln_pad(ctx, x, (int64_t[]){0, 0, 2, 0, 0, 0}, c->value);
    /* a transposed source, by hand (kiln_pad would copy it first), where the device runs it */
    if (kiln_dtype_size(c->dt) == 2 && c->value != 0) return out[0] && out[1] ? 2 : 0;
    kiln_tensor *xt = kiln_transpose(ctx, x, 0, 2); /* [5, 4, 3] */
    out[2] = raw_node(ctx, KILN_OP_PAD, c->dt, 3, (int64_t[]){6, 7, 3}, 1, &xt);
    if (out[2]) {
        int64_t pads[6] = {0, 1, 2, 1, 0, 0};
        memcpy(out[2]->ip, pads, sizeof pads);
        out[2]->fp[0] = c->value;
    }
    return out[0] && out[1] && out[2] ? 3 : 0;
}

KT_TEST(vk_pad) {
    bool f16 = vk_f16(vk_backend());
    check_same("f32", build_pad, &(pad_case){KILN_F32, 1.5}, 0);
    check_same("f32 -inf", build_pad, &(pad_case){KILN_F32, -INFINITY}, 0);
    check_same("i32", build_pad, &(pad_case){KILN_I32, -3}, 0);
    check_same("f64", build_pad, &(pad_case){KILN_F64, 0.1}, 0);
    check_same("f16 zero", build_pad, &(pad_case){KILN_F16, 0}, f16 ? 0 : 3);
    check_same("f16 1.5", build_pad, &(pad_case){KILN_F16, 1.5}, f16 ? 0 : 3);
}

/* ---- slice_scatter ---- */

static int build_slice_scatter(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *g = leaf(ctx, dt, 3, (int64_t[]){2, 3, 4}, 5);
    out[0] = kiln__slice_scatter(ctx, g, 3, (int64_t[]){2, 8, 4}, 1, 1, 2);
    out[1] = kiln__slice_scatter(ctx, g, 3, (int64_t[]){2, 3, 9}, 2, 5, 1);
    kiln_tensor *gt = kiln_transpose(ctx, g, 1, 2); /* [2, 4, 3], strided */
    out[2] = raw_node(ctx, KILN_OP_SLICE_SCATTER, dt, 3, (int64_t[]){5, 4, 3}, 1, &gt);
    if (out[2]) {
        out[2]->ip[0] = 0;
        out[2]->ip[1] = 1;
        out[2]->ip[2] = 3;
    }
    return out[0] && out[1] && out[2] ? 3 : 0;
}

KT_TEST(vk_slice_scatter) {
    bool f16 = vk_f16(vk_backend());
    kiln_dtype dts[] = {KILN_F32, KILN_I32, KILN_F64, KILN_BF16};
    for (int i = 0; i < 4; i++)
        check_same(kiln_dtype_name(dts[i]), build_slice_scatter, &dts[i], kiln_dtype_size(dts[i]) == 2 && !f16 ? 3 : 0);
}

/* ---- get_rows, scatter_add_rows, one_hot ---- */

/* Indices in [0, v) with repeats, plus (bad) one out-of-range index of each sign when bad. */
static kiln_tensor *indices(kiln_ctx *ctx, int ndim, const int64_t *shape, int64_t v, bool bad) {
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_I32, ndim, shape);
    if (!t) return NULL;
    int32_t *iv = kiln_tensor_data(t);
    int64_t n = kiln_tensor_numel(t);
    for (int64_t p = 0; p < n; p++) iv[p] = (int32_t)((p * 7 + p / 5) % v);
    if (bad) {
        iv[1] = -1;
        iv[n - 1] = (int32_t)v;
    }
    return t;
}

static int build_get_rows(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *table = leaf(ctx, dt, 2, (int64_t[]){37, 300}, 6);
    kiln_tensor *idx = indices(ctx, 2, (int64_t[]){4, 9}, 37, false);
    out[0] = kiln_get_rows(ctx, table, idx);
    /* a transposed table, by hand, where the device runs it */
    if (dt == KILN_BF16) return out[0] ? 1 : 0;
    kiln_tensor *t2 = leaf(ctx, dt, 2, (int64_t[]){5, 11}, 7), *tt = kiln_transpose(ctx, t2, 0, 1);
    kiln_tensor *i2 = indices(ctx, 1, (int64_t[]){13}, 11, false);
    out[1] = raw_node(ctx, KILN_OP_GET_ROWS, KILN_F32, 2, (int64_t[]){13, 5}, 2, (kiln_tensor *[]){tt, i2});
    return out[0] && out[1] ? 2 : 0;
}

KT_TEST(vk_get_rows) {
    bool f16 = vk_f16(vk_backend());
    kiln_dtype f32 = KILN_F32, h = KILN_F16, bf = KILN_BF16;
    check_same("f32", build_get_rows, &f32, 0);
    check_same("f16", build_get_rows, &h, f16 ? 0 : 2);
    check_same("bf16 (on the CPU)", build_get_rows, &bf, 1);
}

/* Out-of-range indices fail the compute on the CPU; on the device they read a zero row. */
KT_TEST(vk_get_rows_out_of_range) {
    kiln_backend *vk = vk_backend();
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    kiln_tensor *table = leaf(ctx, KILN_F32, 2, (int64_t[]){6, 3}, 1);
    kiln_tensor *idx = indices(ctx, 1, (int64_t[]){5}, 6, true), *y = kiln_get_rows(ctx, table, idx);
    KT_NOTNULL(y);
    KT_OK(mt_compute(ctx, y));
    float v[15], tv[18];
    KT_OK(kiln_tensor_get_f32(y, v, 15));
    KT_OK(kiln_tensor_get_f32(table, tv, 18));
    const int32_t *iv = kiln_tensor_data(idx);
    for (int p = 0; p < 5; p++)
        for (int j = 0; j < 3; j++) {
            float want = iv[p] >= 0 && iv[p] < 6 ? tv[iv[p] * 3 + j] : 0.0f;
            KT_CHECK(v[p * 3 + j] == want, "row %d col %d: %g, want %g", p, j, v[p * 3 + j], want);
        }
    kiln_ctx_free(ctx);
}

typedef struct scatter_case {
    int64_t v, d, n;
} scatter_case;

static int build_scatter(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    const scatter_case *c = arg;
    kiln_tensor *rows = leaf(ctx, KILN_F32, 2, (int64_t[]){c->n, c->d}, 8);
    kiln_tensor *idx = indices(ctx, 1, &c->n, c->v, false);
    out[0] = raw_node(ctx, KILN_OP_SCATTER_ADD_ROWS, KILN_F32, 2, (int64_t[]){c->v, c->d}, 2,
                      (kiln_tensor *[]){rows, idx});
    if (out[0]) out[0]->ip[0] = c->v;
    return out[0] ? 1 : 0;
}

KT_TEST(vk_scatter_add_rows) {
    /* the sums are added in the CPU's order: the same bits */
    check_same("37 x 300 from 600 rows", build_scatter, &(scatter_case){37, 300, 600}, 0);
    check_same("5 x 3 from 1000 rows", build_scatter, &(scatter_case){5, 3, 1000}, 0);
    check_same("300 x 1 from 7 rows", build_scatter, &(scatter_case){300, 1, 7}, 0);
}

static int build_one_hot(kiln_ctx *ctx, kiln_tensor **out, const void *arg) {
    kiln_dtype dt = *(const kiln_dtype *)arg;
    kiln_tensor *labels = indices(ctx, 2, (int64_t[]){3, 7}, 10, true);
    out[0] = kiln_one_hot(ctx, labels, 10, dt);
    out[1] = kiln_one_hot(ctx, labels, 4, dt);
    return out[0] && out[1] ? 2 : 0;
}

KT_TEST(vk_one_hot) {
    bool f16 = vk_f16(vk_backend());
    kiln_dtype f32 = KILN_F32, h = KILN_F16;
    check_same("f32", build_one_hot, &f32, 0);
    check_same("f16", build_one_hot, &h, f16 ? 0 : 2);
}

/* ---- gradients through kiln_graph_backward ---- */

static kiln_tensor *param(kiln_ctx *ctx, const char *name, int ndim, const int64_t *shape, int seed) {
    kiln_tensor *p = kiln_param(ctx, name, KILN_F32, ndim, shape);
    if (!p) return NULL;
    int64_t n = kiln_tensor_numel(p);
    float *v = kiln_tensor_data(p);
    for (int64_t i = 0; i < n; i++) v[i] = (float)mt_val(i, seed);
    return p;
}

/* Case which: concat, pad or get_rows of parameters; their loss
 * sum(y * R) for fixed R is returned and the parameters listed in ps. */
static kiln_tensor *grad_case(kiln_ctx *ctx, int which, kiln_tensor **ps, int *np) {
    kiln_tensor *a = param(ctx, "a", 2, (int64_t[]){3, 4}, 1), *b = param(ctx, "b", 2, (int64_t[]){3, 2}, 2);
    kiln_tensor *table = param(ctx, "table", 2, (int64_t[]){9, 5}, 3), *y;
    if (which == 0) {
        y = kiln_concat(ctx, (kiln_tensor *[]){a, b, a}, 3, 1);
        ps[0] = a, ps[1] = b, *np = 2;
    } else if (which == 1) {
        y = kiln_pad(ctx, a, (int64_t[]){1, 0, 2, 3}, 0.5);
        ps[0] = a, *np = 1;
    } else {
        y = kiln_get_rows(ctx, table, indices(ctx, 2, (int64_t[]){4, 6}, 9, false));
        ps[0] = table, *np = 1;
    }
    if (!y) return NULL;
    return kiln_sum_all(ctx, kiln_mul(ctx, y, leaf(ctx, KILN_F32, y->ndim, y->shape, 99)));
}

/* The gradients agree bit for bit (two computes, so they accumulate), and
 * every node of these families in the backward graph is claimed (the
 * loss's mul and sum belong to other families and may fall back). */
static void check_grads(const char *what, int which) {
    kiln_backend *vk = vk_backend();
    int64_t msgs = kiln_backend_validation_messages(vk);
    kiln_ctx *ctx[2] = {kiln_ctx_new(), kiln_ctx_new()};
    KT_OK(kiln_ctx_set_backend(ctx[1], vk));
    kiln_tensor *ps[2][2];
    int np = 0;
    for (int k = 0; k < 2; k++) {
        kiln_tensor *loss = grad_case(ctx[k], which, ps[k], &np);
        kiln_graph *g = kiln_graph_new(ctx[k]);
        KT_REQUIRE(loss && g, "%s: %s", what, kiln_last_error());
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_graph_compute(g));
        for (int i = 0; k == 1 && i < kiln_graph_n_nodes(g); i++) {
            kiln_tensor *t = kiln_graph_node(g, i);
            switch (t->op) {
            case KILN_OP_CONCAT: case KILN_OP_PAD: case KILN_OP_SLICE_SCATTER: case KILN_OP_GET_ROWS:
            case KILN_OP_SCATTER_ADD_ROWS: case KILN_OP_ONE_HOT: case KILN_OP_ACC_GRAD:
                KT_CHECK(claimed(vk, t), "%s: node %d (%s) is not claimed", what, i, kiln_op_name_of(t));
                break;
            default: break;
            }
        }
    }
    for (int i = 0; i < np; i++) {
        int64_t n = kiln_tensor_numel(ps[0][i]);
        float a[64], b[64];
        KT_REQUIRE(n <= 64, "case too large");
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(ps[1][i]), a, n));
        KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(ps[0][i]), b, n));
        for (int64_t j = 0; j < n; j++)
            KT_CHECK(memcmp(&a[j], &b[j], sizeof a[j]) == 0, "%s: grad of %s[%lld]: Vulkan %.9g, CPU %.9g", what,
                     kiln_tensor_name(ps[0][i]), (long long)j, a[j], b[j]);
    }
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs, "%s: validation messages", what);
    kiln_ctx_free(ctx[0]);
    kiln_ctx_free(ctx[1]);
}

KT_TEST(vk_concat_backward) { check_grads("concat", 0); }
KT_TEST(vk_pad_backward) { check_grads("pad", 1); }
KT_TEST(vk_get_rows_backward) { check_grads("get_rows", 2); }

/* ---- optimizer steps ---- */

typedef struct optim_case {
    const char *what;
    int kind; /* 0 SGD, 1 Adam, 2 AdamW */
    kiln_sgd_config sgd;
    kiln_adam_config adam;
} optim_case;

static kiln_optim *make_optim(kiln_ctx *ctx, const optim_case *c) {
    if (c->kind == 0) return kiln_sgd_new(ctx, &c->sgd);
    return c->kind == 1 ? kiln_adam_new(ctx, &c->adam) : kiln_adamw_new(ctx, &c->adam);
}

static const optim_case optim_cases[] = {
    /* name, kind, SGD: lr, momentum, dampening, weight_decay, nesterov; Adam: lr, betas, eps, weight_decay, amsgrad */
    {"sgd", 0, {0.1f, 0, 0, 0, false}, {0, 0, 0, 0, 0, false}},
    {"sgd momentum weight decay", 0, {0.05f, 0.9f, 0, 0.01f, false}, {0, 0, 0, 0, 0, false}},
    {"sgd nesterov", 0, {0.05f, 0.9f, 0, 0, true}, {0, 0, 0, 0, 0, false}},
    {"sgd dampening", 0, {0.05f, 0.8f, 0.3f, 0.02f, false}, {0, 0, 0, 0, 0, false}},
    {"adam", 1, {0, 0, 0, 0, false}, {0.01f, 0.9f, 0.999f, 1e-8f, 0, false}},
    {"adam L2 amsgrad", 1, {0, 0, 0, 0, false}, {0.01f, 0.8f, 0.99f, 1e-6f, 0.05f, true}},
    {"adamw", 2, {0, 0, 0, 0, false}, {0.01f, 0.9f, 0.999f, 1e-8f, 0.01f, false}},
    {"adamw amsgrad", 2, {0, 0, 0, 0, false}, {0.003f, 0.9f, 0.95f, 1e-8f, 0.1f, true}},
};
#define N_OPTIM_CASES (int)(sizeof optim_cases / sizeof optim_cases[0])

/* Compare the parameters (and the state: every source of every step node
 * but the gradient and the hyper leaf) of two optimizers; exact says
 * whether the bits must agree, else 1e-5 relative. */
static void compare_optims(const char *what, int step, kiln_optim *vo, kiln_optim *co, bool exact) {
    for (int i = 0; i < co->n_params; i++) {
        kiln_tensor *vn = vo->nodes[i], *cn = co->nodes[i];
        for (int k = 0; k < cn->nsrc - 1; k++) {
            if (k == 1) continue;
            int64_t n = kiln_tensor_numel(cn->src[k]), worst = 0;
            double *a = malloc((size_t)n * sizeof *a), *b = malloc((size_t)n * sizeof *b);
            KT_REQUIRE(a && b, "out of memory");
            KT_OK(kiln_tensor_get_f64(vn->src[k], a, n));
            KT_OK(kiln_tensor_get_f64(cn->src[k], b, n));
            int64_t differ = 0;
            for (int64_t j = 0; j < n; j++) differ += a[j] != b[j];
            double e = kt_rel_err(a, b, n, 1e-9, 1e-5, &worst);
            KT_CHECK(exact ? differ == 0 : e <= 1, "%s step %d: %s: %lld of %lld differ; [%lld] Vulkan %.9g, CPU %.9g",
                     what, step, kiln_tensor_name(cn->src[k]), (long long)differ, (long long)n, (long long)worst,
                     a[worst], b[worst]);
            free(a);
            free(b);
        }
    }
}

/* Steps on gradients set from the host (so only the step graph runs):
 * with a learning-rate change between steps, and from a late step number
 * (the bias corrections at large t). The steps give the CPU's bits. */
KT_TEST(vk_optim_steps) {
    kiln_backend *vk = vk_backend();
    int64_t msgs = kiln_backend_validation_messages(vk);
    for (int c = 0; c < N_OPTIM_CASES; c++) {
        const optim_case *oc = &optim_cases[c];
        for (int late = 0; late < 2; late++) {
            kiln_ctx *ctx[2] = {kiln_ctx_new(), kiln_ctx_new()};
            KT_OK(kiln_ctx_set_backend(ctx[1], vk));
            kiln_optim *opt[2];
            for (int k = 0; k < 2; k++) {
                KT_NOTNULL(param(ctx[k], "w", 2, (int64_t[]){7, 300}, 1));
                KT_NOTNULL(param(ctx[k], "b", 1, (int64_t[]){5}, 2));
                KT_NOTNULL(opt[k] = make_optim(ctx[k], oc));
                if (late) opt[k]->steps = 12345;
            }
            for (int s = 0; s < 5; s++) {
                for (int k = 0; k < 2; k++) {
                    if (s == 3) KT_OK(kiln_optim_set_lr(opt[k], kiln_optim_lr(opt[k]) * 0.5f));
                    for (int i = 0; i < opt[k]->n_params; i++) {
                        kiln_tensor *g = kiln_tensor_grad(opt[k]->params[i]);
                        int64_t n = kiln_tensor_numel(g);
                        float *v = malloc((size_t)n * sizeof *v);
                        KT_REQUIRE(v, "out of memory");
                        for (int64_t j = 0; j < n; j++) v[j] = (float)(mt_val(j, 10 * s + i) * (j % 3 ? 1 : 1e-3));
                        KT_OK(kiln_tensor_set_f32(g, v, n));
                        free(v);
                    }
                    KT_OK(kiln_optim_step(opt[k]));
                }
                compare_optims(oc->what, s, opt[1], opt[0], true);
            }
            kiln_graph_stats st = kiln_graph_get_stats(opt[1]->graph);
            KT_CHECK(st.nodes_fallback == 0 && st.nodes_on_backend == 5 * opt[1]->n_params,
                     "%s: %lld step nodes on the device, %lld on the CPU", oc->what, (long long)st.nodes_on_backend,
                     (long long)st.nodes_fallback);
            kiln_ctx_free(ctx[0]);
            kiln_ctx_free(ctx[1]);
        }
    }
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs, "validation messages");
}

/* A linear model y = x w^T + b fit by mse, trained 5 steps on each backend
 * from the same seeds: the parameters agree to 1e-5 relative (the training
 * graph's own kernels round as they may). */
KT_TEST(vk_optim_train_linear) {
    kiln_backend *vk = vk_backend();
    int64_t msgs = kiln_backend_validation_messages(vk);
    for (int c = 0; c < N_OPTIM_CASES; c++) {
        const optim_case *oc = &optim_cases[c];
        kiln_ctx *ctx[2] = {kiln_ctx_new(), kiln_ctx_new()};
        KT_OK(kiln_ctx_set_backend(ctx[1], vk));
        kiln_optim *opt[2];
        kiln_graph *g[2];
        for (int k = 0; k < 2; k++) {
            kiln_tensor *x = leaf(ctx[k], KILN_F32, 2, (int64_t[]){16, 4}, 3);
            kiln_tensor *y = leaf(ctx[k], KILN_F32, 2, (int64_t[]){16, 3}, 4);
            kiln_tensor *w = param(ctx[k], "w", 2, (int64_t[]){3, 4}, 1), *b = param(ctx[k], "b", 1, (int64_t[]){3}, 2);
            kiln_tensor *loss = kiln_mse(ctx[k], kiln_linear(ctx[k], x, w, b), y);
            g[k] = kiln_graph_new(ctx[k]);
            KT_REQUIRE(loss && g[k], "%s: %s", oc->what, kiln_last_error());
            KT_OK(kiln_graph_add(g[k], loss));
            KT_OK(kiln_graph_backward(g[k], loss));
            KT_NOTNULL(opt[k] = make_optim(ctx[k], oc));
        }
        for (int s = 0; s < 5; s++)
            for (int k = 0; k < 2; k++) {
                KT_OK(kiln_graph_compute(g[k]));
                KT_OK(kiln_optim_step(opt[k]));
            }
        compare_optims(oc->what, 5, opt[1], opt[0], false);
        kiln_graph_stats st = kiln_graph_get_stats(opt[1]->graph);
        KT_CHECK(st.nodes_fallback == 0, "%s: %lld step nodes on the CPU", oc->what, (long long)st.nodes_fallback);
        kiln_ctx_free(ctx[0]);
        kiln_ctx_free(ctx[1]);
    }
    KT_CHECK(kiln_backend_validation_messages(vk) == msgs, "validation messages");
}

#endif /* KILN_VULKAN */
