/* test_llama_infer.c — the inference llama (llama_new_inference, and
 * llama_infer_from_gguf / _hf): weights kept quantized give the logits of
 * the f32 llama whose weights are their dequantized values, within what the
 * batch-1 path's int8 activations change; the KV cache's steps give the
 * full forward's logits; nothing has a gradient. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <sys/stat.h>
#include <unistd.h>

static llama_config tiny(void) {
    llama_config c = llama_defaults();
    c.vocab = 40;
    c.context = 16;
    c.layers = 2;
    c.heads = 4;
    c.kv_heads = 2;
    c.dim = 64; /* rows whole blocks of 64 for NF4 */
    c.hidden = 128;
    c.rope_theta = 500.0;
    return c;
}

enum { T = 7 };
static const int32_t TOKENS[T] = {3, 39, 0, 17, 17, 5, 29};

/* An f32 llama_new model whose parameters are q's values (dequantized). */
static llama *dequantized_copy(kiln_ctx *ctx, llama *q) {
    llama *r = llama_new(ctx, &q->cfg, 1);
    if (!r || r->n_params != q->n_params + (q->tied ? 1 : 0)) return NULL;
    for (int i = 0; i < r->n_params; i++) {
        /* the same order; a tied model lists no head */
        kiln_tensor *src = i == r->n_params - 1 ? q->output : q->params[i], *dst = r->params[i];
        int64_t n = kiln_tensor_numel(dst);
        float *f = malloc((size_t)n * sizeof *f);
        kiln_status s = kiln_tensor_get_f32(src, f, n);
        if (!s) s = kiln_tensor_set_f32(dst, f, n);
        free(f);
        if (s) return NULL;
    }
    return r;
}

/* Largest |a - b| over n, and largest |b|. */
static double worst_diff(const float *a, const float *b, int64_t n, double *scale) {
    double w = 0;
    *scale = 0;
    for (int64_t i = 0; i < n; i++) {
        w = fmax(w, fabs((double)a[i] - b[i]));
        *scale = fmax(*scale, fabs((double)b[i]));
    }
    return w;
}

/* The quantized model's logits against its dequantized f32 twin. The int8
 * activations (per block of 32, absmax / 127) move each product by up to
 * 1/254 of |x| |w| per element; over two layers the logits stay within a
 * few percent of their scale (measured: up to 1.6% with these weights). */
static void check_against_f32(llama *q, const char *what) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *r = dequantized_copy(ctx, q);
    KT_NOTNULL(r);
    float *a = llama_test_logits(q, TOKENS, T), *b = r ? llama_test_logits(r, TOKENS, T) : NULL;
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    double scale = 0, w = a && b ? worst_diff(a, b, T * q->cfg.vocab, &scale) : 1e9;
    KT_CHECK(w <= 0.03 * scale, "%s: logits differ by %g (scale %g)", what, w, scale);
    free(a), free(b);
    llama_free(r);
    kiln_ctx_free(ctx);
}

KT_TEST(llama_infer_gguf_as_stored_q8_0_q4_0) {
    const kiln_dtype types[2] = {KILN_Q8_0, KILN_Q4_0};
    for (int k = 0; k < 2; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama_config c = tiny();
        llama *m = llama_new(ctx, &c, 5);
        KT_NOTNULL(m);
        llama_test_randomize(m, 30, 0.08);
        const char *path = kt_tmp_path(k ? "q4.gguf" : "q8.gguf");
        KT_OK(llama_save_gguf(m, path, types[k]));
        kiln_ctx *ctx2 = kiln_ctx_new();
        llama *q = llama_infer_from_gguf(ctx2, path, LLAMA_AS_STORED);
        KT_NOTNULL(q);
        if (!q) continue;
        KT_CHECK(q->inference && q->weights == types[k] && kiln_tensor_dtype(q->layers[1].w2) == types[k] &&
                     kiln_tensor_dtype(q->tok_embeddings) == types[k] && kiln_tensor_dtype(q->norm) == KILN_F32,
                 "dtypes: %s", kiln_dtype_name(kiln_tensor_dtype(q->layers[1].w2)));
        bool grads = false;
        for (int i = 0; i < q->n_params; i++) grads |= kiln_tensor_requires_grad(q->params[i]);
        KT_CHECK(!grads, "an inference model has no gradients");
        /* the blocks are the file's bytes */
        kiln_gguf *g = kiln_gguf_open(path);
        kiln_gguf_tensor_info ti;
        KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, "blk.1.ffn_down.weight"), &ti));
        KT_CHECK(ti.nbytes == kiln_tensor_nbytes(q->layers[1].w2) &&
                     !memcmp(ti.data, kiln_tensor_data(q->layers[1].w2), ti.nbytes),
                 "ffn_down's blocks as stored");
        kiln_gguf_close(g);
        check_against_f32(q, kiln_dtype_name(types[k]));
        llama_free(m), llama_free(q);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
        unlink(path);
    }
}

