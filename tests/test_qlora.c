/* test_qlora.c — QLoRA (models/llama_qlora.h): an F16 GGUF quantized to
 * NF4_DQ on load, the embedding and head kept in 16 or 32 bits, norms f32;
 * its adapters' gradients equal those of an f32 llama holding the
 * dequantized weights; 8-bit AdamW steps on the adapters leave every base
 * byte as it was. */
#include "kt.h"
#include "test_nn_util.h"

#include "llama_qlora.h"
#include "lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* wq, wo, w1..w3 are one 16384-value NF4_DQ super-block; wk, wv (64 x 128)
 * fall back to NF4 */
static llama_config shape(void) {
    llama_config c = llama_defaults();
    c.vocab = 64, c.context = 16, c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 128, c.hidden = 128;
    return c;
}

static const char *const all7[7] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};

/* An F16 GGUF of a random llama in dir; its path in path. */
static void write_f16(char *dir, char *path, size_t size) {
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, size, "%s/f16.gguf", dir);
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = shape();
    llama *m = llama_new(ctx, &c, 7);
    KT_NOTNULL(m);
    KT_OK(llama_save_gguf(m, path, KILN_F16));
    llama_free(m);
    kiln_ctx_free(ctx);
}

static lora *attach(llama *m) {
    lora_config cfg = lora_defaults();
    cfg.r = 4, cfg.alpha = 8, cfg.targets = all7, cfg.n_targets = 7;
    lora *l = lora_attach_llama(m, &cfg, 3);
    for (int i = 0; l && i < l->n_params; i++) kiln_tensor_fill_randn(l->params[i], 11 + (uint64_t)i, 0, 0.05);
    return l;
}

KT_TEST(qlora_loads_nf4_dq_with_float_ends) {
    char dir[64] = "/tmp/kiln_qlora_XXXXXX", path[128];
    write_f16(dir, path, sizeof path);
    for (int k = 0; k < 2; k++) {
        const kiln_dtype ends = k ? KILN_BF16 : KILN_F32;
        kiln_ctx *ctx = kiln_ctx_new();
        llama *q = llama_qlora_from_gguf(ctx, path, KILN_NF4_DQ, ends);
        KT_NOTNULL(q);
        const llama_layer *y = &q->layers[1];
        const kiln_dtype want[8] = {KILN_NF4_DQ, KILN_NF4, KILN_NF4, KILN_NF4_DQ, KILN_NF4_DQ, KILN_NF4_DQ,
                                    KILN_NF4_DQ, KILN_F32};
        const kiln_tensor *got[8] = {y->wq, y->wk, y->wv, y->wo, y->w1, y->w2, y->w3, y->ffn_norm};
        for (int i = 0; i < 8; i++)
            KT_CHECK(kiln_tensor_dtype(got[i]) == want[i], "tensor %d is %s", i,
                     kiln_dtype_name(kiln_tensor_dtype(got[i])));
        KT_CHECK(kiln_tensor_dtype(q->tok_embeddings) == ends && kiln_tensor_dtype(q->output) == ends &&
                     kiln_tensor_dtype(q->norm) == KILN_F32,
                 "ends %s, %s", kiln_dtype_name(kiln_tensor_dtype(q->tok_embeddings)),
                 kiln_dtype_name(kiln_tensor_dtype(q->output)));
        KT_CHECK(q->checkpoint, "gradient checkpointing off");
        for (int i = 0; i < q->n_params; i++)
            KT_CHECK(!kiln_tensor_requires_grad(q->params[i]), "'%s' requires grad", kiln_tensor_name(q->params[i]));
        /* a 16-bit head trains too (its gradient reaches the adapters: the next tests) */
        lora *l = attach(q);
        KT_NOTNULL(l);
        model_graph g;
        KT_OK(llama_train_graph(q, 2, 8, &g));
        nnt_fill_ints(g.input, 64, 1), nnt_fill_ints(g.labels, 64, 2);
        KT_OK(kiln_graph_compute(g.graph));
        const double loss = kiln_tensor_item(g.loss);
        KT_CHECK(isfinite(loss) && loss > 3 && loss < 5.5, "loss %g (log 64 = 4.16)", loss);
        lora_free(l);
        llama_free(q);
        kiln_ctx_free(ctx);
    }
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(llama_qlora_from_gguf(ctx, path, KILN_F16, KILN_F32), KILN_ERR_DTYPE, "base = f16 must be");
    KT_EXPECT_ERR(llama_qlora_from_gguf(ctx, path, KILN_NF4_DQ, KILN_F16), KILN_ERR_DTYPE, "compute = f16 must be");
    KT_EXPECT_ERR(llama_qlora_from_hf(ctx, "/nonexistent", KILN_NF4_DQ, KILN_F32), KILN_ERR_IO, "/nonexistent");
    kiln_ctx_free(ctx);
    remove(path), rmdir(dir);
}

