/* test_llama_files.c — a llama from files (models/llama_files.c): a tiny
 * model written as GGUF (F32, F16) and loaded back gives the in-memory
 * model's logits; a Hugging Face directory (config.json + safetensors in
 * HF's names and HF's permuted q/k rows; single file, sharded, tied
 * embeddings) gives the logits of a plain double computation of HF's
 * LlamaForCausalLM formulas (rotate-half rope) from the raw weights, which
 * shares nothing with kiln's llama. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <sys/stat.h>
#include <unistd.h>

static llama_config tiny(void) {
    llama_config c = llama_defaults();
    c.vocab = 37;
    c.context = 16;
    c.layers = 2;
    c.heads = 4;
    c.kv_heads = 2;
    c.dim = 32;
    c.hidden = 48;
    c.norm_eps = 1e-5;
    c.rope_theta = 500.0;
    return c;
}

static const int T = 7;
static const int32_t TOKENS[7] = {3, 36, 0, 17, 17, 5, 29};

KT_TEST(llama_files_gguf_round_trip_f32_f16) {
    for (int half = 0; half < 2; half++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama_config c = tiny();
        llama *m = llama_new(ctx, &c, 1);
        KT_NOTNULL(m);
        llama_test_randomize(m, 10, 0.3);
        if (half) /* make the weights exact in f16, so F16 loads them unchanged */
            for (int i = 0; i < m->n_params; i++) {
                kiln_tensor *p = m->params[i];
                if (kiln_tensor_ndim(p) != 2) continue;
                int64_t n = kiln_tensor_numel(p);
                kiln_tensor *h = kiln_tensor_new(ctx, KILN_F16, 2, kiln_tensor_shape(p));
                float *f = malloc((size_t)n * sizeof *f);
                kiln_tensor_get_f32(p, f, n);
                kiln_tensor_set_f32(h, f, n);
                kiln_tensor_get_f32(h, f, n);
                kiln_tensor_set_f32(p, f, n);
                free(f);
            }
        const char *path = kt_tmp_path(half ? "m16.gguf" : "m32.gguf");
        KT_OK(llama_save_gguf(m, path, half ? KILN_F16 : KILN_F32));
        kiln_gguf *g = kiln_gguf_open(path);
        KT_NOTNULL(g);
        kiln_gguf_tensor_info ti;
        KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, "blk.1.attn_k.weight"), &ti));
        KT_CHECK(ti.ggml_type == (half ? KILN_GGML_F16 : KILN_GGML_F32) && ti.ne[0] == 32 && ti.ne[1] == 16,
                 "attn_k is %s ne [%lld, %lld]", ti.type_name, (long long)ti.ne[0], (long long)ti.ne[1]);
        kiln_gguf_close(g);
        kiln_ctx *ctx2 = kiln_ctx_new();
        llama *m2 = llama_from_gguf(ctx2, path);
        KT_NOTNULL(m2);
        KT_CHECK(m2->cfg.layers == 2 && m2->cfg.kv_heads == 2 && m2->cfg.hidden == 48 && m2->cfg.vocab == 37 &&
                     fabs(m2->cfg.rope_theta - 500) < 1e-9 && m2->cfg.context == 16,
                 "config");
        float *a = llama_test_logits(m, TOKENS, T), *b = llama_test_logits(m2, TOKENS, T);
        KT_NOTNULL(a);
        KT_NOTNULL(b);
        double worst = 0;
        for (int i = 0; i < T * 37; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
        KT_CHECK(worst <= 1e-5, "%s: logits differ by %g", half ? "F16" : "F32", worst);
        free(a), free(b);
        llama_free(m), llama_free(m2);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
        unlink(path);
    }
}

/* Q8_0 and Q4_0 files (kiln_quantize's blocks, ggml's layout): loaded and
 * dequantized, the logits are those of the model with each weight matrix
 * replaced by its dequantized self. */