/* An F32 file converted on load to each dtype (NF4_DQ needs whole
 * super-blocks of 16384: here the bigger matrices are, the rest fall back
 * to NF4), and back to F32: the values are exactly the file's. */
KT_TEST(llama_infer_gguf_converts_on_load) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    c.dim = 128, c.hidden = 256, c.vocab = 128;
    llama *m = llama_new(ctx, &c, 7);
    KT_NOTNULL(m);
    llama_test_randomize(m, 40, 0.08);
    const char *path = kt_tmp_path("f32.gguf");
    KT_OK(llama_save_gguf(m, path, KILN_F32));
    const kiln_dtype types[5] = {KILN_F32, KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};
    for (int k = 0; k < 5; k++) {
        kiln_ctx *ctx2 = kiln_ctx_new();
        llama *q = llama_infer_from_gguf(ctx2, path, types[k]);
        KT_NOTNULL(q);
        if (!q) continue;
        kiln_dtype want_w2 = types[k], want_wk = types[k] == KILN_NF4_DQ ? KILN_NF4 : types[k];
        KT_CHECK(kiln_tensor_dtype(q->layers[0].w2) == want_w2 && kiln_tensor_dtype(q->layers[0].wk) == want_wk &&
                     kiln_tensor_dtype(q->tok_embeddings) == llama_embedding_dtype(types[k]),
                 "%s: w2 %s, wk %s", kiln_dtype_name(types[k]), kiln_dtype_name(kiln_tensor_dtype(q->layers[0].w2)),
                 kiln_dtype_name(kiln_tensor_dtype(q->layers[0].wk)));
        /* each weight is kiln_quantize of the file's values */
        kiln_tensor *ref = types[k] == KILN_F32 ? m->layers[0].w2 : kiln_quantize(ctx, m->layers[0].w2, types[k]);
        KT_CHECK(ref && kiln_tensor_nbytes(ref) == kiln_tensor_nbytes(q->layers[0].w2) &&
                     !memcmp(kiln_tensor_data(ref), kiln_tensor_data(q->layers[0].w2), kiln_tensor_nbytes(ref)),
                 "%s: w2 is kiln_quantize's blocks", kiln_dtype_name(types[k]));
        check_against_f32(q, kiln_dtype_name(types[k]));
        llama_free(q);
        kiln_ctx_free(ctx2);
    }
    llama_free(m);
    kiln_ctx_free(ctx);
    unlink(path);
}

/* The cache: a prompt of 4 tokens, then 3 one at a time, each step's
 * logits those of the full forward at that position; the steps leave the
 * context as they found it. */
KT_TEST(llama_infer_cache_matches_forward) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *q = llama_new_inference(ctx, &c, KILN_Q4_0, false);
    KT_NOTNULL(q);
    KT_OK(llama_init_random(q, 3));
    float *full = llama_test_logits(q, TOKENS, T);
    KT_NOTNULL(full);
    llama_cache *cache = llama_cache_new(q, 1, c.context);
    KT_NOTNULL(cache);
    float step[40];
    double worst = 0, scale = 0;
    size_t held = kiln_ctx_storage_bytes(ctx);
    for (int t = 4; t <= T && full && cache; t++) {
        KT_OK(t == 4 ? llama_cache_step(q, cache, TOKENS, 4, step) : llama_cache_step(q, cache, TOKENS + t - 1, 1, step));
        if (t == 5) held = kiln_ctx_storage_bytes(ctx); /* the first one-token step makes the cache's decode graph */
        KT_CHECK(kiln_ctx_storage_bytes(ctx) == held, "step %d keeps nothing in the context (rewound)", t);
        double s;
        worst = fmax(worst, worst_diff(step, full + (t - 1) * c.vocab, c.vocab, &s));
        scale = fmax(scale, s);
    }
    KT_CHECK(scale > 0 && worst <= 1e-5 * scale + 1e-6, "cache logits differ by %g (scale %g)", worst, scale);
    free(full);
    llama_cache_free(cache);
    llama_free(q);
    kiln_ctx_free(ctx);
}

