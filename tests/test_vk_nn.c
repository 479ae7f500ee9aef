/* test_vk_nn.c — the Vulkan kernels of the fused nn layers (softmax,
 * log_softmax, layer_norm, rms_norm, rope, cross_entropy, attention and
 * their fused backward ops) against the CPU backend on the same inputs:
 * the forward values, and the gradients kiln_graph_backward derives of
 * sum(out * fixed random weights). Odd sizes (not multiples of any
 * workgroup or row-group width), causal masks on and off, rows the mask
 * hides entirely, grouped-query heads, ignored labels. Every node of
 * these ops must run on the device, and the validation layer must stay
 * silent. */
#include "backend.h"
#include "kt_device.h"
#include "test_nn_util.h"

#include <stdlib.h>
#include <string.h>

#define VKT_MAX_IN 4

/* One input of a case: a float parameter (randn, gradient compared) or an
 * i32 leaf with given values. */
typedef struct vkt_input {
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    const int32_t *ivalues; /* non-NULL: an i32 leaf */
} vkt_input;

typedef kiln_tensor *(*vkt_build)(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg);

typedef struct vkt_result {
    double *y, *packed;            /* forward values (packed: src of the attention view, or NULL) */
    double *grad[VKT_MAX_IN];      /* gradients of the float inputs */
    int64_t ny, npacked, ngrad[VKT_MAX_IN];
} vkt_result;

static void result_free(vkt_result *r) {
    free(r->y);
    free(r->packed);
    for (int i = 0; i < VKT_MAX_IN; i++) free(r->grad[i]);
}

/* The ops this file's kernels claim. */
static bool is_nn_op(kiln_op op) {
    switch (op) {
    case KILN_OP_SOFTMAX: case KILN_OP_LOG_SOFTMAX: case KILN_OP_SOFTMAX_GRAD:
    case KILN_OP_LAYER_NORM: case KILN_OP_LAYER_NORM_GRAD: case KILN_OP_RMS_NORM: case KILN_OP_RMS_NORM_GRAD:
    case KILN_OP_ROPE: case KILN_OP_CROSS_ENTROPY: case KILN_OP_CROSS_ENTROPY_GRAD:
    case KILN_OP_ATTENTION: case KILN_OP_ATTENTION_GRAD:
        return true;
    default:
        return false;
    }
}

/* The attention result is a view of the packed [O | L] node: that node. */
static kiln_tensor *packed_src(kiln_tensor *y) {
    for (kiln_tensor *t = y; t && t->nsrc > 0; t = t->src[0])
        if (t->op == KILN_OP_ATTENTION) return t;
    return NULL;
}

/* Build the case on backend b (NULL: CPU), compute forward and backward
 * of sum(y * w), and read y and the inputs' gradients. On the device,
 * every nn node must be claimed and nothing else may fall back either. */