/* The adapters' gradients through the quantized layers are those of an
 * f32 llama whose weights are the dequantized ones (dx = dy W). */
KT_TEST(qlora_gradients_are_the_dequantized_models) {
    char dir[64] = "/tmp/kiln_qlora_XXXXXX", path[128];
    write_f16(dir, path, sizeof path);
    kiln_ctx *ctx = kiln_ctx_new();
    llama *q = llama_qlora_from_gguf(ctx, path, KILN_NF4_DQ, KILN_F32);
    KT_NOTNULL(q);
    llama_config c = shape();
    kiln_ctx *fctx = kiln_ctx_new(); /* the same parameter names */
    llama *f = llama_new(fctx, &c, 1);
    KT_NOTNULL(f);
    KT_CHECK(f->n_params == q->n_params, "%d params, want %d", f->n_params, q->n_params);
    for (int i = 0; i < f->n_params; i++) {
        int64_t n = kiln_tensor_numel(q->params[i]);
        float *v = malloc((size_t)n * sizeof *v);
        KT_OK(kiln_tensor_get_f32(q->params[i], v, n));
        KT_OK(kiln_tensor_set_f32(f->params[i], v, n));
        free(v);
    }
    lora *lq = attach(q), *lf = attach(f);
    KT_NOTNULL(lq);
    KT_NOTNULL(lf);
    model_graph gq, gf;
    KT_OK(llama_train_graph(q, 2, 8, &gq));
    KT_OK(llama_train_graph(f, 2, 8, &gf));
    nnt_fill_ints(gq.input, 64, 3), nnt_fill_ints(gq.labels, 64, 4);
    nnt_fill_ints(gf.input, 64, 3), nnt_fill_ints(gf.labels, 64, 4);
    KT_OK(kiln_graph_compute(gq.graph));
    KT_OK(kiln_graph_compute(gf.graph));
    KT_CHECK(fabs(kiln_tensor_item(gq.loss) - kiln_tensor_item(gf.loss)) < 1e-4, "loss %g, f32 model's %g",
             kiln_tensor_item(gq.loss), kiln_tensor_item(gf.loss));
    for (int i = 0; i < lq->n_params; i++) {
        double *a = nnt_values(kiln_tensor_grad(lq->params[i])), *b = nnt_values(kiln_tensor_grad(lf->params[i]));
        double worst = 0, scale = 0;
        int64_t n = kiln_tensor_numel(lq->params[i]);
        for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs(a[j] - b[j])), scale = fmax(scale, fabs(b[j]));
        KT_CHECK(scale > 0 && worst <= 1e-3 * scale, "%s: gradient differs by %g (largest %g)",
                 kiln_tensor_name(lq->params[i]), worst, scale);
        free(a), free(b);
    }
    lora_free(lq), lora_free(lf);
    llama_free(q), llama_free(f);
    kiln_ctx_free(ctx), kiln_ctx_free(fctx);
    remove(path), rmdir(dir);
}

/* QLoRA's recipe whole: NF4_DQ, bf16 ends and products, checkpointing,
 * 8-bit AdamW */
KT_TEST(qlora_training_leaves_the_nf4_dq_base_bit_identical) {
    char dir[64] = "/tmp/kiln_qlora_XXXXXX", path[128];
    write_f16(dir, path, sizeof path);
    KT_OK(kiln_set_matmul_precision(KILN_MATMUL_BF16));
    kiln_ctx *ctx = kiln_ctx_new();
    llama *q = llama_qlora_from_gguf(ctx, path, KILN_NF4_DQ, KILN_BF16);
    KT_NOTNULL(q);
    size_t size, size2;
    char *before = nnt_snapshot(q->params, q->n_params, &size);
    lora *l = attach(q);
    KT_NOTNULL(l);
    double *a0 = nnt_values(l->params[0]); /* layer 0's wq: the gradient crossed layer 1's quantized weights */
    model_graph g;
    KT_OK(llama_train_graph(q, 2, 8, &g));
    nnt_fill_ints(g.input, 64, 5), nnt_fill_ints(g.labels, 64, 6);
    kiln_adam_config ac = kiln_adamw_defaults();
    ac.lr = 1e-2f;
    kiln_optim *opt = kiln_adamw8bit_new_for(ctx, l->params, l->n_params, &ac);
    KT_NOTNULL(opt);
    double first = 0, last = 0;
    for (int s = 0; s < 6; s++) {
        KT_OK(kiln_graph_compute(g.graph));
        KT_OK(kiln_optim_step(opt));
        last = kiln_tensor_item(g.loss);
        if (!s) first = last;
    }
    KT_CHECK(last < first - 0.05, "loss %g -> %g", first, last);
    double *a1 = nnt_values(l->params[0]);
    KT_CHECK(a0 && a1 && a0[0] != a1[0], "layer 0's lora_A did not move");
    free(a0), free(a1);
    char *after = nnt_snapshot(q->params, q->n_params, &size2);
    KT_CHECK(before && after && size == size2 && !memcmp(before, after, size), "a base weight changed");
    free(before), free(after);
    lora_free(l);
    llama_free(q);
    kiln_ctx_free(ctx);
    kiln_set_matmul_precision(KILN_MATMUL_F32);
    remove(path), rmdir(dir);
}

