/* test_zero_size.c — tensors with a dimension of size 0, valid as in
 * PyTorch: creation and reading, views (reshape with -1, slice, permute,
 * broadcast), element-wise ops, reductions with their identities (sum 0,
 * mean NaN; max, min and argmax of an empty axis refused, as torch.amax
 * refuses), a product over K = 0 (zeros), the nn layers, gradients
 * through all of them, an optimizer step, and the files that hold them
 * (safetensors, GGUF, checkpoints). Values against torch where the
 * fixture has them (tests/fixtures/numerics.txt). */
#include "test_nn_util.h"

#include <unistd.h>

#define NUMERICS "tests/fixtures/numerics.txt"

static const char *const X_ONLY[] = {"x", NULL}, *const X_W[] = {"x", "w", NULL};

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

/* The shape of t is want (ndim dims). */
static bool shape_is(const kiln_tensor *t, int ndim, const int64_t *want) {
    if (!t || kiln_tensor_ndim(t) != ndim) return false;
    for (int i = 0; i < ndim; i++)
        if (kiln_tensor_dim(t, i) != want[i]) return false;
    return true;
}
#define SHAPE_IS(t, ...) shape_is(t, (int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__})

KT_TEST(zero_size_create_read_fill) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = kiln_tensor_new(ctx, KILN_F32, 2, (int64_t[]){4, 0});
    KT_NOTNULL(t);
    KT_CHECK(kiln_tensor_numel(t) == 0 && kiln_tensor_nbytes(t) == 0, "numel %lld, nbytes %zu",
             (long long)kiln_tensor_numel(t), kiln_tensor_nbytes(t));
    KT_NOTNULL(kiln_new_3d(ctx, KILN_F64, 0, 0, 3));
    KT_NOTNULL(kiln_new_1d(ctx, KILN_I32, 0));
    KT_NOTNULL(kiln_tensor_new(ctx, KILN_Q8_0, 2, (int64_t[]){0, 32}));
    KT_OK(kiln_tensor_fill(t, 1.0));
    KT_OK(kiln_tensor_fill_randn(t, 1, 0, 1));
    KT_OK(kiln_tensor_set_f32(t, NULL, 0));
    KT_OK(kiln_tensor_get_f32(t, NULL, 0));
    float buf[1];
    KT_OK(kiln_tensor_get_f64(t, (double *)buf, 0));
    kiln_clear_error();
    double v = kiln_tensor_item(t);
    KT_CHECK(isnan(v) && kiln_last_status() == KILN_ERR_SHAPE && strstr(kiln_last_error(), "kiln_tensor_item"),
             "item of an empty tensor: %g, %s", v, kiln_last_error());
    KT_NOTNULL(kiln_param(ctx, "empty", KILN_F32, 2, (int64_t[]){0, 3}));
    /* negative dims, and more than 2^40 elements among the nonzero dims, stay refused */
    KT_EXPECT_ERR(kiln_new_2d(ctx, KILN_F32, -1, 3), KILN_ERR_SHAPE, "kiln_tensor_new");
    KT_EXPECT_ERR(kiln_new_3d(ctx, KILN_F32, 0, (int64_t)1 << 30, (int64_t)1 << 30), KILN_ERR_SHAPE, "kiln_tensor_new");
    kiln_ctx_free(ctx);
}