static bool run_case(kiln_backend *b, const char *what, vkt_build build, const void *arg, int nin,
                     const vkt_input *ins, vkt_result *r) {
    memset(r, 0, sizeof *r);
    kiln_ctx *ctx = kiln_ctx_new();
    bool ok = false;
    kiln_tensor *in[VKT_MAX_IN] = {0};
    if (b && kiln_ctx_set_backend(ctx, b)) goto done;
    for (int i = 0; i < nin; i++) {
        if (ins[i].ivalues) {
            in[i] = kiln_tensor_new(ctx, KILN_I32, ins[i].ndim, ins[i].shape);
            if (!in[i] || kiln_tensor_set_i32(in[i], ins[i].ivalues, kiln_tensor_numel(in[i]))) goto done;
        } else {
            char name[16];
            snprintf(name, sizeof name, "in%d", i);
            in[i] = kiln_param(ctx, name, KILN_F32, ins[i].ndim, ins[i].shape);
            if (!in[i] || kiln_tensor_fill_randn(in[i], 100 + (uint64_t)i, 0.0, 1.0)) goto done;
        }
    }
    kiln_tensor *y = build(ctx, in, arg), *packed = y ? packed_src(y) : NULL;
    if (!y) goto done;
    kiln_tensor *w = kiln_tensor_new(ctx, KILN_F32, y->ndim, y->shape);
    if (!w || kiln_tensor_fill_uniform(w, 7, -1.0, 1.0)) goto done;
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, y, w));
    kiln_graph *g = kiln_graph_new(ctx);
    if (!loss || !g || kiln_graph_add(g, y) || (packed && kiln_graph_add(g, packed)) || kiln_graph_add(g, loss) ||
        kiln_graph_backward(g, loss) || kiln_graph_compute(g))
        goto done;
    r->ny = kiln_tensor_numel(y);
    if (!(r->y = nnt_values(y))) goto done;
    if (packed) {
        r->npacked = kiln_tensor_numel(packed);
        if (!(r->packed = nnt_values(packed))) goto done;
    }
    for (int i = 0; i < nin; i++) {
        if (ins[i].ivalues) continue;
        r->ngrad[i] = kiln_tensor_numel(in[i]);
        if (!(r->grad[i] = nnt_values(kiln_tensor_grad(in[i])))) goto done;
    }
    ok = true;
    if (b) {
        int mine = 0;
        for (int i = 0; i < kiln_graph_n_nodes(g); i++) {
            kiln_tensor *t = kiln_graph_node(g, i);
            if (!is_nn_op(t->op)) continue;
            mine++;
            KT_CHECK(b->vt->supports(b, t), "%s: %s not claimed by the device", what, kiln_op_name_of(t));
        }
        KT_CHECK(mine >= 2, "%s: only %d nn nodes in the graph", what, mine);
        kiln_graph_stats st = kiln_graph_get_stats(g);
        KT_CHECK(st.nodes_fallback == 0, "%s: %lld nodes fell back to the CPU (KILN_BACKEND_DEBUG=1 names them)",
                 what, (long long)st.nodes_fallback);
        KT_CHECK(kiln_backend_validation_messages(b) == 0, "%s: %lld validation messages", what,
                 (long long)kiln_backend_validation_messages(b));
    }
done:
    if (!ok) kt_fail(__FILE__, __LINE__, "%s on %s: %s", what, b ? "vulkan" : "cpu", kiln_last_error());
    kiln_ctx_free(ctx);
    return ok;
}

/* The case on the CPU and on Vulkan: values within atol + rtol * |cpu|. */
static void check_case(const char *what, vkt_build build, const void *arg, int nin, const vkt_input *ins,
                       double atol, double rtol) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    vkt_result c, v = {0};
    bool ok = run_case(NULL, what, build, arg, nin, ins, &c) && run_case(vk, what, build, arg, nin, ins, &v);
    if (ok) {
        char buf[160];
        snprintf(buf, sizeof buf, "%s: forward", what);
        nnt_close(buf, v.y, c.y, c.ny, atol, rtol);
        if (c.packed) {
            snprintf(buf, sizeof buf, "%s: packed [O | L]", what);
            nnt_close(buf, v.packed, c.packed, c.npacked, atol, rtol);
        }
        for (int i = 0; i < nin; i++) {
            if (!c.grad[i]) continue;
            snprintf(buf, sizeof buf, "%s: gradient of input %d", what, i);
            nnt_close(buf, v.grad[i], c.grad[i], c.ngrad[i], atol, rtol);
        }
    }
    result_free(&c);
    result_free(&v);
}

#define IN(...) {.ndim = sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t), .shape = {__VA_ARGS__}}

/* ---- softmax, log_softmax ---- */

typedef struct {
    bool log, causal;
} softmax_case;

static kiln_tensor *build_softmax(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const softmax_case *c = arg;
    return c->log ? kiln_log_softmax(ctx, in[0], c->causal) : kiln_softmax(ctx, in[0], c->causal);
}