KT_TEST(llama_files_gguf_q8_0_q4_0) {
    const kiln_dtype types[2] = {KILN_Q8_0, KILN_Q4_0};
    for (int k = 0; k < 2; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama_config c = tiny();
        c.hidden = 64; /* every row whole blocks of 32 */
        llama *m = llama_new(ctx, &c, 5);
        KT_NOTNULL(m);
        llama_test_randomize(m, 30, 0.3);
        const char *path = kt_tmp_path(k ? "q4.gguf" : "q8.gguf");
        KT_OK(llama_save_gguf(m, path, types[k]));
        kiln_gguf *g = kiln_gguf_open(path);
        KT_NOTNULL(g);
        kiln_gguf_tensor_info ti;
        KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, "blk.0.ffn_down.weight"), &ti));
        KT_CHECK(ti.kiln_dtype == (int)types[k] && ti.nbytes == (size_t)(32 * 64 / 32 * (k ? 18 : 34)), "%s %zu bytes",
                 ti.type_name, ti.nbytes);
        kiln_gguf_close(g);
        for (int i = 0; i < m->n_params; i++) { /* the reference: each matrix through quantize/dequantize */
            kiln_tensor *p = m->params[i];
            if (kiln_tensor_ndim(p) != 2) continue;
            int64_t n = kiln_tensor_numel(p);
            kiln_tensor *qt = kiln_quantize(ctx, p, types[k]);
            KT_NOTNULL(qt);
            float *f = malloc((size_t)n * sizeof *f);
            KT_OK(kiln_tensor_get_f32(qt, f, n));
            KT_OK(kiln_tensor_set_f32(p, f, n));
            free(f);
        }
        kiln_ctx *ctx2 = kiln_ctx_new();
        llama *m2 = llama_from_gguf(ctx2, path);
        KT_NOTNULL(m2);
        float *a = llama_test_logits(m, TOKENS, T), *b = llama_test_logits(m2, TOKENS, T);
        KT_NOTNULL(a);
        KT_NOTNULL(b);
        double worst = 0;
        for (int i = 0; i < T * 37; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
        KT_CHECK(worst <= 1e-5, "%s: logits differ by %g", kiln_dtype_name(types[k]), worst);
        free(a), free(b);
        llama_free(m), llama_free(m2);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
        unlink(path);
    }
}

KT_TEST(llama_files_gguf_tied_output) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 3);
    KT_NOTNULL(m);
    llama_test_randomize(m, 20, 0.3);
    int64_t n = kiln_tensor_numel(m->tok_embeddings);
    float *e = malloc((size_t)n * sizeof *e);
    KT_OK(kiln_tensor_get_f32(m->tok_embeddings, e, n));
    KT_OK(kiln_tensor_set_f32(m->output, e, n));
    free(e);
    const char *path = kt_tmp_path("tied.gguf");
    KT_OK(llama_save_gguf(m, path, KILN_F32));
    kiln_gguf *g = kiln_gguf_open(path);
    KT_NOTNULL(g);
    KT_CHECK(kiln_gguf_find_tensor(g, "output.weight") < 0 && kiln_gguf_tensor_count(g) == 2 + 9 * 2,
             "a tied head is left out");
    kiln_gguf_close(g);
    kiln_ctx *ctx2 = kiln_ctx_new();
    llama *m2 = llama_from_gguf(ctx2, path);
    KT_NOTNULL(m2);
    float *a = llama_test_logits(m, TOKENS, T), *b = llama_test_logits(m2, TOKENS, T);
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    double worst = 0;
    for (int i = 0; i < T * 37; i++) worst = fmax(worst, fabs((double)a[i] - b[i]));
    KT_CHECK(worst <= 1e-5, "tied: logits differ by %g", worst);
    free(a), free(b);
    llama_free(m), llama_free(m2);
    kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
    unlink(path);
}

KT_TEST(llama_files_gguf_refuses_other_architectures) {
    const char *path = kt_tmp_path("gpt2.gguf");
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_string(w, "general.architecture", "gpt2"));
    KT_OK(kiln_gguf_writer_save(w, path));
    kiln_gguf_writer_free(w);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(llama_from_gguf(ctx, path), KILN_ERR_UNSUPPORTED, "gpt2");
    kiln_ctx_free(ctx);
    unlink(path);
}

/* ---- Hugging Face ---- */

typedef struct hf_w {
    int n;
    kiln_tensor *t[64];
    char names[64][96];
} hf_w;

static kiln_tensor *hf_add(hf_w *w, kiln_ctx *ctx, const char *name, int64_t r, int64_t c, double mean, double sd) {
    kiln_tensor *t = c ? kiln_new_2d(ctx, KILN_F32, r, c) : kiln_new_1d(ctx, KILN_F32, r);
    kiln_tensor_fill_randn(t, 100 + (uint64_t)w->n, mean, sd);
    snprintf(w->names[w->n], 96, "%s", name);
    w->t[w->n++] = t;
    return t;
}