KT_TEST(zero_size_views) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *e = kiln_new_2d(ctx, KILN_F32, 0, 3), *x = kiln_new_2d(ctx, KILN_F32, 4, 3);
    KT_CHECK(SHAPE_IS(kiln_reshape(ctx, e, 1, (int64_t[]){-1}), 0), "reshape [0, 3] to [-1]");
    KT_CHECK(SHAPE_IS(kiln_reshape(ctx, e, 2, (int64_t[]){3, -1}), 3, 0), "reshape [0, 3] to [3, -1]");
    KT_CHECK(SHAPE_IS(kiln_reshape(ctx, e, 3, (int64_t[]){2, 0, 5}), 2, 0, 5), "reshape [0, 3] to [2, 0, 5]");
    /* torch: "the unspecified dimension size -1 can be any value and is ambiguous" */
    KT_EXPECT_ERR(kiln_reshape(ctx, e, 2, (int64_t[]){0, -1}), KILN_ERR_SHAPE, "ambiguous");
    KT_EXPECT_ERR(kiln_reshape(ctx, x, 2, (int64_t[]){0, -1}), KILN_ERR_SHAPE, "kiln_reshape");
    KT_CHECK(SHAPE_IS(kiln_view(ctx, e, 2, (int64_t[]){3, 0}), 3, 0), "view");
    KT_CHECK(SHAPE_IS(kiln_flatten(ctx, kiln_new_3d(ctx, KILN_F32, 2, 0, 5), 1), 2, 0), "flatten");
    KT_CHECK(SHAPE_IS(kiln_transpose(ctx, e, 0, 1), 3, 0), "transpose");
    KT_CHECK(SHAPE_IS(kiln_slice(ctx, x, 0, 2, 2, 1), 0, 3), "x[2:2]");
    KT_CHECK(SHAPE_IS(kiln_slice(ctx, x, 1, 3, 100, 1), 4, 0), "x[:, 3:100]");
    KT_CHECK(SHAPE_IS(kiln_slice(ctx, e, 1, 0, 2, 1), 0, 2), "e[:, 0:2]");
    KT_CHECK(SHAPE_IS(kiln_broadcast_to(ctx, kiln_new_2d(ctx, KILN_F32, 1, 3), 2, (int64_t[]){0, 3}), 0, 3),
             "[1, 3] broadcast to [0, 3]");
    KT_CHECK(SHAPE_IS(kiln_broadcast_to(ctx, e, 3, (int64_t[]){2, 0, 3}), 2, 0, 3), "[0, 3] broadcast to [2, 0, 3]");
    KT_EXPECT_ERR(kiln_broadcast_to(ctx, e, 2, (int64_t[]){2, 3}), KILN_ERR_SHAPE, "kiln_broadcast_to");
    KT_CHECK(SHAPE_IS(kiln_repeat(ctx, x, (int64_t[]){0, 2}), 0, 6), "repeat by 0");
    KT_CHECK(SHAPE_IS(kiln_contiguous(ctx, kiln_transpose(ctx, e, 0, 1)), 3, 0), "contiguous");
    kiln_tensor *s = kiln_slice(ctx, x, 0, 1, 1, 1);
    KT_NOTNULL(s);
    KT_OK(compute(ctx, kiln_contiguous(ctx, kiln_transpose(ctx, s, 0, 1))));
    kiln_ctx_free(ctx);
}

static kiln_tensor *build_relu(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_relu(ctx, in[0]);
}
static kiln_tensor *build_reduce(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    bool mean = !strncmp(c->name, "mean", 4);
    if (fx_param(c, "axis", -1) < 0) return mean ? kiln_mean_all(ctx, in[0]) : kiln_sum_all(ctx, in[0]);
    return mean ? kiln_mean(ctx, in[0], 0, false) : kiln_sum(ctx, in[0], 0, false);
}
static kiln_tensor *build_matmul(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_matmul(ctx, in[0], in[1]);
}
static kiln_tensor *build_log_softmax(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_log_softmax(ctx, in[0], false);
}
static kiln_tensor *build_concat(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_concat(ctx, in, 2, 0);
}
static kiln_tensor *build_pad(kiln_ctx *ctx, const fx_case *c, kiln_tensor *const *in) {
    (void)c;
    return kiln_pad(ctx, in[0], (int64_t[]){1, 1, 0, 0}, 0.5);
}

/* torch's values and gradients, f64 and f32 */
KT_TEST(zero_size_fixtures) {
    const struct {
        const char *name;
        const char *const *in;
        nnt_build build;
    } cases[] = {
        {"sum_empty_axis", X_ONLY, build_reduce}, {"mean_empty_axis", X_ONLY, build_reduce},
        {"sum_all_empty", X_ONLY, build_reduce},  {"mean_all_empty", X_ONLY, build_reduce},
        {"matmul_k0", X_W, build_matmul},         {"relu_empty", X_ONLY, build_relu},
        {"log_softmax_empty_rows", X_ONLY, build_log_softmax},
        {"concat_empty", X_W, build_concat},      {"pad_empty", X_ONLY, build_pad},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        nnt_fixture(NUMERICS, cases[i].name, cases[i].in, cases[i].build, KILN_F64, 0, 1e-300);
        nnt_fixture(NUMERICS, cases[i].name, cases[i].in, cases[i].build, KILN_F32, 0, 1e-300);
    }
}