KT_TEST(vk_nn_softmax) {
    /* rows of 1, 3, 37 (groups of 16), 300 and 2000 (one row per workgroup);
     * [2, 9, 5] causal hides rows 0..3 entirely; rows of 4 and 8 take the
     * vec4 kernels, causal ones masking inside a vec4; rows of 20000 and
     * 20001 (vec4 and not) spread over many lanes */
    static const vkt_input shapes[] = {IN(4, 1),  IN(2, 7, 3), IN(3, 5, 37),  IN(2, 11, 300), IN(3, 2000),
                                       IN(2, 9, 5), IN(2, 6, 4), IN(2, 5, 8), IN(2, 20000), IN(3, 20001)};
    for (int s = 0; s < 10; s++)
        for (int v = 0; v < 4; v++) {
            softmax_case c = {v & 1, (v & 2) != 0};
            char what[96];
            snprintf(what, sizeof what, "%s causal %d shape %d", c.log ? "log_softmax" : "softmax", c.causal, s);
            check_case(what, build_softmax, &c, 1, &shapes[s], 1e-5, 1e-4);
        }
}

/* A contiguous view of rows x cols starting at element off of a flat
 * input: its base is not a multiple of 4 unless off is. */
static kiln_tensor *rows_at(kiln_ctx *ctx, kiln_tensor *flat, int64_t off, int64_t rows, int64_t cols) {
    kiln_tensor *s = kiln_slice(ctx, flat, 0, off, off + rows * cols, 1);
    return s ? kiln_view(ctx, s, 2, (int64_t[]){rows, cols}) : NULL;
}

typedef struct {
    bool log, causal;
    int64_t off, rows, cols;
} softmax_view_case;

static kiln_tensor *build_softmax_view(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const softmax_view_case *c = arg;
    kiln_tensor *x = rows_at(ctx, in[0], c->off, c->rows, c->cols);
    return c->log ? kiln_log_softmax(ctx, x, c->causal) : kiln_softmax(ctx, x, c->causal);
}

KT_TEST(vk_nn_softmax_offset_views) {
    /* inputs starting 1 and 4 elements into their buffer: the scalar
     * kernels from an unaligned base, the vec4 ones from a nonzero one */
    static const int64_t offs[] = {1, 4};
    for (int o = 0; o < 2; o++)
        for (int v = 0; v < 4; v++) {
            softmax_view_case c = {v & 1, (v & 2) != 0, offs[o], 12, 40};
            vkt_input in = IN(offs[o] + 12 * 40 + 3);
            char what[96];
            snprintf(what, sizeof what, "%s causal %d at offset %lld", c.log ? "log_softmax" : "softmax", c.causal,
                     (long long)c.off);
            check_case(what, build_softmax_view, &c, 1, &in, 1e-5, 1e-4);
        }
}

/* ---- layer_norm, rms_norm ---- */

typedef struct {
    bool rms, w, b;
} norm_case;

static kiln_tensor *build_norm(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const norm_case *c = arg;
    kiln_tensor *w = c->w ? in[1] : NULL, *b = c->b ? in[1 + c->w] : NULL;
    /* the input shifted far from 0: the mean must not cancel the spread */
    kiln_tensor *x = kiln_add_scalar(ctx, in[0], 3.0);
    return c->rms ? kiln_rms_norm(ctx, x, w, 1e-5) : kiln_layer_norm(ctx, x, w, b, 1e-5);
}

KT_TEST(vk_nn_norms) {
    /* rows of 1, 33, 300 (vec4, 2 lanes), 1500, 7, 4 and 20000 (vec4,
     * many lanes) */
    static const int64_t xs[][3] = {{5, 3, 1}, {3, 7, 33}, {2, 3, 300}, {1, 3, 1500}, {1, 600, 7}, {2, 5, 4},
                                    {1, 2, 20000}};
    for (int s = 0; s < 7; s++)
        for (int v = 0; v < 6; v++) {
            norm_case c = {v >= 4, v == 1 || v == 2 || v == 5, v == 2 || v == 3};
            vkt_input in[3] = {IN(xs[s][0], xs[s][1], xs[s][2])};
            int n = 1;
            if (c.w) in[n++] = (vkt_input)IN(xs[s][2]);
            if (c.b) in[n++] = (vkt_input)IN(xs[s][2]);
            char what[96];
            snprintf(what, sizeof what, "%s w %d b %d x [%lld, %lld, %lld]", c.rms ? "rms_norm" : "layer_norm", c.w,
                     c.b, (long long)xs[s][0], (long long)xs[s][1], (long long)xs[s][2]);
            /* dw/db sum 1800 rows in another order than the CPU */
            check_case(what, build_norm, &c, n, in, 2e-5, 1e-4);
        }
}

