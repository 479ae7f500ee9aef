/* test_lora.c — LoRA adapters (models/lora.h): a LoRA linear against
 * PyTorch (tests/fixtures/lora.txt), PEFT's init, finite differences
 * through a whole llama, the base weights untouched by training (f32 and
 * NF4), PEFT's files against a fixture written by hand from PEFT's layout
 * (tests/fixtures/peft, scripts/make_lora_fixtures.py), merging, errors. */
#include "fixture.h"
#include "kt.h"
#include "test_nn_util.h"

#include "llama_files.h"
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static bool near(const char *what, const kiln_tensor *t, const double *want, double atol, double rtol) {
    double *got = nnt_values(t);
    int64_t worst = 0, n = kiln_tensor_numel(t);
    double e = got ? kt_rel_err(got, want, n, atol, rtol, &worst) : INFINITY;
    KT_CHECK(e <= 1, "%s: element %lld is %g, want %g (error %g)", what, (long long)worst, got ? got[worst] : NAN,
             want[worst], e);
    free(got);
    return e <= 1;
}

static const char *const qv[2] = {"q_proj", "v_proj"};

static lora_config config(int r, double alpha, int n, const char *const *targets) {
    lora_config c = lora_defaults();
    c.r = r, c.alpha = alpha, c.targets = targets, c.n_targets = n;
    return c;
}

/* sum(y * gy), gy a constant */
static kiln_tensor *weighted_sum(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *gy) {
    return kiln_sum(ctx, kiln_reshape(ctx, kiln_mul(ctx, y, gy), 1, (int64_t[]){-1}), 0, false);
}

KT_TEST(lora_linear_matches_pytorch) {
    fx_file *f = fx_load("tests/fixtures/lora.txt");
    KT_REQUIRE(f, "tests/fixtures/lora.txt");
    for (int c = 0; c < f->ncase; c++) {
        const fx_case *k = &f->cases[c], *kg;
        char gname[80];
        snprintf(gname, sizeof gname, "%s_grads", k->name);
        if (!(kg = fx_find(f, gname))) continue; /* a _grads case itself */
        kt_set_context(k->name);
        const fx_tensor *fx = fx_tensor_get(k, "x"), *fw = fx_tensor_get(k, "w"), *fa = fx_tensor_get(k, "a"),
                        *fb = fx_tensor_get(k, "b"), *fgy = fx_tensor_get(k, "gy");
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_param(ctx, "x", KILN_F32, fx->ndim, fx->shape);
        kiln_tensor *w = kiln_param(ctx, "layer.q_proj.weight", KILN_F32, 2, fw->shape);
        kiln_tensor *gy = kiln_tensor_new(ctx, KILN_F32, fgy->ndim, fgy->shape);
        KT_OK(kiln_tensor_set_f64(x, fx->v, fx->n));
        KT_OK(kiln_tensor_set_f64(w, fw->v, fw->n));
        KT_OK(kiln_tensor_set_f64(gy, fgy->v, fgy->n));
        lora_config cfg = config((int)fx_param(k, "r", 0), fx_param(k, "alpha", 0), 1, qv);
        lora *l = lora_attach(ctx, 1, (const char *[]){"layer.q_proj"}, &w, &cfg, 1);
        KT_NOTNULL(l);
        KT_CHECK(l->n_layers == 1 && !kiln_tensor_requires_grad(w), "one layer, W frozen");
        KT_OK(kiln_tensor_set_f64(l->layers[0].a, fa->v, fa->n));
        KT_OK(kiln_tensor_set_f64(l->layers[0].b, fb->v, fb->n));
        kiln_tensor *y = model_linear(ctx, x, w, NULL, NULL);
        kiln_tensor *loss = weighted_sum(ctx, y, gy);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_add(g, loss));
        KT_OK(kiln_graph_backward(g, loss));
        KT_OK(kiln_graph_compute(g));
        near("y", y, fx_tensor_get(k, "y")->v, 1e-5, 1e-5);
        near("gx", kiln_tensor_grad(x), fx_tensor_get(kg, "gx")->v, 1e-5, 1e-5);
        near("ga", kiln_tensor_grad(l->layers[0].a), fx_tensor_get(kg, "ga")->v, 1e-5, 1e-5);
        near("gb", kiln_tensor_grad(l->layers[0].b), fx_tensor_get(kg, "gb")->v, 1e-5, 1e-5);
        double *gw = nnt_values(kiln_tensor_grad(w)); /* made by kiln_param, never written */
        for (int64_t i = 0; gw && i < fw->n; i++) KT_CHECK(gw[i] == 0, "W's gradient %lld is %g", (long long)i, gw[i]);
        free(gw);
        lora_free(l);
        kiln_ctx_free(ctx);
    }
    kt_set_context(NULL);
    fx_free(f);
}