KT_TEST(zero_size_elementwise_and_reductions) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *e = kiln_new_2d(ctx, KILN_F32, 0, 3), *r = kiln_new_1d(ctx, KILN_F32, 3);
    kiln_tensor *ys[] = {kiln_add(ctx, e, r), kiln_mul(ctx, e, kiln_scalar(ctx, KILN_F32, 2)),
                         kiln_exp(ctx, kiln_cast(ctx, e, KILN_F16)), kiln_cmp(ctx, e, r, KILN_CMP_LT),
                         kiln_where(ctx, e, r, e), kiln_dropout(ctx, e, 0.5, 1),
                         kiln_max(ctx, e, 1, false), kiln_argmax(ctx, e, 1, true), kiln_softmax(ctx, e, false),
                         kiln_softmax(ctx, kiln_new_2d(ctx, KILN_F32, 3, 0), false)};
    for (size_t i = 0; i < sizeof ys / sizeof *ys; i++) {
        KT_NOTNULL(ys[i]);
        KT_CHECK(kiln_tensor_numel(ys[i]) == 0, "result %zu has %lld elements", i, (long long)kiln_tensor_numel(ys[i]));
        KT_OK(compute(ctx, ys[i]));
    }
    KT_EXPECT_ERR(kiln_add(ctx, e, kiln_new_2d(ctx, KILN_F32, 2, 3)), KILN_ERR_SHAPE, "do not broadcast");
    /* max, min and argmax have no value over an empty axis (torch.amax raises) */
    KT_EXPECT_ERR(kiln_max(ctx, e, 0, false), KILN_ERR_SHAPE, "kiln_max: axis 0 of [0, 3] is empty");
    KT_EXPECT_ERR(kiln_min(ctx, e, 0, true), KILN_ERR_SHAPE, "kiln_min");
    KT_EXPECT_ERR(kiln_argmax(ctx, e, 0, false), KILN_ERR_SHAPE, "kiln_argmax");
    KT_EXPECT_ERR(kiln_max_all(ctx, e), KILN_ERR_SHAPE, "kiln_max_all: [0, 3] has no elements");
    KT_EXPECT_ERR(kiln_min_all(ctx, e), KILN_ERR_SHAPE, "kiln_min_all");
    kiln_ctx_free(ctx);
}

/* A linear layer on an empty batch: no output, weight gradients of zeros
 * (products over K = 0); an empty embedding lookup gives zero rows. */
KT_TEST(zero_size_gradients) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){3, 4}), *b = kiln_param(ctx, "b", KILN_F32, 1,
                                                                                           (int64_t[]){3});
    kiln_tensor *emb = kiln_param(ctx, "emb", KILN_F32, 2, (int64_t[]){5, 4});
    KT_OK(kiln_tensor_fill(w, 1.0));
    KT_OK(kiln_tensor_fill(emb, 1.0));
    kiln_tensor *x = kiln_get_rows(ctx, emb, kiln_new_1d(ctx, KILN_I32, 0)); /* [0, 4] */
    kiln_tensor *y = kiln_relu(ctx, kiln_linear(ctx, x, w, b));
    KT_CHECK(SHAPE_IS(y, 0, 3), "linear of an empty batch");
    kiln_tensor *ln = kiln_layer_norm(ctx, y, NULL, b, 1e-5);
    kiln_tensor *labels = kiln_new_1d(ctx, KILN_I32, 0);
    kiln_tensor *loss = kiln_add(ctx, kiln_cross_entropy(ctx, ln, labels, -100), kiln_mean_all(ctx, kiln_mul(ctx, y, y)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    for (int k = 0; k < 2; k++) { /* twice: gradients accumulate, the plan is reused */
        KT_OK(kiln_tensor_fill(kiln_tensor_grad(w), 7.0));
        KT_OK(kiln_graph_compute(g));
    }
    double lv = kiln_tensor_item(loss), gw[12], gb[3], ge[20];
    KT_CHECK(isnan(lv), "cross_entropy of no rows (0) + mean of nothing (NaN) = %g, want NaN", lv);
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gw, 12));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(b), gb, 3));
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(emb), ge, 20));
    for (int i = 0; i < 12; i++) KT_CHECK(gw[i] == 7.0, "grad w[%d] = %g, want 7 (7 + zeros)", i, gw[i]);
    for (int i = 0; i < 3; i++) KT_CHECK(gb[i] == 0.0, "grad b[%d] = %g, want 0", i, gb[i]);
    for (int i = 0; i < 20; i++) KT_CHECK(ge[i] == 0.0, "grad emb[%d] = %g, want 0", i, ge[i]);
    kiln_ctx_free(ctx);
}