/* Random weights drawn chunk by chunk: N(0, 0.02) through Q4_0. */
KT_TEST(llama_infer_random_weights) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *q = llama_new_inference(ctx, &c, KILN_Q4_0, true);
    KT_NOTNULL(q);
    KT_CHECK(q->output == q->tok_embeddings && q->n_params == 2 + 9 * c.layers, "tied: one tensor");
    KT_OK(llama_init_random(q, 9));
    int64_t n = kiln_tensor_numel(q->layers[0].w1);
    float *f = malloc((size_t)n * sizeof *f);
    KT_OK(kiln_tensor_get_f32(q->layers[0].w1, f, n));
    double ss = 0;
    for (int64_t i = 0; i < n; i++) ss += (double)f[i] * f[i];
    KT_CHECK(fabs(sqrt(ss / (double)n) - 0.02) < 0.003, "std %g", sqrt(ss / (double)n));
    free(f);
    /* embedding 40 x 2 blocks of 18 bytes; per layer norms 2 x 256, wq, wo 64 x 2 x 18, wk, wv 32 x 2 x 18,
     * w1, w3 128 x 2 x 18, w2 64 x 4 x 18; the final norm 256 */
    KT_CHECK(llama_weight_bytes(q) == 1440 + 2 * (512 + 2 * 2304 + 2 * 1152 + 3 * 4608) + 256, "weight bytes %lld",
             (long long)llama_weight_bytes(q));
    /* a tied model saves without a head and loads back tied, the same values */
    const char *path = kt_tmp_path("tied.gguf");
    KT_OK(llama_save_gguf(q, path, KILN_Q4_0));
    kiln_ctx *ctx2 = kiln_ctx_new();
    llama *r = llama_infer_from_gguf(ctx2, path, LLAMA_AS_STORED);
    KT_NOTNULL(r);
    KT_CHECK(r && r->tied && !memcmp(kiln_tensor_data(r->layers[1].w3), kiln_tensor_data(q->layers[1].w3),
                                     kiln_tensor_nbytes(q->layers[1].w3)),
             "tied and the same blocks");
    if (r) check_against_f32(r, "tied Q4_0");
    llama_free(q), llama_free(r);
    kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
    unlink(path);
}

/* An F16 file as stored: F32 leaves holding exactly what llama_from_gguf
 * reads (the F16 values), the same logits. */
KT_TEST(llama_infer_gguf_f16_as_f32) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 11);
    KT_NOTNULL(m);
    llama_test_randomize(m, 50, 0.08);
    const char *path = kt_tmp_path("f16.gguf");
    KT_OK(llama_save_gguf(m, path, KILN_F16));
    /* a context's parameter names are unique: one context per model */
    kiln_ctx *ca = kiln_ctx_new(), *cq = kiln_ctx_new();
    llama *a = llama_from_gguf(ca, path), *q = llama_infer_from_gguf(cq, path, LLAMA_AS_STORED);
    KT_NOTNULL(a);
    KT_NOTNULL(q);
    if (a && q) {
        KT_CHECK(q->weights == KILN_F32 && kiln_tensor_dtype(q->layers[0].w1) == KILN_F32, "F16 as F32");
        float *x = llama_test_logits(a, TOKENS, T), *y = llama_test_logits(q, TOKENS, T);
        double scale, w = x && y ? worst_diff(y, x, T * c.vocab, &scale) : 1e9;
        KT_CHECK(w == 0, "logits differ by %g", w);
        free(x), free(y);
    }
    llama_free(m), llama_free(a), llama_free(q);
    kiln_ctx_free(ctx), kiln_ctx_free(ca), kiln_ctx_free(cq);
    unlink(path);
}

KT_TEST(llama_infer_refuses_bad_dtypes) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    KT_EXPECT_ERR(llama_new_inference(ctx, &c, KILN_I32, false), KILN_ERR_DTYPE, "weights in");
    c.dim = 32; /* not whole NF4 blocks of 64 */
    c.heads = 2, c.kv_heads = 2;
    KT_CHECK(llama_new_inference(ctx, &c, KILN_NF4, false) == NULL, "NF4 with rows of 32");
    kiln_ctx_free(ctx);
}

/* Logits of the full forward over TOKENS and of a cache run (a prompt of
 * 4, then one token at a time) into out [2 T vocab]. */