static llama_config tiny(void) {
    llama_config c = llama_defaults();
    c.vocab = 32, c.context = 16, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 16, c.hidden = 32;
    return c;
}

KT_TEST(lora_init_as_peft_changes_nothing) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 3);
    model_graph before, after;
    KT_OK(llama_eval_graph(m, 2, 8, &before));
    nnt_fill_ints(before.input, 32, 1), nnt_fill_ints(before.labels, 32, 2);
    KT_OK(kiln_graph_compute(before.graph));
    lora_config cfg = config(4, 8, 2, (const char *[]){"mlp.gate_proj", "o_proj"});
    lora *l = lora_attach_llama(m, &cfg, 7);
    KT_NOTNULL(l);
    KT_CHECK(l->n_layers == 4 && !strcmp(l->layers[1].module, "model.layers.0.mlp.gate_proj"),
             "%d layers, second '%s'", l->n_layers, l->layers[1].module);
    KT_CHECK(!strcmp(kiln_tensor_name(l->layers[0].a), "layers.0.attention.wo.lora_A"), "A is '%s'",
             kiln_tensor_name(l->layers[0].a));
    for (int i = 0; i < l->n_layers; i++) { /* kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(in), 1/sqrt(in)) */
        double *a = nnt_values(l->layers[i].a), *b = nnt_values(l->layers[i].b), lo = 0, hi = 0;
        const int64_t in = kiln_tensor_dim(l->layers[i].w, 1), na = kiln_tensor_numel(l->layers[i].a);
        for (int64_t j = 0; j < na; j++) lo = fmin(lo, a[j]), hi = fmax(hi, a[j]);
        KT_CHECK(hi <= 1 / sqrt((double)in) && lo >= -1 / sqrt((double)in) && hi - lo > 1 / sqrt((double)in),
                 "A in [%g, %g] for in %lld", lo, hi, (long long)in);
        for (int64_t j = 0; j < kiln_tensor_numel(l->layers[i].b); j++)
            KT_CHECK(b[j] == 0, "B[%lld] = %g", (long long)j, b[j]);
        free(a), free(b);
    }
    KT_OK(llama_eval_graph(m, 2, 8, &after));
    nnt_fill_ints(after.input, 32, 1), nnt_fill_ints(after.labels, 32, 2);
    KT_OK(kiln_graph_compute(after.graph));
    double *x = nnt_values(before.logits), *y = nnt_values(after.logits);
    for (int64_t i = 0; i < kiln_tensor_numel(after.logits); i++)
        KT_CHECK(x[i] == y[i], "logit %lld differs", (long long)i);
    free(x), free(y);
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* Every adapter drawn N(0, 0.3), so that the gradients of A are not 0. */
static void randomize(lora *l, uint64_t seed) {
    for (int i = 0; i < l->n_params; i++) kiln_tensor_fill_randn(l->params[i], seed + (uint64_t)i, 0, 0.3);
}