typedef struct {
    bool rms;
    int64_t off, rows, cols;
} norm_view_case;

/* x and w (and b) as views starting off elements into their inputs */
static kiln_tensor *build_norm_view(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const norm_view_case *c = arg;
    kiln_tensor *x = kiln_add_scalar(ctx, rows_at(ctx, in[0], c->off, c->rows, c->cols), 3.0);
    kiln_tensor *w = kiln_slice(ctx, in[1], 0, c->off, c->off + c->cols, 1);
    if (c->rms) return kiln_rms_norm(ctx, x, w, 1e-5);
    return kiln_layer_norm(ctx, x, w, kiln_slice(ctx, in[2], 0, c->off, c->off + c->cols, 1), 1e-5);
}

KT_TEST(vk_nn_norm_offset_views) {
    /* the norm's own x is a fresh node (aligned); w and b start 1 or 4
     * elements into their inputs: the scalar kernels, then vec4 ones */
    static const int64_t offs[] = {1, 4};
    for (int o = 0; o < 2; o++)
        for (int r = 0; r < 2; r++) {
            norm_view_case c = {r, offs[o], 9, 40};
            vkt_input in[3] = {IN(offs[o] + 9 * 40 + 3), IN(offs[o] + 40 + 3), IN(offs[o] + 40 + 3)};
            char what[96];
            snprintf(what, sizeof what, "%s at offset %lld", r ? "rms_norm" : "layer_norm", (long long)c.off);
            check_case(what, build_norm_view, &c, 3 - r, in, 2e-5, 1e-4);
        }
}

/* ---- rope ---- */

typedef struct {
    kiln_rope_mode mode;
    bool pos;
} rope_case;

static kiln_tensor *build_rope(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const rope_case *c = arg;
    return kiln_rope(ctx, in[0], c->pos ? in[1] : NULL, 10000.0, c->mode);
}

KT_TEST(vk_nn_rope) {
    static const int32_t pos[7] = {3, -1, 7, 0, 12, 1000, 29};
    for (int v = 0; v < 8; v++) {
        rope_case c = {v & 1 ? KILN_ROPE_INTERLEAVED : KILN_ROPE_NEOX, (v & 2) != 0};
        vkt_input in[2] = {IN(2, 3, 7, 10), IN(7)};
        if (v & 4) in[0] = (vkt_input)IN(7, 2); /* one pair per row */
        in[1].ivalues = pos;
        char what[64];
        snprintf(what, sizeof what, "rope mode %d pos %d D %lld", (int)c.mode, c.pos,
                 (long long)in[0].shape[in[0].ndim - 1]);
        check_case(what, build_rope, &c, c.pos ? 2 : 1, in, 1e-5, 1e-5);
    }
}

/* ---- cross_entropy ---- */

static kiln_tensor *build_ce(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    return kiln_cross_entropy(ctx, in[0], in[1], *(const int32_t *)arg);
}