static kiln_status both_paths(llama *m, float *out) {
    float *full = llama_test_logits(m, TOKENS, T);
    if (!full) return kiln_last_status() ? kiln_last_status() : KILN_ERR_STATE;
    int64_t V = m->cfg.vocab;
    memcpy(out, full, (size_t)(T * V) * sizeof *out);
    free(full);
    llama_cache *cache = llama_cache_new(m, 1, m->cfg.context);
    kiln_status s = cache ? llama_cache_step(m, cache, TOKENS, 4, out + (T + 3) * V) : kiln_last_status();
    for (int t = 5; t <= T && !s; t++) s = llama_cache_step(m, cache, TOKENS + t - 1, 1, out + (T + t - 1) * V);
    memset(out + T * V, 0, (size_t)(3 * V) * sizeof *out); /* positions the prompt step does not give */
    llama_cache_free(cache);
    return s;
}

/* An inference model stacks wq|wk|wv and w1|w3 (the weights are row views
 * of one leaf each) and runs one product per stack: the logits are those
 * of one product per weight, bit for bit, in every weight dtype, through
 * the batched and the batch-1 path; a weight replaced after the model was
 * made is used (its group then runs unfused). */
KT_TEST(llama_infer_fused_matches_unfused) {
    const kiln_dtype types[] = {KILN_F32, KILN_Q8_0, KILN_Q4_0, KILN_NF4};
    llama_config c = tiny();
    int64_t V = c.vocab;
    float *a = malloc((size_t)(4 * T * V) * sizeof *a), *b = a + 2 * T * V;
    KT_NOTNULL(a);
    for (int k = 0; k < 4 && a; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = llama_new_inference(ctx, &c, types[k], false);
        KT_NOTNULL(m);
        if (!m) break;
        KT_OK(llama_init_random(m, 11));
        const llama_layer *y = &m->layers[1];
        const char *qkv = kiln_tensor_data(y->wqkv), *w13 = kiln_tensor_data(y->w13);
        KT_CHECK(qkv && w13 && kiln_tensor_data(y->wq) == qkv &&
                     kiln_tensor_data(y->wk) == qkv + kiln_tensor_nbytes(y->wq) &&
                     kiln_tensor_data(y->wv) == qkv + kiln_tensor_nbytes(y->wq) + kiln_tensor_nbytes(y->wk) &&
                     kiln_tensor_data(y->w3) == w13 + kiln_tensor_nbytes(y->w1) &&
                     kiln_tensor_dim(y->wqkv, 0) == 128 && kiln_tensor_dim(y->w13, 0) == 256 &&
                     m->n_params == 3 + 9 * c.layers,
                 "%s: the weights are rows of the stacked leaves", kiln_dtype_name(types[k]));
        KT_CHECK(m->fuse, "inference models fuse");
        KT_OK(both_paths(m, a));
        m->fuse = false;
        KT_OK(both_paths(m, b));
        KT_CHECK(!memcmp(a, b, (size_t)(2 * T * V) * sizeof *a), "%s: fused and unfused logits differ",
                 kiln_dtype_name(types[k]));
        /* a new wk and w3: fused and unfused both read them */
        llama_layer *z = &m->layers[0];
        kiln_tensor *wk = kiln_tensor_new(ctx, kiln_tensor_dtype(z->wk), 2, (int64_t[]){32, 64});
        kiln_tensor *w3 = kiln_tensor_new(ctx, kiln_tensor_dtype(z->w3), 2, (int64_t[]){128, 64});
        KT_CHECK(wk && w3, "new weights");
        if (!wk || !w3) break;
        memcpy(kiln_tensor_data(wk), kiln_tensor_data(m->layers[1].wk), kiln_tensor_nbytes(wk));
        memcpy(kiln_tensor_data(w3), kiln_tensor_data(m->layers[1].w3), kiln_tensor_nbytes(w3));
        z->wk = wk, z->w3 = w3;
        KT_OK(both_paths(m, b));
        m->fuse = true;
        KT_OK(both_paths(m, a));
        KT_CHECK(!memcmp(a, b, (size_t)(2 * T * V) * sizeof *a), "%s: a replaced weight is used when fusing",
                 kiln_dtype_name(types[k]));
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    free(a);
}

/* The training llama has no stacked weights: its parameters are leaves. */
KT_TEST(llama_train_unstacked) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 1);
    KT_NOTNULL(m);
    KT_CHECK(m && !m->fuse && !m->layers[0].wqkv && !m->layers[0].w13 && kiln_tensor_requires_grad(m->layers[0].wk),
             "training llama: no stacks");
    llama_free(m);
    kiln_ctx_free(ctx);
}

#ifdef KILN_VULKAN /* a device test: in the builds that have the backend */
/* On the Vulkan device: the stacked weights (a leaf) and their row views
 * (at an offset in it) give the same logits, Q8_0 and Q4_0. */