KT_TEST(lora_llama_gradients_match_finite_differences) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 5);
    lora_config cfg = config(2, 4, 2, (const char *[]){"v_proj", "down_proj"});
    lora *l = lora_attach_llama(m, &cfg, 9);
    KT_NOTNULL(l);
    randomize(l, 11);
    model_graph g;
    KT_OK(llama_train_graph(m, 2, 8, &g));
    nnt_fill_ints(g.input, 32, 3), nnt_fill_ints(g.labels, 32, 4);
    kiln_zero_grad(ctx);
    KT_OK(kiln_graph_compute(g.graph));
    const float eps = 1e-2f;
    KT_REQUIRE(l->n_params <= 8, "%d adapters", l->n_params);
    double *grads[8]; /* read now: each compute below adds to them */
    for (int p = 0; p < l->n_params; p++) grads[p] = nnt_values(kiln_tensor_grad(l->params[p]));
    for (int p = 0; p < l->n_params; p++) {
        kiln_tensor *t = l->params[p];
        int64_t n = kiln_tensor_numel(t);
        double *grad = grads[p];
        float *v = malloc((size_t)n * sizeof *v);
        KT_OK(kiln_tensor_get_f32(t, v, n));
        for (int64_t e = 0; e < n; e += n / 3 + 1) {
            double loss[2];
            for (int s = 0; s < 2; s++) {
                float keep = v[e];
                v[e] = keep + (s ? -eps : eps);
                KT_OK(kiln_tensor_set_f32(t, v, n));
                KT_OK(kiln_graph_compute(g.graph));
                loss[s] = kiln_tensor_item(g.loss);
                v[e] = keep;
            }
            KT_OK(kiln_tensor_set_f32(t, v, n));
            double fd = (loss[0] - loss[1]) / (2.0 * eps);
            KT_CHECK(fabs(fd - grad[e]) <= 3e-4 + 2e-2 * fabs(fd), "%s[%lld]: backward %g, differences %g",
                     kiln_tensor_name(t), (long long)e, grad[e], fd);
        }
        free(grad), free(v);
    }
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* A few AdamW steps on the adapters of a fixed batch: the loss falls, the
 * adapters move, every base weight keeps its bytes. */
static void train_keeps_base(llama *m, gpt *gm) {
    kiln_ctx *ctx = m ? m->ctx : gm->ctx;
    kiln_tensor *const *base = m ? m->params : gm->params;
    const int nb = m ? m->n_params : gm->n_params;
    size_t size;
    char *before = nnt_snapshot(base, nb, &size);
    lora_config cfg = config(4, 8, 2, m ? qv : (const char *const[]){"c_attn", "mlp.c_proj"});
    cfg.dropout = 0.1;
    lora *l = m ? lora_attach_llama(m, &cfg, 1) : lora_attach_gpt(gm, &cfg, 1);
    KT_NOTNULL(l);
    model_graph g;
    KT_OK(m ? llama_train_graph(m, 2, 8, &g) : gpt_train_graph(gm, 2, 8, &g));
    nnt_fill_ints(g.input, 32, 5), nnt_fill_ints(g.labels, 32, 6);
    kiln_adam_config ac = kiln_adamw_defaults();
    ac.lr = 1e-2f;
    kiln_optim *opt = kiln_adamw_new_for(ctx, l->params, l->n_params, &ac);
    KT_NOTNULL(opt);
    double first = 0, last = 0;
    for (int s = 0; s < 8; s++) {
        KT_OK(kiln_graph_compute(g.graph));
        KT_OK(kiln_optim_step(opt));
        last = kiln_tensor_item(g.loss);
        if (!s) first = last;
    }
    KT_CHECK(last < first - 0.05, "loss %g -> %g", first, last);
    double *b = nnt_values(l->layers[0].b);
    KT_CHECK(b && b[0] != 0, "B did not move");
    free(b);
    size_t size2;
    char *after = nnt_snapshot(base, nb, &size2);
    KT_CHECK(size == size2 && !memcmp(before, after, size), "a base weight changed");
    free(before), free(after);
    lora_free(l);
}