KT_TEST(zero_size_layers) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, 0, 2, 5, 5), *w = kiln_param(ctx, "w", KILN_F32, 4,
                                                                               (int64_t[]){3, 2, 3, 3});
    kiln_tensor *c = kiln_conv2d(ctx, x, w, NULL, NULL);
    KT_CHECK(SHAPE_IS(c, 0, 3, 3, 3), "conv2d of an empty batch");
    kiln_tensor *p = kiln_max_pool2d(ctx, c, 2, 2, 0, 0), *a = kiln_avg_pool2d(ctx, c, 2, 2, 0, 0);
    KT_CHECK(SHAPE_IS(p, 0, 3, 1, 1) && SHAPE_IS(a, 0, 3, 1, 1), "pools of an empty batch");
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_add(ctx, p, a));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    double gw[54];
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gw, 54));
    for (int i = 0; i < 54; i++) KT_CHECK(gw[i] == 0.0, "conv weight grad[%d] = %g, want 0", i, gw[i]);
    /* attention: no queries gives nothing; no keys gives zeros (a query that sees no key) */
    kiln_tensor *q = kiln_new_4d(ctx, KILN_F32, 1, 2, 3, 4), *k0 = kiln_new_4d(ctx, KILN_F32, 1, 2, 0, 4);
    kiln_tensor *v0 = kiln_new_4d(ctx, KILN_F32, 1, 2, 0, 5);
    KT_OK(kiln_tensor_fill(q, 1.0));
    kiln_tensor *o = kiln_attention(ctx, q, k0, v0, false, 0);
    KT_CHECK(SHAPE_IS(o, 1, 2, 3, 5), "attention with no keys");
    double *ov = nnt_eval(ctx, o);
    for (int i = 0; ov && i < 30; i++) KT_CHECK(ov[i] == 0.0, "attention with no keys [%d] = %g, want 0", i, ov[i]);
    free(ov);
    kiln_tensor *oq = kiln_attention(ctx, kiln_new_4d(ctx, KILN_F32, 1, 2, 0, 4), kiln_new_4d(ctx, KILN_F32, 1, 2, 3, 4),
                                     kiln_new_4d(ctx, KILN_F32, 1, 2, 3, 5), true, 0);
    KT_CHECK(SHAPE_IS(oq, 1, 2, 0, 5), "attention with no queries");
    KT_OK(compute(ctx, oq));
    KT_OK(compute(ctx, kiln_rope(ctx, kiln_new_3d(ctx, KILN_F32, 2, 0, 8), NULL, 10000, KILN_ROPE_NEOX)));
    KT_OK(compute(ctx, kiln_one_hot(ctx, kiln_new_1d(ctx, KILN_I32, 0), 4, KILN_F32)));
    KT_OK(compute(ctx, kiln_one_hot(ctx, kiln_new_1d(ctx, KILN_I32, 3), 0, KILN_F32)));
    /* an empty batch or channels are fine, an empty kernel is not (torch refuses it too) */
    kiln_tensor *cc = kiln_conv2d(ctx, kiln_new_4d(ctx, KILN_F32, 1, 0, 5, 5), kiln_new_4d(ctx, KILN_F32, 2, 0, 3, 3),
                                  NULL, NULL);
    KT_CHECK(SHAPE_IS(cc, 1, 2, 3, 3), "conv2d of no channels");
    double *cv = nnt_eval(ctx, cc);
    for (int i = 0; cv && i < 18; i++) KT_CHECK(cv[i] == 0.0, "conv2d of no channels [%d] = %g, want 0", i, cv[i]);
    free(cv);
    KT_EXPECT_ERR(kiln_conv2d(ctx, kiln_new_4d(ctx, KILN_F32, 1, 1, 5, 5), kiln_new_4d(ctx, KILN_F32, 2, 1, 0, 3), NULL,
                              NULL), KILN_ERR_SHAPE, "kiln_conv2d: w [2, 1, 0, 3] has an empty kernel");
    KT_OK(compute(ctx, kiln_rms_norm(ctx, kiln_new_2d(ctx, KILN_F32, 3, 0), NULL, 1e-6)));
    kiln_ctx_free(ctx);
}