KT_TEST(vk_nn_cross_entropy) {
    static const int32_t l13[13] = {3, -100, 0, 9, 9, 4, -100, 1, 2, 8, 7, 6, 5};
    static const int32_t l18[18] = {0, 299, 5, 0, 17, 250, 0, 1, 2, 3, 100, 200, 0, 0, 150, 42, 7, 8};
    static const int32_t none[3] = {-100, -100, -100}, one[1] = {2};
    int32_t ig = -100, ig0 = 0;
    vkt_input a[2] = {IN(13, 10), IN(13)}, b[2] = {IN(6, 3, 300), IN(6, 3)}, c[2] = {IN(3, 4), IN(3)},
              d[2] = {IN(1, 5), IN(1)};
    a[1].ivalues = l13, b[1].ivalues = l18, c[1].ivalues = none, d[1].ivalues = one;
    check_case("cross_entropy [13, 10] some ignored", build_ce, &ig, 2, a, 1e-5, 1e-4);
    check_case("cross_entropy [6, 3, 300]", build_ce, &ig, 2, b, 1e-5, 1e-4);
    check_case("cross_entropy [6, 3, 300] ignore_index 0", build_ce, &ig0, 2, b, 1e-5, 1e-4);
    check_case("cross_entropy all ignored", build_ce, &ig, 2, c, 1e-6, 1e-4);
    check_case("cross_entropy one row", build_ce, &ig, 2, d, 1e-6, 1e-4);
}

/* Labels for `rows` rows of c classes: row r gets (r * 7) % c, except
 * every 5th row and rows [ig_lo, ig_hi) get ignore_index -100, and every
 * 11th row gets a label outside [0, c) when `bad` (-3 or c + 2). */
static int32_t *ce_labels(int64_t rows, int64_t c, int64_t ig_lo, int64_t ig_hi, bool bad) {
    int32_t *l = malloc((size_t)rows * sizeof *l);
    for (int64_t r = 0; l && r < rows; r++) {
        l[r] = (int32_t)((r * 7) % c);
        if (r % 5 == 2 || (r >= ig_lo && r < ig_hi)) l[r] = -100;
        else if (bad && r % 11 == 4) l[r] = r % 2 ? (int32_t)(c + 2) : -3;
    }
    return l;
}

/* The loss sums rows over many workgroups: more rows than one workgroup
 * holds at each row width (C = 7: 1 lane per row, 256 rows a workgroup;
 * C = 41: 2 lanes; C = 300: 4 lanes of vec4), a whole
 * workgroup's rows ignored (rows 256..511 of the first), every row
 * ignored, and a few rows of a long vocabulary (64 lanes per row, more
 * than the usual 32; floats, then vec4). The sum's order is fixed: two
 * runs give the same bits. */
KT_TEST(vk_nn_cross_entropy_many_rows) {
    static const int64_t geo[][4] = {{600, 7, 256, 512}, {700, 41, 0, 0},    {530, 300, 100, 300},
                                     {777, 5, 0, 777},   {3, 16385, 0, 0}, {2, 65540, 0, 0}};
    int32_t ig = -100;
    for (int s = 0; s < 6; s++) {
        const int64_t *g = geo[s];
        int32_t *lab = ce_labels(g[0], g[1], g[2], g[3], false);
        if (!lab) {
            kt_fail(__FILE__, __LINE__, "out of memory");
            return;
        }
        vkt_input in[2] = {IN(g[0], g[1]), IN(g[0])};
        in[1].ivalues = lab;
        char what[96];
        snprintf(what, sizeof what, "cross_entropy [%lld, %lld] ignored [%lld, %lld)", (long long)g[0],
                 (long long)g[1], (long long)g[2], (long long)g[3]);
        check_case(what, build_ce, &ig, 2, in, 1e-5, 1e-5);
        kiln_backend *vk = kt_device("vulkan");
        vkt_result a, b = {0};
        if (vk && run_case(vk, what, build_ce, &ig, 2, in, &a) && run_case(vk, what, build_ce, &ig, 2, in, &b))
            KT_CHECK(memcmp(a.y, b.y, sizeof *a.y) == 0, "%s: two runs give %.9g and %.9g", what, a.y[0], b.y[0]);
        if (vk) {
            result_free(&a);
            result_free(&b);
        }
        free(lab);
    }
}

/* ---- attention ---- */

typedef struct {
    bool causal;
    double scale;
} attn_case;

static kiln_tensor *build_attention(kiln_ctx *ctx, kiln_tensor *const *in, const void *arg) {
    const attn_case *c = arg;
    return kiln_attention(ctx, in[0], in[1], in[2], c->causal, c->scale);
}