KT_TEST(lora_training_leaves_the_base_bit_identical) {
    llama_config c = tiny();
    c.dim = 64, c.hidden = 128; /* NF4's rows are whole 64-value blocks */
    for (int pass = 0; pass < 3; pass++) {
        kt_set_context((const char *[]){"llama f32", "llama nf4", "gpt"}[pass]);
        kiln_ctx *ctx = kiln_ctx_new();
        if (pass < 2) {
            llama *m = pass ? llama_new_inference(ctx, &c, KILN_NF4, false) : llama_new(ctx, &c, 2);
            KT_NOTNULL(m);
            if (pass) KT_OK(llama_init_random(m, 4));
            train_keeps_base(m, NULL);
            llama_free(m);
        } else {
            gpt_config gc = {.vocab = 32, .context = 16, .layers = 2, .heads = 2, .width = 16};
            gpt *m = gpt_new(ctx, &gc, 2);
            KT_NOTNULL(m);
            train_keeps_base(NULL, m);
            gpt_free(m);
        }
        kiln_ctx_free(ctx);
    }
    kt_set_context(NULL);
}

KT_TEST(lora_peft_files_match_the_fixture) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 1);
    lora_config cfg = config(2, 16, 2, qv);
    cfg.dropout = 0.05, cfg.base_model = "tiny-llama";
    lora *l = lora_attach_llama(m, &cfg, 1);
    KT_NOTNULL(l);
    KT_OK(lora_load_peft(l, "tests/fixtures/peft"));
    for (int k = 0; k < l->n_params; k++) { /* the fixture's values: (k + 1) / 8 + e / 64 */
        double *v = nnt_values(l->params[k]);
        for (int64_t e = 0; e < kiln_tensor_numel(l->params[k]); e++)
            KT_CHECK(v[e] == (k + 1) / 8.0 + (double)e / 64, "tensor %d element %lld is %g", k, (long long)e, v[e]);
        free(v);
    }
    char dir[64] = "/tmp/kiln_peft_XXXXXX", p[128], q[128];
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    KT_OK(lora_save_peft(l, dir));
    snprintf(p, sizeof p, "%s/adapter_config.json", dir);
    KT_CHECK(nnt_same_file(p, "tests/fixtures/peft/adapter_config.json"), "%s differs from the fixture's", p);
    snprintf(q, sizeof q, "%s/adapter_model.safetensors", dir);
    kiln_safetensors *got = kiln_safetensors_open(q),
                     *want = kiln_safetensors_open("tests/fixtures/peft/adapter_model.safetensors");
    KT_NOTNULL(got);
    KT_NOTNULL(want);
    KT_CHECK(kiln_safetensors_count(got) == kiln_safetensors_count(want), "%d tensors, want %d",
             kiln_safetensors_count(got), kiln_safetensors_count(want));
    const char *fmt = kiln_safetensors_metadata(got, "format");
    KT_CHECK(fmt && !strcmp(fmt, "pt"), "metadata format '%s'", fmt ? fmt : "(none)");
    for (int i = 0; i < kiln_safetensors_count(want); i++) {
        kiln_safetensors_info w, g;
        KT_OK(kiln_safetensors_info_at(want, i, &w));
        int at = kiln_safetensors_find(got, w.name);
        KT_CHECK(at >= 0, "no tensor '%s'", w.name);
        if (at < 0) continue;
        KT_OK(kiln_safetensors_info_at(got, at, &g));
        KT_CHECK(!strcmp(g.dtype, w.dtype) && g.ndim == 2 && g.shape[0] == w.shape[0] && g.shape[1] == w.shape[1] &&
                     g.nbytes == w.nbytes,
                 "'%s' is %s [%lld, %lld]", w.name, g.dtype, (long long)g.shape[0], (long long)g.shape[1]);
        kiln_tensor *a = kiln_safetensors_load(got, ctx, w.name), *b = kiln_safetensors_load(want, ctx, w.name);
        KT_CHECK(a && b && !memcmp(kiln_tensor_data(a), kiln_tensor_data(b), w.nbytes), "'%s' values differ", w.name);
    }
    kiln_safetensors_close(got);
    kiln_safetensors_close(want);
    unlink(p), unlink(q), rmdir(dir);
    lora_free(l);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* Merged weights read back: each merged weight equals W + alpha/r B A
 * within dtype's rounding of the largest entry; the f32 model's logits
 * equal the adapted ones. */