static kiln_optim *opt_sgd(kiln_ctx *c) { return kiln_sgd_new(c, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f}); }
static kiln_optim *opt_adamw(kiln_ctx *c) { return kiln_adamw_new(c, NULL); }
static kiln_optim *opt_lion8(kiln_ctx *c) { return kiln_lion8bit_new(c, NULL); }
static kiln_optim *opt_adamw8(kiln_ctx *c) { return kiln_adamw8bit_new(c, NULL); }
#ifdef KILN_BLAS
static kiln_optim *opt_galore(kiln_ctx *c) {
    kiln_galore_config g = kiln_galore_defaults();
    g.rank = 2;
    return kiln_galore_adamw_new(c, &g);
}
#endif
static kiln_optim *opt_apollo(kiln_ctx *c) {
    kiln_apollo_config a = kiln_apollo_defaults();
    a.rank = 2;
    return kiln_apollo_new(c, &a);
}

/* In-place writes: a KV cache slab of no rows, optimizer steps on empty
 * parameters ([0, 64] and [64, 0]: low-rank steps see both orientations)
 * beside a full one, which moves. */
KT_TEST(zero_size_in_place) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *cache = kiln_new_2d(ctx, KILN_F32, 4, 3);
    kiln_tensor *t = kiln_slice_assign(ctx, cache, kiln_new_2d(ctx, KILN_F32, 0, 3), 0, 4);
    KT_NOTNULL(t);
    KT_OK(compute(ctx, t));
    kiln_ctx_free(ctx);
    kiln_optim *(*const makers[])(kiln_ctx *) = {opt_sgd, opt_adamw, opt_lion8, opt_adamw8, opt_apollo,
#ifdef KILN_BLAS
                                                 opt_galore /* GaLore's SVD needs LAPACK */
#endif
    };
    for (size_t i = 0; i < sizeof makers / sizeof *makers; i++) {
        ctx = kiln_ctx_new();
        kiln_tensor *e = kiln_param(ctx, "e", KILN_F32, 2, (int64_t[]){0, 64});
        kiln_tensor *e2 = kiln_param(ctx, "e2", KILN_F32, 2, (int64_t[]){64, 0});
        kiln_tensor *f = kiln_param(ctx, "f", KILN_F32, 2, (int64_t[]){8, 16});
        KT_OK(kiln_tensor_fill(f, 0.5));
        kiln_tensor *loss = kiln_add(ctx, kiln_add(ctx, kiln_sum_all(ctx, e), kiln_sum_all(ctx, e2)),
                                     kiln_sum_all(ctx, kiln_mul(ctx, f, f)));
        kiln_graph *g = kiln_graph_new(ctx);
        kiln_optim *opt = makers[i](ctx);
        KT_NOTNULL(opt);
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        for (int k = 0; k < 2; k++) {
            KT_OK(kiln_graph_compute(g));
            KT_OK(kiln_optim_step(opt));
        }
        double f0 = kiln_tensor_item(f);
        KT_CHECK(f0 < 0.5, "optimizer %zu: the full parameter did not move (%g)", i, f0);
        kiln_ctx_free(ctx);
    }
}