/* A Hugging Face directory and the GGUF of the same model (llama.cpp's
 * converter's layout) quantize to the same bytes; Q8_0 as base: this
 * model's width (32) is not whole NF4 blocks. llama_qlora_new makes such
 * a model empty (untied). */
KT_TEST(qlora_from_hf_equals_from_gguf) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *h = llama_qlora_from_hf(ctx, "tests/fixtures/arch/llama-rope-tiny-hf", KILN_Q8_0, KILN_F32);
    KT_NOTNULL(h);
    kiln_ctx *ctx2 = kiln_ctx_new();
    llama *g = llama_qlora_from_gguf(ctx2, "tests/fixtures/arch/llama-rope-tiny.gguf", KILN_Q8_0, KILN_F32);
    KT_NOTNULL(g);
    kiln_ctx *ctx3 = kiln_ctx_new();
    llama *e = llama_qlora_new(ctx3, &g->cfg, KILN_Q8_0, KILN_F32);
    KT_NOTNULL(e);
    KT_CHECK(h->n_params == g->n_params && h->checkpoint, "%d and %d params", h->n_params, g->n_params);
    KT_CHECK(e->checkpoint && kiln_tensor_dtype(e->layers[1].w2) == KILN_Q8_0 &&
                 kiln_tensor_dtype(e->output) == KILN_F32 && kiln_tensor_dtype(e->norm) == KILN_F32,
             "llama_qlora_new's model");
    KT_CHECK(kiln_tensor_dtype(h->layers[0].wq) == KILN_Q8_0 && kiln_tensor_dtype(h->tok_embeddings) == KILN_F32,
             "wq %s, embedding %s", kiln_dtype_name(kiln_tensor_dtype(h->layers[0].wq)),
             kiln_dtype_name(kiln_tensor_dtype(h->tok_embeddings)));
    for (int i = 0; i < g->n_params && h->n_params == g->n_params; i++) {
        const kiln_tensor *a = h->params[i], *b = g->params[i];
        KT_CHECK(kiln_tensor_dtype(a) == kiln_tensor_dtype(b) && kiln_tensor_nbytes(a) == kiln_tensor_nbytes(b) &&
                     !memcmp(kiln_tensor_data(a), kiln_tensor_data(b), kiln_tensor_nbytes(a)),
                 "'%s' differs", kiln_tensor_name(b));
    }
    llama_free(h), llama_free(g), llama_free(e);
    kiln_ctx_free(ctx), kiln_ctx_free(ctx2), kiln_ctx_free(ctx3);
}

/* A model narrower than NF4's 64-element block (width 32) loads for QLoRA:
 * the layers that cannot be NF4 stay in f32, the others are NF4. */
KT_TEST(qlora_keeps_narrow_layers_in_f32) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_qlora_from_gguf(ctx, "tests/fixtures/arch/llama-rope-tiny.gguf", KILN_NF4_DQ, KILN_F32);
    KT_NOTNULL(m);
    KT_CHECK(kiln_tensor_dtype(m->layers[0].wq) == KILN_F32, "wq [32, 32] %s",
             kiln_dtype_name(kiln_tensor_dtype(m->layers[0].wq)));
    KT_CHECK(kiln_tensor_dtype(m->layers[0].w2) == KILN_NF4, "w2 [32, 64] %s",
             kiln_dtype_name(kiln_tensor_dtype(m->layers[0].w2)));
    llama_free(m);
    kiln_ctx_free(ctx);
}