/* HF-named random weights of tiny() (lm_head unless tied). */
static void hf_weights(hf_w *w, kiln_ctx *ctx, bool tied) {
    llama_config c = tiny();
    const int64_t D = c.dim, hd = D / c.heads, KV = c.kv_heads * hd, F = c.hidden;
    char n[96];
    w->n = 0;
    hf_add(w, ctx, "model.embed_tokens.weight", c.vocab, D, 0, 0.5);
    for (int l = 0; l < c.layers; l++) {
#define L(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), n)
        hf_add(w, ctx, L("input_layernorm.weight"), D, 0, 1, 0.1);
        hf_add(w, ctx, L("self_attn.q_proj.weight"), D, D, 0, 0.3);
        hf_add(w, ctx, L("self_attn.k_proj.weight"), KV, D, 0, 0.3);
        hf_add(w, ctx, L("self_attn.v_proj.weight"), KV, D, 0, 0.3);
        hf_add(w, ctx, L("self_attn.o_proj.weight"), D, D, 0, 0.3);
        hf_add(w, ctx, L("post_attention_layernorm.weight"), D, 0, 1, 0.1);
        hf_add(w, ctx, L("mlp.gate_proj.weight"), F, D, 0, 0.3);
        hf_add(w, ctx, L("mlp.up_proj.weight"), F, D, 0, 0.3);
        hf_add(w, ctx, L("mlp.down_proj.weight"), D, F, 0, 0.3);
#undef L
    }
    hf_add(w, ctx, "model.norm.weight", D, 0, 1, 0.1);
    if (!tied) hf_add(w, ctx, "lm_head.weight", c.vocab, D, 0, 0.3);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void write_config(const char *dir, bool tied) {
    char p[300], text[1024];
    snprintf(p, sizeof p, "%s/config.json", dir);
    snprintf(text, sizeof text,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 32,\n"
             " \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,\n"
             " \"num_key_value_heads\": 2, \"vocab_size\": 37, \"max_position_embeddings\": 16,\n"
             " \"rms_norm_eps\": 1e-05, \"rope_theta\": 500.0, \"rope_scaling\": null, \"hidden_act\": \"silu\",\n"
             " \"attention_bias\": false, \"tie_word_embeddings\": %s, \"torch_dtype\": \"float32\"}\n",
             tied ? "true" : "false");
    write_text(p, text);
}

/* A weight of the directory's files as doubles. */
static double *hf_get(const char *dir, const char *name, int shards) {
    char p[300];
    kiln_json_file *ix = NULL;
    if (shards) {
        snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
        ix = kiln_json_file_open(p);
        snprintf(p, sizeof p, "%s/%s", dir, kiln_json_file_string(ix, "weight_map", name));
    } else {
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
    }
    kiln_json_file_close(ix);
    kiln_safetensors *st = kiln_safetensors_open(p);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = st ? kiln_safetensors_load(st, ctx, name) : NULL;
    double *v = NULL;
    if (t) {
        v = malloc((size_t)kiln_tensor_numel(t) * sizeof *v);
        kiln_tensor_get_f64(t, v, kiln_tensor_numel(t));
    }
    kiln_ctx_free(ctx);
    kiln_safetensors_close(st);
    return v;
}

static void rms(const double *x, const double *w, int n, double eps, double *out) {
    double s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    double r = 1 / sqrt(s / n + eps);
    for (int i = 0; i < n; i++) out[i] = x[i] * r * w[i];
}
static void mv(const double *W, const double *x, int rows, int cols, double *out) {
    for (int r = 0; r < rows; r++) {
        double s = 0;
        for (int c = 0; c < cols; c++) s += W[r * cols + c] * x[c];
        out[r] = s;
    }
}
/* HF's apply_rotary_pos_emb: x*cos + rotate_half(x)*sin, rotate_half(x) = [-x2, x1] */
static void rope_half(double *x, int hd, int pos, double theta) {
    for (int j = 0; j < hd / 2; j++) {
        double f = pos * pow(theta, -2.0 * j / hd), c = cos(f), s = sin(f);
        double a = x[j], b = x[j + hd / 2];
        x[j] = a * c - b * s;
        x[j + hd / 2] = b * c + a * s;
    }
}

/* LlamaForCausalLM's forward in doubles from the files' weights. */
static double *hf_reference(const char *dir, int shards, bool tied) {
    const llama_config c = tiny();
    const int D = (int)c.dim, H = (int)c.heads, G = (int)c.kv_heads, hd = D / H, F = (int)c.hidden, V = (int)c.vocab;
    double *emb = hf_get(dir, "model.embed_tokens.weight", shards);
    double *h = calloc((size_t)T * D, sizeof *h), *x = malloc((size_t)T * D * sizeof *x);
    double *q = malloc((size_t)T * D * sizeof *q), *k = malloc((size_t)T * G * hd * sizeof *k);
    double *v = malloc((size_t)T * G * hd * sizeof *v), *att = malloc((size_t)T * D * sizeof *att);
    double *t1 = malloc((size_t)F * sizeof *t1), *t2 = malloc((size_t)F * sizeof *t2), *o = malloc((size_t)D * sizeof *o);
    for (int t = 0; t < T; t++) memcpy(h + t * D, emb + TOKENS[t] * D, (size_t)D * sizeof *h);
    char n[96];
    for (int l = 0; l < c.layers; l++) {
#define W(s) (snprintf(n, sizeof n, "model.layers.%d.%s", l, s), hf_get(dir, n, shards))
        double *ln1 = W("input_layernorm.weight"), *wq = W("self_attn.q_proj.weight"), *wk = W("self_attn.k_proj.weight"),
               *wv = W("self_attn.v_proj.weight"), *wo = W("self_attn.o_proj.weight"),
               *ln2 = W("post_attention_layernorm.weight"), *wg = W("mlp.gate_proj.weight"),
               *wu = W("mlp.up_proj.weight"), *wd = W("mlp.down_proj.weight");
#undef W
        for (int t = 0; t < T; t++) {
            rms(h + t * D, ln1, D, c.norm_eps, x + t * D);
            mv(wq, x + t * D, D, D, q + t * D);
            mv(wk, x + t * D, G * hd, D, k + t * G * hd);
            mv(wv, x + t * D, G * hd, D, v + t * G * hd);
            for (int a = 0; a < H; a++) rope_half(q + t * D + a * hd, hd, t, c.rope_theta);
            for (int a = 0; a < G; a++) rope_half(k + t * G * hd + a * hd, hd, t, c.rope_theta);
        }
        for (int t = 0; t < T; t++)
            for (int a = 0; a < H; a++) {
                int g = a / (H / G); /* repeat_kv */
                double sc[16], mx = -1e300, sum = 0;
                for (int s = 0; s <= t; s++) {
                    double d = 0;
                    for (int j = 0; j < hd; j++) d += q[t * D + a * hd + j] * k[s * G * hd + g * hd + j];
                    sc[s] = d / sqrt((double)hd);
                    mx = fmax(mx, sc[s]);
                }
                for (int s = 0; s <= t; s++) sum += (sc[s] = exp(sc[s] - mx));
                for (int j = 0; j < hd; j++) {
                    double acc = 0;
                    for (int s = 0; s <= t; s++) acc += sc[s] / sum * v[s * G * hd + g * hd + j];
                    att[t * D + a * hd + j] = acc;
                }
            }
        for (int t = 0; t < T; t++) {
            mv(wo, att + t * D, D, D, o);
            for (int i = 0; i < D; i++) h[t * D + i] += o[i];
            rms(h + t * D, ln2, D, c.norm_eps, x + t * D);
            mv(wg, x + t * D, F, D, t1);
            mv(wu, x + t * D, F, D, t2);
            for (int i = 0; i < F; i++) t1[i] = t1[i] / (1 + exp(-t1[i])) * t2[i];
            mv(wd, t1, D, F, o);
            for (int i = 0; i < D; i++) h[t * D + i] += o[i];
        }
        free(ln1), free(wq), free(wk), free(wv), free(wo), free(ln2), free(wg), free(wu), free(wd);
    }
    double *nw = hf_get(dir, "model.norm.weight", shards);
    double *head = tied ? emb : hf_get(dir, "lm_head.weight", shards);
    double *out = malloc((size_t)T * V * sizeof *out);
    for (int t = 0; t < T; t++) {
        rms(h + t * D, nw, D, c.norm_eps, x + t * D);
        mv(head, x + t * D, V, D, out + t * V);
    }
    if (!tied) free(head);
    free(nw), free(emb), free(h), free(x), free(q), free(k), free(v), free(att), free(t1), free(t2), free(o);
    return out;
}

/* llama_from_hf's model, and llama_infer_from_hf's (F32 leaves filled a
 * chunk of rows at a time, a tied head shared), against the reference. */
static void check_hf_dir(const char *dir, int shards, bool tied, const char *what) {
    double *want = hf_reference(dir, shards, tied);
    for (int infer = 0; infer < 2; infer++) {
        kiln_ctx *ctx = kiln_ctx_new();
        llama *m = infer ? llama_infer_from_hf(ctx, dir, LLAMA_AS_STORED) : llama_from_hf(ctx, dir);
        KT_CHECK(!m || m->inference == (infer == 1), "inference model");
        if (!m) {
            kt_fail(__FILE__, __LINE__, "%s: %s: %s", what, infer ? "llama_infer_from_hf" : "llama_from_hf", kiln_last_error());
        } else {
            float *got = llama_test_logits(m, TOKENS, T);
            double *g = malloc((size_t)T * 37 * sizeof *g);
            for (int i = 0; i < T * 37; i++) g[i] = got ? got[i] : NAN;
            int64_t worst;
            double err = kt_rel_err(g, want, T * 37, 1e-4, 1e-4, &worst);
            KT_CHECK(err <= 1, "%s: logits error %.3g at %lld (%g vs %g)", what, err, (long long)worst, g[worst],
                     want[worst]);
            free(got), free(g);
        }
        llama_free(m);
        kiln_ctx_free(ctx);
    }
    free(want);
}

KT_TEST(llama_files_hf_matches_a_double_reference) {
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln_hf_XXXXXX");
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    char p[300], q[300];
    for (int pass = 0; pass < 3; pass++) {
        bool tied = pass == 1, bf16 = pass == 2; /* Hugging Face ships bf16 mostly */
        kiln_ctx *ctx = kiln_ctx_new();
        hf_w w;
        hf_weights(&w, ctx, tied);
        for (int i = 0; bf16 && i < w.n; i++) {
            kiln_tensor *h = kiln_tensor_new(ctx, KILN_BF16, kiln_tensor_ndim(w.t[i]), kiln_tensor_shape(w.t[i]));
            int64_t k = kiln_tensor_numel(h);
            float *f = malloc((size_t)k * sizeof *f);
            kiln_tensor_get_f32(w.t[i], f, k);
            kiln_tensor_set_f32(h, f, k);
            free(f);
            w.t[i] = h;
        }
        const char *names[64];
        for (int i = 0; i < w.n; i++) names[i] = w.names[i];
        write_config(dir, tied);
        snprintf(p, sizeof p, "%s/model.safetensors", dir);
        KT_OK(kiln_safetensors_save(p, w.t, names, w.n, (const char *[]){"format", "pt"}, 1));
        check_hf_dir(dir, 0, tied, tied ? "single file, tied" : bf16 ? "single file, bf16" : "single file");
        unlink(p);
        /* two shards and an index */
        int half = w.n / 2;
        snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", dir);
        KT_OK(kiln_safetensors_save(p, w.t, names, half, NULL, 0));
        snprintf(q, sizeof q, "%s/model-00002-of-00002.safetensors", dir);
        KT_OK(kiln_safetensors_save(q, w.t + half, names + half, w.n - half, NULL, 0));
        char ix[300];
        snprintf(ix, sizeof ix, "%s/model.safetensors.index.json", dir);
        FILE *f = fopen(ix, "w");
        KT_REQUIRE(f, "index");
        fprintf(f, "{\"metadata\": {\"total_size\": 0}, \"weight_map\": {");
        for (int i = 0; i < w.n; i++)
            fprintf(f, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "", names[i], i < half ? 1 : 2);
        fprintf(f, "}}\n");
        fclose(f);
        check_hf_dir(dir, 1, tied, tied ? "sharded, tied" : bf16 ? "sharded, bf16" : "sharded");
        unlink(p), unlink(q), unlink(ix);
        kiln_ctx_free(ctx);
    }
    /* the tokenizer beside it: tokenizer.json (byte-level, no merges) and config.json's bos/eos */
    write_config(dir, false);
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    FILE *tf = fopen(p, "w");
    KT_REQUIRE(tf, "tokenizer.json");
    fprintf(tf, "{\"added_tokens\": [{\"id\": 256, \"content\": \"<s>\", \"special\": true}], \"normalizer\": null, "
                "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"merges\": [], \"vocab\": {");
    for (int b = 0, k = 0; b < 256; b++) { /* GPT-2's byte alphabet */
        bool pr = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = pr ? b : 256 + k++;
        fprintf(tf, "%s\"\\u%04x\": %d", b ? ", " : "", cp, b);
    }
    fprintf(tf, "}}}");
    fclose(tf);
    snprintf(q, sizeof q, "%s/config.json", dir);
    write_text(q, "{\"hidden_size\": 32, \"bos_token_id\": 256, \"eos_token_id\": [256, 7]}");
    kiln_tokenizer *tok = llama_hf_tokenizer(dir);
    KT_NOTNULL(tok);
    int32_t ids[8];
    int64_t nid;
    KT_OK(kiln_tokenizer_encode(tok, "a b", 3, false, ids, 8, &nid));
    KT_CHECK(nid == 3 && ids[0] == 'a' && ids[1] == ' ' && ids[2] == 'b', "ids");
    KT_CHECK(kiln_tokenizer_bos(tok) == 256 && kiln_tokenizer_eos(tok) == -1, "bos %d eos %d", kiln_tokenizer_bos(tok),
             kiln_tokenizer_eos(tok));
    kiln_tokenizer_free(tok);
    unlink(p);
    /* refused: rope scaling other than Llama 3.1's, and Llama 3.1's without its settings */
    snprintf(p, sizeof p, "%s/config.json", dir);
    write_text(p, "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                  " \"vocab_size\": 37, \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 8.0}}");
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(llama_from_hf(ctx, dir), KILN_ERR_UNSUPPORTED, "rope_scaling of type 'linear'");
    write_text(p, "{\"hidden_size\": 32, \"intermediate_size\": 48, \"num_hidden_layers\": 2, \"num_attention_heads\": 4,"
                  " \"vocab_size\": 37, \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0}}");
    KT_EXPECT_ERR(llama_from_hf(ctx, dir), KILN_ERR_FORMAT, "rope_scaling.low_freq_factor");
    write_text(p, "{\"hidden_size\": 32}");
    KT_EXPECT_ERR(llama_from_hf(ctx, dir), KILN_ERR_FORMAT, "num_hidden_layers");
    kiln_ctx_free(ctx);
    unlink(p);
    rmdir(dir);
}

/* A setting no llama can have is named with its value and where it came
 * from: config.json's key and path, the GGUF's key and path, the field. */
KT_TEST(llama_files_config_errors_name_the_setting) {
    char dir[64], p[300], text[1024];
    snprintf(dir, sizeof dir, "/tmp/kiln_hfc_XXXXXX");
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(p, sizeof p, "%s/config.json", dir);
    const struct { const char *key, *value, *msg; } hf[] = {
        {"rms_norm_eps", "-1", "rms_norm_eps = -1 must be > 0 and finite"},
        {"rope_theta", "0", "rope_theta = 0 must be > 0 and finite"},
        {"num_attention_heads", "3", "num_attention_heads = 3 does not divide hidden_size = 32"},
        {"num_attention_heads", "32", "the head size hidden_size / num_attention_heads = 1 is odd"},
        {"num_key_value_heads", "3", "num_key_value_heads = 3 does not divide num_attention_heads = 4"},
    };
    const char *base[][2] = {{"hidden_size", "32"}, {"intermediate_size", "48"}, {"num_hidden_layers", "2"},
                             {"num_attention_heads", "4"}, {"vocab_size", "37"}};
    kiln_ctx *ctx = kiln_ctx_new();
    for (size_t i = 0; i < sizeof hf / sizeof *hf; i++) {
        int n = snprintf(text, sizeof text, "{\"%s\": %s", hf[i].key, hf[i].value);
        for (int k = 0; k < 5; k++)
            if (strcmp(base[k][0], hf[i].key))
                n += snprintf(text + n, sizeof text - (size_t)n, ", \"%s\": %s", base[k][0], base[k][1]);
        snprintf(text + n, sizeof text - (size_t)n, "}");
        write_text(p, text);
        kiln_clear_error();
        KT_CHECK(!llama_from_hf(ctx, dir) && kiln_last_status() == KILN_ERR_FORMAT &&
                     strstr(kiln_last_error(), "llama_from_hf: ") && strstr(kiln_last_error(), p) &&
                     strstr(kiln_last_error(), hf[i].msg),
                 "%s = %s: %s", hf[i].key, hf[i].value, kiln_last_error());
    }
    unlink(p);
    rmdir(dir);
    /* GGUF: the metadata alone is checked before any tensor is looked for */
    const char *path = kt_tmp_path("eps.gguf");
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_string(w, "general.architecture", "llama"));
    const char *ints[] = {"llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count"};
    const int64_t vals[] = {2, 32, 48, 4};
    for (int i = 0; i < 4; i++) KT_OK(kiln_gguf_set_int(w, ints[i], KILN_GGUF_UINT32, vals[i]));
    KT_OK(kiln_gguf_set_float(w, "llama.rope.freq_base", KILN_GGUF_FLOAT32, 0));
    KT_OK(kiln_gguf_writer_save(w, path));
    kiln_gguf_writer_free(w);
    kiln_clear_error();
    KT_CHECK(!llama_from_gguf(ctx, path) && kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), path) &&
                 strstr(kiln_last_error(), "llama.rope.freq_base = 0 must be > 0"),
             "gguf: %s", kiln_last_error());
    unlink(path);
    /* in code: the field */
    llama_config c = tiny();
    c.norm_eps = -1;
    KT_EXPECT_ERR(llama_new(ctx, &c, 1), KILN_ERR_ARG, "llama_new: norm_eps = -1 must be > 0");
    c = tiny();
    c.kv_heads = 3;
    KT_EXPECT_ERR(llama_new_inference(ctx, &c, KILN_F32, false), KILN_ERR_ARG,
                  "llama_new_inference: kv_heads = 3 does not divide heads = 4");
    kiln_ctx_free(ctx);
}