KT_TEST(zero_size_files) {
    char dir[] = "/tmp/kiln_zero_XXXXXX", path[64];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *e = kiln_tensor_set_name(kiln_new_2d(ctx, KILN_F32, 4, 0), "e");
    kiln_tensor *f = kiln_tensor_set_name(kiln_new_1d(ctx, KILN_F32, 2), "f");
    KT_OK(kiln_tensor_fill(f, 1.5));
    /* safetensors */
    snprintf(path, sizeof path, "%s/z.safetensors", dir);
    KT_OK(kiln_safetensors_save(path, (kiln_tensor *[]){e, f}, NULL, 2, NULL, 0));
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_NOTNULL(st);
    kiln_tensor *le = kiln_safetensors_load(st, ctx, "e"), *lf = kiln_safetensors_load(st, ctx, "f");
    KT_CHECK(SHAPE_IS(le, 4, 0) && SHAPE_IS(lf, 2), "safetensors round trip: %s", kiln_last_error());
    KT_OK(kiln_safetensors_read_into(st, "e", e));
    kiln_safetensors_close(st);
    /* GGUF */
    snprintf(path, sizeof path, "%s/z.gguf", dir);
    kiln_gguf_writer *gw = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_add_tensor(gw, "e", e));
    KT_OK(kiln_gguf_add_tensor(gw, "f", f));
    KT_OK(kiln_gguf_writer_save(gw, path));
    kiln_gguf_writer_free(gw);
    kiln_gguf *gg = kiln_gguf_open(path);
    KT_NOTNULL(gg);
    kiln_tensor *ge = kiln_gguf_load(gg, ctx, "e"), *gf = kiln_gguf_load(gg, ctx, "f");
    KT_CHECK(SHAPE_IS(ge, 4, 0) && SHAPE_IS(gf, 2), "GGUF round trip: %s", kiln_last_error());
    KT_OK(kiln_gguf_read_into(gg, "e", e));
    kiln_gguf_close(gg);
    /* a checkpoint with an empty parameter */
    snprintf(path, sizeof path, "%s/z.ckpt", dir);
    kiln_tensor *pe = kiln_param(ctx, "pe", KILN_F32, 2, (int64_t[]){0, 5}), *pf = kiln_param(ctx, "pf", KILN_F32, 1,
                                                                                               (int64_t[]){2});
    KT_NOTNULL(pe);
    KT_OK(kiln_tensor_fill(pf, 2.5));
    KT_OK(kiln_save_params(ctx, path));
    KT_OK(kiln_tensor_fill(pf, 0.0));
    KT_OK(kiln_load_params(ctx, path));
    KT_CHECK(kiln_tensor_item(pf) == 2.5, "checkpoint round trip: %g", kiln_tensor_item(pf));
    unlink(path);
    snprintf(path, sizeof path, "%s/z.gguf", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/z.safetensors", dir);
    unlink(path);
    rmdir(dir);
    kiln_ctx_free(ctx);
}

/* t computed where the graph's buffer held other values just before: the
 * sum of exp(junk) (junk as large as t) runs first and its place is free
 * again when t's node is placed, so a kernel that left t unwritten shows. */
static double *eval_over_junk(kiln_ctx *ctx, kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t) + 64;
    kiln_tensor *junk = kiln_new_1d(ctx, kiln_tensor_dtype(t), n);
    if (!junk || kiln_tensor_fill(junk, 3.0)) return NULL;
    kiln_tensor *s = kiln_sum_all(ctx, kiln_exp(ctx, junk));
    kiln_tensor *out = kiln_add(ctx, kiln_scale(ctx, s, 0.0), t); /* s's subtree first */
    return nnt_eval(ctx, out);
}

static void expect_all(const char *what, const double *v, int64_t n, double want) {
    for (int64_t i = 0; v && i < n; i++)
        if (!(v[i] == want)) {
            kt_fail(__FILE__, __LINE__, "%s: element %lld is %g, want %g", what, (long long)i, v[i], want);
            return;
        }
    if (!v) kt_fail(__FILE__, __LINE__, "%s: no values", what);
}