KT_TEST(lora_merge_equals_the_adapted_forward) {
    static const kiln_dtype dts[] = {KILN_F32, KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};
    static const double tol[] = {1e-6, 1.0 / 127, 1.0 / 7, 1.0 / 5, 1.0 / 5};
    for (size_t d = 0; d < sizeof dts / sizeof *dts; d++) {
        llama_config c = tiny();
        /* rows of whole blocks (NF4's are 64 values); NF4_DQ's super-blocks
         * of 16384 in wq, wo, w1, w2, w3 (wk, wv fall back to NF4) */
        c.dim = dts[d] == KILN_NF4_DQ ? 128 : 64, c.hidden = 128;
        kt_set_context(kiln_dtype_name(dts[d]));
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = llama_new_inference(ctx, &c, dts[d], false);
        KT_NOTNULL(m);
        KT_OK(llama_init_random(m, 8));
        lora_config cfg = config(4, 8, 7, (const char *[]){"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                                           "up_proj", "down_proj"});
        lora *l = lora_attach_llama(m, &cfg, 3);
        KT_NOTNULL(l);
        KT_CHECK(kiln_tensor_dtype(l->layers[0].w) == dts[d], "wq is %s",
                 kiln_dtype_name(kiln_tensor_dtype(l->layers[0].w)));
        for (int i = 0; i < l->n_params; i++) KT_OK(kiln_tensor_fill_randn(l->params[i], 20 + (uint64_t)i, 0, 0.05));
        model_graph adapted, merged;
        KT_OK(llama_eval_graph(m, 1, 8, &adapted));
        nnt_fill_ints(adapted.input, 32, 7), nnt_fill_ints(adapted.labels, 32, 8);
        KT_OK(kiln_graph_compute(adapted.graph));
        double **want = calloc((size_t)l->n_layers, sizeof *want);
        for (int i = 0; i < l->n_layers; i++) {
            const lora_layer *a = &l->layers[i];
            const int64_t out = kiln_tensor_dim(a->w, 0), in = kiln_tensor_dim(a->w, 1), r = cfg.r;
            double *w = nnt_values(a->w), *av = nnt_values(a->a), *bv = nnt_values(a->b);
            for (int64_t o = 0; o < out; o++)
                for (int64_t k = 0; k < r; k++)
                    for (int64_t j = 0; j < in; j++) w[o * in + j] += cfg.alpha / r * bv[o * r + k] * av[k * in + j];
            want[i] = w;
            free(av), free(bv);
        }
        KT_OK(lora_merge(l));
        for (int i = 0; i < l->n_layers; i++) {
            int64_t n = kiln_tensor_numel(l->layers[i].w);
            double big = 0;
            for (int64_t j = 0; j < n; j++) big = fmax(big, fabs(want[i][j]));
            near(l->layers[i].module, l->layers[i].w, want[i], tol[d] * big, 0);
            free(want[i]);
        }
        free(want);
        KT_OK(llama_eval_graph(m, 1, 8, &merged));
        nnt_fill_ints(merged.input, 32, 7), nnt_fill_ints(merged.labels, 32, 8);
        KT_OK(kiln_graph_compute(merged.graph));
        if (dts[d] == KILN_F32) {
            double *y = nnt_values(adapted.logits);
            near("merged logits", merged.logits, y, 1e-5, 1e-4);
            free(y);
        }
        /* the merged model through GGUF, in its own dtype: the same logits */
        if (dts[d] != KILN_NF4 && dts[d] != KILN_NF4_DQ) {
            char path[64] = "/tmp/kiln_merged_XXXXXX";
            int fd = mkstemp(path);
            KT_REQUIRE(fd >= 0, "mkstemp");
            close(fd);
            KT_OK(llama_save_gguf(m, path, dts[d]));
            llama *back = llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED);
            unlink(path);
            KT_NOTNULL(back);
            model_graph g;
            KT_OK(llama_eval_graph(back, 1, 8, &g));
            nnt_fill_ints(g.input, 32, 7), nnt_fill_ints(g.labels, 32, 8);
            KT_OK(kiln_graph_compute(g.graph));
            double *y = nnt_values(merged.logits);
            near("logits from the GGUF", g.logits, y, 1e-6, 1e-5);
            free(y);
            llama_free(back);
        }
        KT_CHECK(lora_merge(l) == KILN_ERR_STATE, "a second merge");
        lora_free(l);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    kt_set_context(NULL);
}

KT_TEST(lora_errors_name_the_value) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 1);
    lora_config cfg = config(2, 16, 2, (const char *[]){"q_proj", "qkv_proj"});
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_ARG, "'qkv_proj' matches none");
    cfg = config(0, 16, 2, qv);
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_ARG, "r = 0");
    cfg = config(2, -1, 2, qv);
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_ARG, "lora_alpha = -1");
    cfg = config(2, 16, 2, qv);
    cfg.dropout = 1;
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_ARG, "lora_dropout = 1");
    cfg = config(2, 16, 0, qv);
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_ARG, "no target_modules");
    cfg = config(2, 16, 1, qv);
    KT_EXPECT_ERR(lora_attach(ctx, 2, (const char *[]){"a.q_proj", "norm.q_proj"},
                              (kiln_tensor *[]){m->layers[0].wq, m->norm}, &cfg, 1),
                  KILN_ERR_SHAPE, "module 'norm.q_proj': the weight must be 2-d");
    KT_CHECK(kiln_tensor_requires_grad(m->layers[0].wq), "a failed attach froze wq");
    /* a fixture of another rank, then of another shape: an error, the adapters unchanged */
    cfg = config(4, 16, 2, qv);
    lora *l = lora_attach_llama(m, &cfg, 1);
    KT_NOTNULL(l);
    KT_EXPECT_ERR(lora_attach_llama(m, &cfg, 1), KILN_ERR_STATE,
                  "module 'model.layers.0.self_attn.q_proj' has adapters already");
    kiln_clear_error();
    KT_CHECK(lora_load_peft(l, "tests/fixtures/peft") == KILN_ERR_FORMAT && strstr(kiln_last_error(), "r = 2"),
             "rank: %s", kiln_last_error());
    lora_free(l);
    kiln_ctx *ctx2 = kiln_ctx_new();
    c.dim = 32;
    llama *wide = llama_new(ctx2, &c, 1);
    cfg = config(2, 16, 2, qv);
    l = lora_attach_llama(wide, &cfg, 1);
    KT_NOTNULL(l);
    double *a0 = nnt_values(l->params[0]);
    kiln_clear_error();
    KT_CHECK(lora_load_peft(l, "tests/fixtures/peft") == KILN_ERR_SHAPE &&
                 strstr(kiln_last_error(), "q_proj.lora_A.weight' is 2-d [2, ...], not [2, 32]"),
             "shape: %s", kiln_last_error());
    double *a1 = nnt_values(l->params[0]);
    KT_CHECK(a0 && a1 && !memcmp(a0, a1, (size_t)kiln_tensor_numel(l->params[0]) * sizeof *a0), "A changed");
    free(a0), free(a1);
    kiln_clear_error();
    KT_CHECK(lora_load_peft(l, "/nonexistent") != KILN_OK && strstr(kiln_last_error(), "/nonexistent"), "missing: %s",
             kiln_last_error());
    lora_free(l);
    llama_free(wide);
    kiln_ctx_free(ctx2);
    llama_free(m);
    kiln_ctx_free(ctx);
}