KT_TEST(vk_nn_attention) {
    /* B, Hq, Hkv, T, S, D, Dv: grouped heads, T < S, T > S (causal hides
     * the first queries entirely), one query (a decoding step, its own
     * kernel), one key,
     * several blocks of 64 rows, head sizes of every shader variant */
    static const int64_t geo[][7] = {{2, 4, 2, 7, 11, 16, 12}, {1, 3, 1, 13, 5, 8, 8},   {1, 2, 2, 37, 37, 40, 72},
                                     {2, 2, 1, 9, 9, 100, 3},  {1, 2, 1, 6, 10, 130, 20}, {1, 1, 1, 70, 70, 64, 64},
                                     {1, 4, 2, 1, 37, 32, 32}, {2, 2, 2, 5, 1, 4, 4},     {1, 1, 1, 3, 2, 1, 1},
                                     {1, 4, 2, 100, 130, 32, 24}, {1, 2, 1, 150, 90, 12, 20},
                                     /* decoding steps over more keys than a workgroup's 64 invocations */
                                     {1, 4, 2, 1, 200, 64, 64},   {2, 3, 3, 1, 80, 130, 20}, {1, 2, 1, 1, 65, 12, 8}};
    for (int s = 0; s < (int)(sizeof geo / sizeof *geo); s++)
        for (int causal = 0; causal < 2; causal++) {
            const int64_t *g = geo[s];
            attn_case c = {causal != 0, s == 1 ? 0.3 : 0.0};
            vkt_input in[3] = {IN(g[0], g[1], g[3], g[5]), IN(g[0], g[2], g[4], g[5]), IN(g[0], g[2], g[4], g[6])};
            char what[128];
            snprintf(what, sizeof what, "attention B %lld Hq %lld Hkv %lld T %lld S %lld D %lld Dv %lld causal %d",
                     (long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3], (long long)g[4],
                     (long long)g[5], (long long)g[6], causal);
            check_case(what, build_attention, &c, 3, in, 1e-5, 1e-4);
        }
}

/* A label outside [0, C) that is not ignore_index fails the CPU compute; a
 * shader cannot fail, so the device counts such a row as ignored (loss and
 * gradient) and never reads past the row: the result of the same labels
 * with ignore_index in that place. */
KT_TEST(vk_nn_cross_entropy_bad_label_is_ignored) {
    static const int32_t bad[5] = {1, 7, 0, -3, 2}, fixed[5] = {1, -100, 0, -100, 2};
    int32_t ig = -100;
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    /* 5 rows, and 600 rows over several workgroups */
    int32_t *bad600 = ce_labels(600, 9, 0, 0, true), *fixed600 = ce_labels(600, 9, 0, 0, false);
    for (int64_t r = 0; bad600 && fixed600 && r < 600; r++)
        if (bad600[r] != fixed600[r]) fixed600[r] = -100;
    for (int s = 0; s < 2 && bad600 && fixed600; s++) {
        vkt_input a[2] = {IN(5, 4), IN(5)}, b[2] = {IN(5, 4), IN(5)};
        a[1].ivalues = bad, b[1].ivalues = fixed;
        if (s) {
            a[0] = (vkt_input)IN(600, 9), a[1] = (vkt_input)IN(600), b[0] = a[0], b[1] = a[1];
            a[1].ivalues = bad600, b[1].ivalues = fixed600;
        }
        vkt_result got, want = {0};
        if (run_case(vk, "cross_entropy bad labels", build_ce, &ig, 2, a, &got) &&
            run_case(NULL, "cross_entropy ignored labels", build_ce, &ig, 2, b, &want)) {
            nnt_close("loss", got.y, want.y, 1, 1e-6, 1e-5);
            nnt_close("gradient", got.grad[0], want.grad[0], want.ngrad[0], 1e-6, 1e-5);
        }
        result_free(&got);
        result_free(&want);
    }
    KT_CHECK(bad600 && fixed600, "out of memory");
    free(bad600);
    free(fixed600);
}