/* Results made from empty sources: every kernel writes them whole. */
KT_TEST(zero_size_results_from_empty_sources) {
    const kiln_dtype dts[] = {KILN_F32, KILN_F64};
    for (int d = 0; d < 2; d++) {
        kiln_dtype dt = dts[d];
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *a = kiln_new_2d(ctx, dt, 3, 0), *b = kiln_new_2d(ctx, dt, 0, 4);
        double *v = eval_over_junk(ctx, kiln_matmul(ctx, a, b));
        expect_all("matmul over K = 0", v, 12, 0.0);
        free(v);
        v = eval_over_junk(ctx, kiln_matmul_t(ctx, b, true, kiln_new_2d(ctx, dt, 0, 5), false));
        expect_all("matmul_t over K = 0", v, 20, 0.0);
        free(v);
        v = eval_over_junk(ctx, kiln_sum(ctx, kiln_new_3d(ctx, dt, 2, 0, 3), 1, false));
        expect_all("sum over an empty axis", v, 6, 0.0);
        free(v);
        v = eval_over_junk(ctx, kiln_pad(ctx, kiln_new_2d(ctx, dt, 0, 3), (int64_t[]){2, 1, 0, 0}, -1.5));
        expect_all("pad of an empty tensor", v, 9, -1.5);
        free(v);
        kiln_tensor *ones = kiln_new_2d(ctx, dt, 2, 3);
        KT_OK(kiln_tensor_fill(ones, 1.0));
        v = eval_over_junk(ctx, kiln_concat(ctx, (kiln_tensor *[]){kiln_new_2d(ctx, dt, 0, 3), ones,
                                                                    kiln_new_2d(ctx, dt, 0, 3)}, 3, 0));
        expect_all("concat with empty parts", v, 6, 1.0);
        free(v);
        if (dt == KILN_F32) {
            v = eval_over_junk(ctx, kiln_dfp_matmul_t(ctx, a, false, b, false));
            expect_all("dfp matmul over K = 0", v, 12, 0.0);
            free(v);
            kiln_tensor *wq = kiln_quantize(ctx, kiln_new_2d(ctx, KILN_F32, 4, 0), KILN_Q8_0);
            v = eval_over_junk(ctx, kiln_linear(ctx, kiln_new_2d(ctx, KILN_F32, 3, 0), wq, NULL));
            expect_all("quantized linear over K = 0", v, 12, 0.0);
            free(v);
        }
        kiln_ctx_free(ctx);
    }
}

/* Gradients that empty views and batches send back: zeros of the source. */
KT_TEST(zero_size_gradients_of_empty_views) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_param(ctx, "x", KILN_F32, 2, (int64_t[]){4, 3});
    kiln_tensor *tab = kiln_param(ctx, "tab", KILN_F32, 2, (int64_t[]){5, 2});
    kiln_tensor *ln_w = kiln_param(ctx, "ln_w", KILN_F32, 1, (int64_t[]){3});
    KT_OK(kiln_tensor_fill(x, 2.0));
    kiln_tensor *parts[] = {
        kiln_slice(ctx, x, 0, 2, 2, 1),                                         /* slice_scatter of nothing */
        kiln_pad(ctx, kiln_slice(ctx, x, 1, 3, 3, 1), (int64_t[]){0, 0, 1, 1}, 0), /* [4, 2] of pad */
        kiln_get_rows(ctx, tab, kiln_new_1d(ctx, KILN_I32, 0)),                 /* scatter_add_rows of nothing */
        kiln_layer_norm(ctx, kiln_slice(ctx, x, 0, 0, 0, 1), ln_w, NULL, 1e-5), /* dw over no rows */
        kiln_cross_entropy(ctx, kiln_slice(ctx, x, 0, 1, 1, 1), kiln_new_1d(ctx, KILN_I32, 0), -100),
    };
    kiln_tensor *loss = kiln_scalar(ctx, KILN_F32, 0.0);
    for (size_t i = 0; i < sizeof parts / sizeof *parts; i++) {
        KT_NOTNULL(parts[i]);
        loss = kiln_add(ctx, loss, kiln_sum_all(ctx, parts[i]));
    }
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g)); /* twice: the gradients add up, zeros stay zeros */
    double *gx = nnt_values(kiln_tensor_grad(x)), *gt = nnt_values(kiln_tensor_grad(tab));
    double *gw = nnt_values(kiln_tensor_grad(ln_w));
    expect_all("x's gradient", gx, 12, 0.0);
    expect_all("the table's gradient", gt, 10, 0.0);
    expect_all("the layer norm weight's gradient", gw, 3, 0.0);
    free(gx), free(gt), free(gw);
    KT_CHECK(kiln_tensor_item(loss) == 0.0, "loss %g, want 0 (cross_entropy of no rows is 0)", kiln_tensor_item(loss));
    /* an index into an empty table fails the compute, as any index out of range */
    kiln_tensor *idx = kiln_new_1d(ctx, KILN_I32, 1);
    kiln_tensor *r = kiln_get_rows(ctx, kiln_new_2d(ctx, KILN_F32, 0, 2), idx);
    kiln_graph *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g2, r));
    KT_CHECK(kiln_graph_compute(g2) != KILN_OK, "get_rows of an empty table computed");
    kiln_ctx_free(ctx);
}