KT_TEST(llama_infer_fused_matches_unfused_vulkan) {
    kiln_backend *vk = kiln_backend_get("vulkan");
    if (!vk) kt_skip("no Vulkan device");
    const kiln_dtype types[] = {KILN_Q8_0, KILN_Q4_0};
    llama_config c = tiny();
    int64_t V = c.vocab;
    float *a = malloc((size_t)(4 * T * V) * sizeof *a), *b = a + 2 * T * V;
    KT_NOTNULL(a);
    for (int k = 0; k < 2 && a; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        KT_OK(kiln_ctx_set_backend(ctx, vk));
        llama *m = llama_new_inference(ctx, &c, types[k], false);
        KT_NOTNULL(m);
        if (!m) break;
        KT_OK(llama_init_random(m, 12));
        KT_OK(both_paths(m, a));
        m->fuse = false;
        KT_OK(both_paths(m, b));
        double scale, w = worst_diff(a, b, 2 * T * V, &scale);
        KT_CHECK(scale > 0 && w <= 1e-5 * scale, "%s: fused and unfused logits differ by %g (scale %g)",
                 kiln_dtype_name(types[k]), w, scale);
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    free(a);
}
#endif

/* An i32 permutation of n columns: reversed, or the identity. */
static kiln_tensor *perm_of(kiln_ctx *ctx, int64_t n, bool reversed) {
    kiln_tensor *p = kiln_tensor_new(ctx, KILN_I32, 1, (int64_t[]){n});
    int32_t v[64];
    for (int64_t i = 0; i < n && i < 64; i++) v[i] = (int32_t)(reversed ? n - 1 - i : i);
    return p && n <= 64 && !kiln_tensor_set_i32(p, v, n) ? p : NULL;
}

/* Weights put in after the model was made: llama_stack_weights stacks them
 * again (GQ4_32 with equal act-order permutations too) and the fused
 * logits stay those of one product per weight; a group whose permutations
 * differ is left unstacked. */
KT_TEST(llama_stack_weights_put_in_later) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    int64_t V = c.vocab;
    llama *m = llama_new_inference(ctx, &c, KILN_F32, false);
    float *a = malloc((size_t)(4 * T * V) * sizeof *a), *b = a + 2 * T * V;
    KT_CHECK(m && a, "model");
    if (!m || !a) return;
    KT_OK(llama_init_random(m, 5));
    llama_layer *y = &m->layers[1];
    kiln_tensor *old_qkv = y->wqkv, *old_w13 = y->w13;
    kiln_tensor **w[5] = {&y->wq, &y->wk, &y->wv, &y->w1, &y->w3};
    kiln_tensor **p[5] = {&y->wq_perm, &y->wk_perm, &y->wv_perm, &y->w1_perm, &y->w3_perm};
    for (int i = 0; i < 5; i++) {
        *w[i] = kiln_quantize(ctx, *w[i], KILN_GQ4_32);
        *p[i] = perm_of(ctx, c.dim, i != 4); /* w3's differs from w1's */
        KT_CHECK(*w[i] && *p[i], "GQ weight %d", i);
    }
    KT_OK(llama_stack_weights(m));
    KT_CHECK(m->fuse && y->wqkv != old_qkv && kiln_tensor_dtype(y->wqkv) == KILN_GQ4_32 &&
                 kiln_tensor_dim(y->wqkv, 0) == 128 && y->stacked_of[1] == y->wk && y->stacked_perm[0] == y->wq_perm,
             "wq|wk|wv stacked again, with their permutation");
    KT_CHECK(y->w13 == old_w13 && y->stacked_of[3] != y->w1, "w1|w3 with different permutations: not stacked");
    KT_OK(both_paths(m, a));
    m->fuse = false;
    KT_OK(both_paths(m, b));
    KT_CHECK(!memcmp(a, b, (size_t)(2 * T * V) * sizeof *a), "fused and unfused logits differ");
    /* equal permutations: w1|w3 stacked too, the same logits */
    y->w3_perm = y->w1_perm;
    KT_OK(llama_stack_weights(m));
    KT_CHECK(y->w13 != old_w13 && y->stacked_of[4] == y->w3, "w1|w3 stacked");
    KT_OK(both_paths(m, a));
    KT_CHECK(memcmp(a, b, (size_t)(2 * T * V) * sizeof *a), "w3's permutation changed the logits");
    m->fuse = false;
    KT_OK(both_paths(m, b));
    m->fuse = true;
    KT_CHECK(!memcmp(a, b, (size_t)(2 * T * V) * sizeof *a), "fused and unfused logits differ (w1|w3 stacked)");
    free(a);
    llama_free(m);
    kiln_ctx_free(ctx);
}