/* A loader's error while reading the weights names the file too. */
KT_TEST(llama_files_tensor_errors_name_the_file) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama_config c = tiny();
    llama *m = llama_new(ctx, &c, 3);
    KT_NOTNULL(m);
    const char *path = kt_tmp_path("noembd.gguf");
    KT_OK(llama_save_gguf(m, path, KILN_F32));
    /* the same metadata with an embedding one row short */
    kiln_gguf *g = kiln_gguf_open(path);
    KT_NOTNULL(g);
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    for (int i = 0; i < kiln_gguf_kv_count(g); i++) {
        const char *key = kiln_gguf_kv_key(g, i);
        int64_t v;
        double f;
        if (kiln_gguf_kv_type(g, i) == KILN_GGUF_STRING)
            KT_OK(kiln_gguf_set_string(w, key, kiln_gguf_get_string(g, key, NULL)));
        else if (kiln_gguf_kv_type(g, i) == KILN_GGUF_FLOAT32 && !kiln_gguf_get_float(g, key, &f))
            KT_OK(kiln_gguf_set_float(w, key, KILN_GGUF_FLOAT32, f));
        else if (!kiln_gguf_get_int(g, key, &v)) KT_OK(kiln_gguf_set_int(w, key, kiln_gguf_kv_type(g, i), v));
    }
    kiln_tensor *short_emb = kiln_new_2d(ctx, KILN_F32, c.vocab - 1, c.dim);
    KT_OK(kiln_gguf_add_tensor(w, "token_embd.weight", short_emb));
    const char *bad = kt_tmp_path("short.gguf");
    KT_OK(kiln_gguf_writer_save(w, bad));
    kiln_gguf_writer_free(w);
    kiln_gguf_close(g);
    kiln_ctx *x = kiln_ctx_new();
    KT_EXPECT_ERR(llama_infer_from_gguf(x, bad, LLAMA_AS_STORED), KILN_ERR_FORMAT, bad);
    KT_CHECK(strstr(kiln_last_error(), "token_embd.weight") || strstr(kiln_last_error(), "blk.0"), "%s",
             kiln_last_error());
    kiln_ctx_free(x);
    llama_free(m);
    kiln_ctx_free(ctx);
    unlink(path), unlink(bad);
}
