/* llama_files.c — loading a llama from GGUF and Hugging Face files, and
 * writing one as GGUF (see llama_files.h). */
#include "llama_files.h"

#include "hf_gptq.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- shared ---- */

/* The name of m's parameter slot k in file naming: GGUF's or Hugging Face's.
 * Order: per layer the 9 tensors of llama_layer, then embedding, norm, output. */
typedef struct slot {
    kiln_tensor *t;
    char gguf[64], hf[96];
    bool qk;   /* q or k rows: Hugging Face's are permuted */
    int heads; /* for the permutation */
    kiln_tensor **perm; /* a linear's act-order permutation (GPTQ), else NULL */
} slot;

static int slots_of(llama *m, slot *s) {
    int n = 0;
    s[n++] = (slot){m->tok_embeddings, "token_embd.weight", "model.embed_tokens.weight", false, 0, NULL};
    for (int l = 0; l < m->cfg.layers; l++) {
        llama_layer *y = &m->layers[l];
        struct { kiln_tensor *t; const char *g, *h; int qk; kiln_tensor **perm; } e[9] = {
            {y->attention_norm, "attn_norm", "input_layernorm", 0, NULL},
            {y->wq, "attn_q", "self_attn.q_proj", 1, &y->wq_perm},
            {y->wk, "attn_k", "self_attn.k_proj", 2, &y->wk_perm},
            {y->wv, "attn_v", "self_attn.v_proj", 0, &y->wv_perm},
            {y->wo, "attn_output", "self_attn.o_proj", 0, &y->wo_perm},
            {y->ffn_norm, "ffn_norm", "post_attention_layernorm", 0, NULL},
            {y->w1, "ffn_gate", "mlp.gate_proj", 0, &y->w1_perm},
            {y->w2, "ffn_down", "mlp.down_proj", 0, &y->w2_perm},
            {y->w3, "ffn_up", "mlp.up_proj", 0, &y->w3_perm},
        };
        for (int k = 0; k < 9; k++, n++) {
            s[n] = (slot){e[k].t, "", "", e[k].qk != 0,
                          (int)(e[k].qk == 1 ? m->cfg.heads : m->cfg.kv_heads), e[k].perm};
            snprintf(s[n].gguf, sizeof s[n].gguf, "blk.%d.%s.weight", l, e[k].g);
            snprintf(s[n].hf, sizeof s[n].hf, "model.layers.%d.%s.weight", l, e[k].h);
        }
    }
    s[n++] = (slot){m->norm, "output_norm.weight", "model.norm.weight", false, 0, NULL};
    s[n++] = (slot){m->output, "output.weight", "lm_head.weight", false, 0, NULL};
    return n;
}

static slot *make_slots(llama *m, int *n) {
    slot *s = calloc((size_t)(3 + 9 * m->cfg.layers), sizeof *s);
    if (!s) kiln_set_error(KILN_ERR_OOM, "llama files: out of memory");
    else *n = slots_of(m, s);
    return s;
}

/* A whole number in [1, max] from a double, or false. */
static bool whole(double v, int64_t max, int64_t *out) {
    if (!(v >= 1 && v <= (double)max && v == floor(v))) return false;
    *out = (int64_t)v;
    return true;
}

/* ---- GGUF ---- */

static const llama_config_names gguf_names = {
    "token_embd.weight's rows", "llama.context_length", "llama.block_count", "llama.attention.head_count",
    "llama.attention.head_count_kv", "llama.embedding_length", "llama.feed_forward_length",
    "llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base"};

static kiln_status gg_int(const kiln_gguf *g, const char *who, const char *path, const char *key, int64_t def,
                          int64_t *out) {
    if (kiln_gguf_find_key(g, key) < 0 && def >= 0) {
        *out = def;
        return KILN_OK;
    }
    kiln_status s = kiln_gguf_get_int(g, key, out);
    if (!s && (*out < 1 || *out > (1ll << 40)))
        s = kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s = %lld is out of range", who, path, key,
                           (long long)*out);
    return s;
}

/* (checked with the rest by llama_config_check) */
static kiln_status gg_float(const kiln_gguf *g, const char *key, double def, double *out) {
    if (kiln_gguf_find_key(g, key) < 0) {
        *out = def;
        return KILN_OK;
    }
    return kiln_gguf_get_float(g, key, out);
}

/* The file's tensor name is [rows, cols]; an error naming the key the
 * sizes came from otherwise. */
static kiln_status gguf_shape(const kiln_gguf *g, const char *who, const char *path, const char *name, int64_t rows,
                              int64_t cols, const char *key) {
    kiln_gguf_tensor_info ti;
    int i = kiln_gguf_find_tensor(g, name);
    if (i < 0 || kiln_gguf_tensor_info_at(g, i, &ti))
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: no tensor '%s'", who, path, name);
    if (ti.ndim != 2 || ti.shape[0] != rows || ti.shape[1] != cols)
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: '%s' is not [%lld, %lld] as %s says", who, path, name,
                              (long long)rows, (long long)cols, key);
    return KILN_OK;
}

/* The sizes of the metadata against the tensors, before a model of those
 * sizes is allocated: a header claiming a huge width or layer count is
 * refused here, not by an allocation of what it claims. */
static kiln_status gguf_sizes(const kiln_gguf *g, const char *who, const char *path, const llama_config *c) {
    char name[64];
    const int64_t kv = c->kv_heads * (c->dim / c->heads); /* <= dim */
    kiln_status s;
    snprintf(name, sizeof name, "blk.%lld.ffn_gate.weight", (long long)(c->layers - 1));
    if ((s = gguf_shape(g, who, path, "token_embd.weight", c->vocab, c->dim, "llama.embedding_length")) ||
        (s = gguf_shape(g, who, path, "blk.0.attn_k.weight", kv, c->dim, "llama.attention.head_count_kv")) ||
        (s = gguf_shape(g, who, path, name, c->hidden, c->dim, "llama.block_count / llama.feed_forward_length")))
        return s;
    return KILN_OK;
}

static kiln_status gguf_config(const kiln_gguf *g, const char *who, const char *path, llama_config *c) {
    const char *arch = kiln_gguf_get_string(g, "general.architecture", NULL);
    if (!arch || strcmp(arch, "llama"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: general.architecture is '%s', not 'llama'",
                              who, path, arch ? arch : "(missing)");
    *c = llama_defaults();
    int64_t rot = 0, key_len = 0;
    kiln_status s;
    if ((s = gg_int(g, who, path, "llama.block_count", -1, &c->layers)) ||
        (s = gg_int(g, who, path, "llama.embedding_length", -1, &c->dim)) ||
        (s = gg_int(g, who, path, "llama.feed_forward_length", -1, &c->hidden)) ||
        (s = gg_int(g, who, path, "llama.attention.head_count", -1, &c->heads)) ||
        (s = gg_int(g, who, path, "llama.attention.head_count_kv", c->heads, &c->kv_heads)) ||
        (s = gg_int(g, who, path, "llama.context_length", 2048, &c->context)) ||
        (s = gg_float(g, "llama.rope.freq_base", 10000.0, &c->rope_theta)) ||
        (s = gg_float(g, "llama.attention.layer_norm_rms_epsilon", 1e-5, &c->norm_eps)) ||
        (s = llama_config_check(c, &gguf_names, who, path, KILN_ERR_FORMAT)))
        return s;
    const int64_t hd = c->dim / c->heads;
    if ((s = gg_int(g, who, path, "llama.rope.dimension_count", hd, &rot)) ||
        (s = gg_int(g, who, path, "llama.attention.key_length", hd, &key_len)))
        return s;
    if (rot != hd || key_len != hd)
        return kiln_set_error(KILN_ERR_UNSUPPORTED,
                              "%s: %s: rope over %lld dims and key length %lld; kiln's llama rotates whole heads of "
                              "dim / heads = %lld",
                              who, path, (long long)rot, (long long)key_len, (long long)hd);
    const char *scaling = kiln_gguf_get_string(g, "llama.rope.scaling.type", NULL);
    if ((scaling && strcmp(scaling, "none")) || kiln_gguf_find_tensor(g, "rope_freqs.weight") >= 0)
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: rope scaling (%s) is not supported", who, path,
                              scaling ? scaling : "rope_freqs.weight");
    int e = kiln_gguf_find_tensor(g, "token_embd.weight");
    kiln_gguf_tensor_info ti;
    if (e < 0 || kiln_gguf_tensor_info_at(g, e, &ti) || ti.ndim != 2)
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: no 2-d token_embd.weight", who, path);
    c->vocab = ti.shape[0];
    if ((s = gguf_sizes(g, who, path, c))) return s;
    if (kiln_gguf_find_key(g, "llama.vocab_size") >= 0) {
        int64_t v;
        if ((s = kiln_gguf_get_int(g, "llama.vocab_size", &v))) return s;
        if (v != c->vocab)
            return kiln_set_error(KILN_ERR_FORMAT,
                                  "%s: %s: llama.vocab_size %lld but token_embd has %lld rows", who, path,
                                  (long long)v, (long long)c->vocab);
    }
    return KILN_OK;
}

/* Let the kernel drop the mapped pages of one tensor once it is copied:
 * file pages count in the resident set until then, and a model read whole
 * would show twice its size. */
static void drop_pages(const void *data, size_t n) {
#ifdef MADV_DONTNEED
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !n) return;
    uintptr_t a = (uintptr_t)data / (uintptr_t)pg * (uintptr_t)pg, b = (uintptr_t)data + n;
    madvise((void *)a, b - a, MADV_DONTNEED);
#else
    (void)data;
    (void)n;
#endif
}

/* The file's tensor called name into dst (an inference model's leaf, any
 * dtype): copied when the dtypes match, else converted a chunk of rows at
 * a time (dequantized to f32 through a small tensor of the file's dtype,
 * then llama_put_rows). */
static kiln_status gguf_into(kiln_gguf *g, const char *path, const char *name, kiln_tensor *dst) {
    kiln_gguf_tensor_info ti;
    int i = kiln_gguf_find_tensor(g, name);
    kiln_status s = i < 0 ? kiln_set_error(KILN_ERR_FORMAT, "llama_infer_from_gguf: %s: no tensor '%s'", path, name)
                          : kiln_gguf_tensor_info_at(g, i, &ti);
    if (s) return s;
    int64_t rows = kiln_tensor_ndim(dst) == 1 ? 1 : kiln_tensor_dim(dst, 0), n = kiln_tensor_numel(dst);
    int64_t cols = n / rows, fr = ti.ndim == 1 ? 1 : ti.shape[0], fn = 1;
    for (int d = 0; d < ti.ndim; d++) fn *= ti.shape[d];
    if (fn != n || fr != rows || ti.ndim > 2)
        return kiln_set_error(KILN_ERR_SHAPE, "llama_infer_from_gguf: %s: '%s' has the wrong shape for the model", path,
                              name);
    int sd = ti.kiln_dtype;
    if (sd == (int)kiln_tensor_dtype(dst) && ti.nbytes == kiln_tensor_nbytes(dst)) {
        memcpy(kiln_tensor_data(dst), ti.data, ti.nbytes);
    } else {
        if (sd < 0 || sd == KILN_I32 || (sd != KILN_F32 && sd != KILN_F16 && sd != KILN_BF16 &&
                                        !kiln_dtype_is_quantized((kiln_dtype)sd)))
            return kiln_set_error(KILN_ERR_DTYPE, "llama_infer_from_gguf: %s: '%s' is %s, which kiln cannot read", path,
                                  name, ti.type_name ? ti.type_name : "an unknown type");
        int64_t step = llama_row_chunk(dst, 1 << 20), sblk = kiln_dtype_block((kiln_dtype)sd);
        size_t ssz = kiln_dtype_size((kiln_dtype)sd);
        float *f = malloc((size_t)(step * cols) * sizeof *f);
        if (!f) s = kiln_set_error(KILN_ERR_OOM, "llama_infer_from_gguf: out of memory");
        for (int64_t r = 0; r < rows && !s; r += step) {
            int64_t k = rows - r < step ? rows - r : step;
            kiln_ctx *tmp = kiln_ctx_new();
            kiln_tensor *x = tmp ? kiln_new_2d(tmp, (kiln_dtype)sd, k, cols) : NULL;
            if (!x) s = kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
            if (!s) memcpy(kiln_tensor_data(x), (const char *)ti.data + (size_t)(r * cols / sblk) * ssz,
                           kiln_tensor_nbytes(x));
            if (!s) s = kiln_tensor_get_f32(x, f, k * cols);
            if (!s) s = llama_put_rows(dst, r, k, f);
            kiln_ctx_free(tmp);
        }
        free(f);
    }
    drop_pages(ti.data, ti.nbytes);
    return s;
}

static llama *from_gguf(kiln_ctx *ctx, const char *path, bool inference, int weights) {
    kiln_gguf *g = kiln_gguf_open(path);
    if (!g) return NULL;
    llama_config c;
    llama *m = NULL;
    slot *s = NULL;
    int n = 0;
    const char *who = inference ? "llama_infer_from_gguf" : "llama_from_gguf";
    kiln_status st = gguf_config(g, who, path, &c);
    bool tied = kiln_gguf_find_tensor(g, "output.weight") < 0;
    if (!st && inference && weights == LLAMA_AS_STORED) { /* the layers' dtype; F16/BF16 compute as F32 */
        kiln_gguf_tensor_info ti;
        int i = kiln_gguf_find_tensor(g, "blk.0.attn_q.weight");
        st = i < 0 ? kiln_set_error(KILN_ERR_FORMAT, "llama_infer_from_gguf: %s: no blk.0.attn_q.weight", path)
                   : kiln_gguf_tensor_info_at(g, i, &ti);
        if (!st && (ti.kiln_dtype < 0 || ti.kiln_dtype == KILN_I32))
            st = kiln_set_error(KILN_ERR_UNSUPPORTED, "llama_infer_from_gguf: %s: weights in %s, which kiln cannot read",
                                path, ti.type_name ? ti.type_name : "an unknown type");
        weights = st ? KILN_F32 : kiln_dtype_is_quantized((kiln_dtype)ti.kiln_dtype) ? ti.kiln_dtype : KILN_F32;
    }
    if (!st && !(m = inference ? llama_new_inference(ctx, &c, (kiln_dtype)weights, tied) : llama_new(ctx, &c, 0)))
        st = kiln_last_status();
    if (!st && !(s = make_slots(m, &n))) st = kiln_last_status();
    for (int i = 0; i < n && !st; i++) {
        const char *name = s[i].gguf;
        if (i == n - 1 && (tied || kiln_gguf_find_tensor(g, name) < 0)) { /* the head */
            if (m->tied) continue; /* the embedding tensor itself */
            name = "token_embd.weight";
        }
        st = inference ? gguf_into(g, path, name, s[i].t) : kiln_gguf_read_into(g, name, s[i].t);
    }
    free(s);
    kiln_gguf_close(g);
    if (st) {
        llama_free(m);
        return NULL;
    }
    return m;
}

llama *llama_from_gguf(kiln_ctx *ctx, const char *path) { return from_gguf(ctx, path, false, KILN_F32); }

llama *llama_infer_from_gguf(kiln_ctx *ctx, const char *path, int weights) {
    return from_gguf(ctx, path, true, weights);
}

/* The same dtype and bytes (no f32 copies: a model's two biggest tensors). */
static bool same_values(kiln_tensor *a, kiln_tensor *b) {
    size_t n = kiln_tensor_nbytes(a);
    const void *x = kiln_tensor_data(a), *y = kiln_tensor_data(b);
    return kiln_tensor_dtype(a) == kiln_tensor_dtype(b) && n == kiln_tensor_nbytes(b) &&
           kiln_tensor_numel(a) == kiln_tensor_numel(b) && x && y && !memcmp(x, y, n);
}

kiln_status llama_save_gguf(const llama *m, const char *path, kiln_dtype dtype) {
    return llama_save_gguf_tok(m, NULL, path, dtype);
}

/* The tokenizer's keys, padded to the model's vocabulary (llama.cpp wants a
 * token per embedding row); a model without one gets a byte vocabulary. */
static kiln_status put_tokenizer(kiln_gguf_writer *w, const kiln_tokenizer *tok, int64_t vocab) {
    kiln_tokenizer *own = tok ? NULL : kiln_tokenizer_bytes(vocab);
    kiln_status st = tok || own ? kiln_tokenizer_to_gguf_padded(tok ? tok : own, w, vocab) : kiln_last_status();
    kiln_tokenizer_free(own);
    return st;
}

kiln_status llama_save_gguf_tok(const llama *mc, const kiln_tokenizer *tok, const char *path, kiln_dtype dtype) {
    llama *m = (llama *)mc; /* the slots table takes non-const tensors; nothing is changed */
    if (!m || !path) return kiln_set_error(KILN_ERR_ARG, "llama_save_gguf: NULL argument");
    bool quant = dtype == KILN_Q8_0 || dtype == KILN_Q4_0;
    if (dtype != KILN_F32 && dtype != KILN_F16 && dtype != KILN_BF16 && !quant)
        return kiln_set_error(KILN_ERR_DTYPE, "llama_save_gguf: weights as %s (F32, F16, BF16, Q8_0 or Q4_0)",
                              kiln_dtype_name(dtype));
    const llama_config *c = &m->cfg;
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    kiln_ctx *tmp = kiln_ctx_new();
    int n = 0;
    slot *s = make_slots(m, &n);
    kiln_status st = !w || !s || !tmp ? KILN_ERR_OOM : KILN_OK;
    if (!st) st = kiln_gguf_set_string(w, "general.architecture", "llama");
    if (!st) st = kiln_gguf_set_string(w, "general.name", "kiln llama");
    if (!st) st = kiln_gguf_set_int(w, "llama.block_count", KILN_GGUF_UINT32, c->layers);
    if (!st) st = kiln_gguf_set_int(w, "llama.context_length", KILN_GGUF_UINT32, c->context);
    if (!st) st = kiln_gguf_set_int(w, "llama.embedding_length", KILN_GGUF_UINT32, c->dim);
    if (!st) st = kiln_gguf_set_int(w, "llama.feed_forward_length", KILN_GGUF_UINT32, c->hidden);
    if (!st) st = kiln_gguf_set_int(w, "llama.attention.head_count", KILN_GGUF_UINT32, c->heads);
    if (!st) st = kiln_gguf_set_int(w, "llama.attention.head_count_kv", KILN_GGUF_UINT32, c->kv_heads);
    if (!st) st = kiln_gguf_set_float(w, "llama.rope.freq_base", KILN_GGUF_FLOAT32, c->rope_theta);
    if (!st) st = kiln_gguf_set_float(w, "llama.attention.layer_norm_rms_epsilon", KILN_GGUF_FLOAT32, c->norm_eps);
    if (!st) st = kiln_gguf_set_int(w, "llama.rope.dimension_count", KILN_GGUF_UINT32, c->dim / c->heads);
    if (!st) st = kiln_gguf_set_int(w, "llama.vocab_size", KILN_GGUF_UINT32, c->vocab);
    if (!st) st = put_tokenizer(w, tok, c->vocab);
    /* llama.cpp's general.file_type (llama_ftype): 0 all F32, 1 mostly F16, 2 mostly Q4_0, 7 mostly Q8_0,
     * 32 mostly BF16 */
    if (!st) st = kiln_gguf_set_int(w, "general.file_type", KILN_GGUF_UINT32,
                                    dtype == KILN_F32 ? 0 : dtype == KILN_F16 ? 1 : dtype == KILN_Q4_0 ? 2
                                    : dtype == KILN_Q8_0 ? 7 : 32);
    for (int i = 0; i < n && !st; i++) {
        kiln_tensor *t = s[i].t;
        /* a tied head (the embedding's values) is left out, as llama.cpp writes tied models */
        if (i == n - 1 && (m->tied || same_values(m->output, m->tok_embeddings))) continue;
        kiln_dtype have = kiln_tensor_dtype(t);
        if (kiln_tensor_ndim(t) == 2 && have != dtype && kiln_dtype_is_quantized(have)) {
            /* an inference model's quantized weight: its values in f32 first (one tensor at a time would
             * need the writer to take them at once; the writer reads them at save) */
            kiln_tensor *f = kiln_tensor_new(tmp, KILN_F32, 2, kiln_tensor_shape(t));
            st = f ? kiln_tensor_get_f32(t, kiln_tensor_data(f), kiln_tensor_numel(t)) : kiln_last_status();
            t = f;
        }
        if (st || kiln_tensor_ndim(t) != 2 || kiln_tensor_dtype(t) == dtype) {
        } else if (quant) { /* ggml's block layout: kiln_quantize makes it */
            if (!(t = kiln_quantize(tmp, t, dtype))) st = kiln_last_status();
        } else { /* norms (1-d) stay F32 */
            kiln_tensor *h = kiln_tensor_new(tmp, dtype, 2, kiln_tensor_shape(t));
            int64_t k = kiln_tensor_numel(t);
            float *f = h ? malloc((size_t)k * sizeof *f) : NULL;
            st = !f ? KILN_ERR_OOM : kiln_tensor_get_f32(t, f, k);
            if (!st) st = kiln_tensor_set_f32(h, f, k);
            free(f);
            t = h;
        }
        if (!st) st = kiln_gguf_add_tensor(w, s[i].gguf, t);
    }
    if (st == KILN_ERR_OOM && !kiln_last_status()) kiln_set_error(st, "llama_save_gguf: out of memory");
    if (!st) st = kiln_gguf_writer_save(w, path);
    free(s);
    kiln_gguf_writer_free(w);
    kiln_ctx_free(tmp);
    return st;
}

/* ---- Hugging Face ---- */

static const llama_config_names hf_names = {"vocab_size",   "max_position_embeddings", "num_hidden_layers",
                                            "num_attention_heads", "num_key_value_heads", "hidden_size",
                                            "intermediate_size", "rms_norm_eps", "rope_theta"};

static kiln_status hf_config(const char *who, const char *dir, llama_config *c, bool *tied) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    kiln_json_file *j = kiln_json_file_open(p);
    if (!j) return kiln_last_status();
    *c = llama_defaults();
    kiln_status s = KILN_OK;
    const char *type = kiln_json_file_string(j, NULL, "model_type");
    if (type && strcmp(type, "llama"))
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: model_type is '%s', not 'llama'", who, p, type);
    struct { const char *key; int64_t *out; int64_t def; } ints[] = {
        {"num_hidden_layers", &c->layers, -1},     {"hidden_size", &c->dim, -1},
        {"intermediate_size", &c->hidden, -1},     {"num_attention_heads", &c->heads, -1},
        {"vocab_size", &c->vocab, -1},             {"max_position_embeddings", &c->context, 2048},
        {"num_key_value_heads", &c->kv_heads, 0},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && !s; i++) {
        double v;
        if (!kiln_json_file_has(j, NULL, ints[i].key) && ints[i].def >= 0) {
            *ints[i].out = ints[i].def;
            continue;
        }
        if ((s = kiln_json_file_number(j, NULL, ints[i].key, &v))) break;
        if (!whole(v, 1ll << 40, ints[i].out))
            s = kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s = %g is not a positive integer", who, p, ints[i].key, v);
    }
    double v;
    if (!s && kiln_json_file_has(j, NULL, "rms_norm_eps")) {
        if (!(s = kiln_json_file_number(j, NULL, "rms_norm_eps", &v))) c->norm_eps = v;
    }
    if (!s && kiln_json_file_has(j, NULL, "rope_theta")) {
        if (!(s = kiln_json_file_number(j, NULL, "rope_theta", &v))) c->rope_theta = v;
    }
    *tied = false;
    if (!s && kiln_json_file_has(j, NULL, "tie_word_embeddings") &&
        !(s = kiln_json_file_number(j, NULL, "tie_word_embeddings", &v)))
        *tied = v != 0;
    if (!s && kiln_json_file_has(j, NULL, "rope_scaling"))
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: rope_scaling is not supported", who, p);
    const char *bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2 && !s; i++)
        if (kiln_json_file_has(j, NULL, bias[i]) && !kiln_json_file_number(j, NULL, bias[i], &v) && v != 0)
            s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: %s is not supported", who, p, bias[i]);
    const char *act = kiln_json_file_string(j, NULL, "hidden_act");
    if (!s && act && strcmp(act, "silu"))
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: hidden_act '%s' (kiln's llama is SwiGLU)", who, p, act);
    if (!s) s = llama_config_check(c, &hf_names, who, p, KILN_ERR_FORMAT);
    if (!s && kiln_json_file_has(j, NULL, "head_dim") && !(s = kiln_json_file_number(j, NULL, "head_dim", &v)) &&
        v != (double)(c->dim / c->heads))
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: head_dim %g is not hidden_size / heads", who, p, v);
    if (!s && kiln_json_file_has(j, NULL, "partial_rotary_factor") &&
        !(s = kiln_json_file_number(j, NULL, "partial_rotary_factor", &v)) && v != 1)
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: partial rotary embeddings", who, p);
    kiln_json_file_close(j);
    return s;
}

/* The weight files: model.safetensors, or the shards of the index. */
typedef struct shards {
    const char *who; /* the call loading them, for messages */
    kiln_json_file *index;
    char *names[64];
    kiln_safetensors *st[64];
    int n;
} shards;

static void shards_close(shards *sh) {
    for (int i = 0; i < sh->n; i++) {
        free(sh->names[i]);
        kiln_safetensors_close(sh->st[i]);
    }
    kiln_json_file_close(sh->index);
}

static kiln_safetensors *shard_for(shards *sh, const char *dir, const char *tensor) {
    const char *file = "model.safetensors";
    if (sh->index && !(file = kiln_json_file_string(sh->index, "weight_map", tensor))) return NULL;
    if (strchr(file, '/') || !strcmp(file, "..")) {
        kiln_set_error(KILN_ERR_FORMAT, "%s: the index names '%s', not a file in %s", sh->who, file, dir);
        return NULL;
    }
    for (int i = 0; i < sh->n; i++)
        if (!strcmp(sh->names[i], file)) return sh->st[i];
    if (sh->n == 64) {
        kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: more than 64 shards", sh->who);
        return NULL;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    kiln_safetensors *st = kiln_safetensors_open(p);
    if (!st) return NULL;
    if (!(sh->names[sh->n] = strdup(file))) {
        kiln_safetensors_close(st);
        kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who);
        return NULL;
    }
    sh->st[sh->n++] = st;
    return st;
}

/* Row i of a q or k weight [rows, ...] in Meta's order is row src[i] of
 * Hugging Face's: Meta's row h*hd + 2i + p is HF's h*hd + p*hd/2 + i. */
static void qk_rows(int64_t *src, int64_t rows, int heads) {
    const int64_t hd = rows / heads;
    for (int64_t h = 0; h < heads; h++)
        for (int64_t p = 0; p < 2; p++)
            for (int64_t i = 0; i < hd / 2; i++) src[h * hd + 2 * i + p] = h * hd + p * hd / 2 + i;
}

/* The values f [n] (Hugging Face's rows) into slot s: q/k rows permuted
 * back, then converted to its dtype a chunk of rows at a time. */
static kiln_status put_values(const char *who, const slot *s, float *f, int64_t n) {
    float *g = NULL;
    const int64_t rows = kiln_tensor_ndim(s->t) == 1 ? 1 : kiln_tensor_dim(s->t, 0), cols = n / rows;
    if (s->qk) {
        int64_t *src = malloc((size_t)rows * sizeof *src);
        if (src && (g = malloc((size_t)n * sizeof *g))) {
            qk_rows(src, rows, s->heads);
            for (int64_t i = 0; i < rows; i++) memcpy(g + i * cols, f + src[i] * cols, (size_t)cols * sizeof *f);
            f = g;
        }
        free(src);
        if (!g) return kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
    }
    kiln_status r = KILN_OK;
    if (kiln_tensor_dtype(s->t) == KILN_F32) {
        r = kiln_tensor_set_f32(s->t, f, n);
    } else { /* an inference model's dtype: converted a chunk of rows at a time */
        const int64_t step = llama_row_chunk(s->t, 1 << 20);
        for (int64_t i = 0; i < rows && !r; i += step)
            r = llama_put_rows(s->t, i, rows - i < step ? rows - i : step, f + i * cols);
    }
    free(g);
    return r;
}

/* Tensor name of the files into slot s. */
static kiln_status hf_read(shards *sh, const char *dir, const char *name, const slot *s) {
    kiln_safetensors *st = shard_for(sh, dir, name);
    if (!st) {
        if (!kiln_last_status())
            kiln_set_error(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", sh->who, dir, name);
        return kiln_last_status() ? kiln_last_status() : KILN_ERR_FORMAT;
    }
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *t = tmp ? kiln_safetensors_load(st, tmp, name) : NULL;
    kiln_status r = t ? KILN_OK : kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    int64_t n = kiln_tensor_numel(s->t);
    if (!r && (kiln_tensor_ndim(t) != kiln_tensor_ndim(s->t) || kiln_tensor_numel(t) != n ||
               kiln_tensor_dim(t, 0) != kiln_tensor_dim(s->t, 0)))
        r = kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' has the wrong shape for config.json", sh->who, dir, name);
    float *f = NULL;
    if (!r && !(f = malloc((size_t)n * sizeof *f))) r = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who);
    if (!r) r = kiln_tensor_get_f32(t, f, n);
    if (!r) r = put_values(sh->who, s, f, n);
    free(f);
    kiln_ctx_free(tmp);
    return r;
}

/* The file holding tensor name, or NULL (no error) where none has it. */
static kiln_safetensors *shard_with(shards *sh, const char *dir, const char *name) {
    kiln_safetensors *st = shard_for(sh, dir, name);
    if (st && kiln_safetensors_find(st, name) >= 0) return st;
    kiln_clear_error();
    return NULL;
}

/* GPTQ linear base (its .qweight, .qzeros, .scales, .g_idx) into slot s:
 * stored as it is where s holds gptq_dtype (its act-order permutation
 * into *s->perm), dequantized otherwise. */
static kiln_status hf_read_gptq(shards *sh, const char *dir, const char *base, const slot *s, const hf_gptq *gq,
                                kiln_dtype gptq_dtype, kiln_ctx *ctx) {
    static const char *const suffix[4] = {"qweight", "qzeros", "scales", "g_idx"};
    kiln_safetensors *st[4];
    for (int k = 0; k < 4; k++) {
        char name[160];
        snprintf(name, sizeof name, "%s.%s", base, suffix[k]);
        st[k] = shard_with(sh, dir, name);
    }
    const int64_t rows = kiln_tensor_dim(s->t, 0), cols = kiln_tensor_dim(s->t, 1);
    kiln_gptq_result *r = hf_gptq_read(gq, sh->who, dir, base, &(hf_gptq_files){st[0], st[1], st[2], st[3]}, rows,
                                       cols);
    if (!r) return kiln_last_status();
    kiln_status e = KILN_OK;
    if (s->perm && kiln_tensor_dtype(s->t) == gptq_dtype) {
        int64_t *src = s->qk ? malloc((size_t)rows * sizeof *src) : NULL;
        if (s->qk && !src) e = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who);
        if (src) qk_rows(src, rows, s->heads);
        if (!e && src) e = hf_gptq_permute_rows(r, src);
        if (!e) e = hf_gptq_store(r, base, s->t, ctx, s->perm);
        free(src);
    } else {
        float *f = malloc((size_t)(rows * cols) * sizeof *f);
        e = !f ? kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who) : kiln_gptq_dequantize(r, f);
        if (!e) e = put_values(sh->who, s, f, rows * cols);
        free(f);
    }
    kiln_gptq_result_free(r);
    return e;
}

/* The GPTQ name of weight name (base.qweight) into q, where gq and the
 * files hold it; else false. */
static bool gptq_name(shards *sh, const char *dir, const hf_gptq *gq, const char *name, char *q, size_t size) {
    const size_t n = strlen(name);
    if (!gq || n < 7 || strcmp(name + n - 7, ".weight")) return false;
    snprintf(q, size, "%.*s.qweight", (int)(n - 7), name);
    return shard_with(sh, dir, q) != NULL;
}

/* The weight files' tensor name is [rows, cols] (as hf_read checks it
 * later; a GPTQ linear's qweight [cols * bits / 32, rows]), or an error
 * naming the config.json keys. */
static kiln_status hf_shape(shards *sh, const char *dir, const char *name, int64_t rows, int64_t cols,
                            const char *keys, const hf_gptq *gq) {
    char qname[160];
    if (gptq_name(sh, dir, gq, name, qname, sizeof qname)) {
        name = qname;
        int64_t r = rows;
        rows = cols * gq->bits / 32;
        cols = r;
    }
    kiln_safetensors *st = shard_for(sh, dir, name);
    int i = st ? kiln_safetensors_find(st, name) : -1;
    kiln_safetensors_info in;
    if (i < 0 || kiln_safetensors_info_at(st, i, &in)) {
        if (!st && kiln_last_status()) return kiln_last_status();
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", sh->who, dir, name);
    }
    if (in.ndim != 2 || in.shape[0] != rows || in.shape[1] != cols)
        return kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' is not [%lld, %lld] as config.json's %s say", sh->who,
                              dir, name, (long long)rows, (long long)cols, keys);
    return KILN_OK;
}

/* config.json's sizes against the weights, before a model of those sizes
 * is allocated: a config claiming a huge width or layer count is refused
 * here, not by an allocation of what it claims. */
static kiln_status hf_sizes(shards *sh, const char *dir, const llama_config *c, const hf_gptq *gq) {
    /* hf_config checked the settings (llama_config_check) */
    const int64_t kv = (c->kv_heads ? c->kv_heads : c->heads) * (c->dim / c->heads); /* <= dim */
    char name[96];
    snprintf(name, sizeof name, "model.layers.%lld.mlp.gate_proj.weight", (long long)(c->layers - 1));
    kiln_status s;
    if ((s = hf_shape(sh, dir, "model.embed_tokens.weight", c->vocab, c->dim, "vocab_size and hidden_size", NULL)) ||
        (s = hf_shape(sh, dir, "model.layers.0.self_attn.k_proj.weight", kv, c->dim,
                      "num_key_value_heads and hidden_size", gq)) ||
        (s = hf_shape(sh, dir, name, c->hidden, c->dim, "num_hidden_layers and intermediate_size", gq)))
        return s;
    return KILN_OK;
}

/* A GPTQ model kept as stored: the embedding and the head in F32 (the
 * checkpoint's values; GPTQ quantizes the layers' linears only) in place
 * of the quantized ones llama_new_inference made. */
static kiln_status float_ends(llama *m) {
    kiln_tensor *e = kiln_tensor_new(m->ctx, KILN_F32, 2, kiln_tensor_shape(m->tok_embeddings));
    kiln_tensor *o = m->tied ? e : kiln_tensor_new(m->ctx, KILN_F32, 2, kiln_tensor_shape(m->output));
    if (!e || !o) return kiln_last_status();
    kiln_tensor_set_name(e, kiln_tensor_name(m->tok_embeddings));
    kiln_tensor_set_name(o, kiln_tensor_name(m->output));
    for (int i = 0; i < m->n_params; i++)
        if (m->params[i] == m->tok_embeddings) m->params[i] = e;
        else if (m->params[i] == m->output) m->params[i] = o;
    m->tok_embeddings = e;
    m->output = o;
    return KILN_OK;
}

/* Equal act-order permutations of a stack's weights (q, k, v; gate, up)
 * made one tensor, which the stack runs with as one product (llama.h). */
static void share_perms(llama *m) {
    for (int l = 0; l < m->cfg.layers; l++) {
        llama_layer *y = &m->layers[l];
        kiln_tensor **g[2][3] = {{&y->wq_perm, &y->wk_perm, &y->wv_perm}, {&y->w1_perm, &y->w3_perm, NULL}};
        for (int k = 0; k < 2; k++) {
            const int n = k ? 2 : 3;
            bool same = *g[k][0] != NULL;
            for (int i = 1; same && i < n; i++)
                same = *g[k][i] && kiln_tensor_nbytes(*g[k][i]) == kiln_tensor_nbytes(*g[k][0]) &&
                       !memcmp(kiln_tensor_data(*g[k][i]), kiln_tensor_data(*g[k][0]), kiln_tensor_nbytes(*g[k][0]));
            for (int i = 0; same && i < n; i++) *g[k][i] = y->stacked_perm[3 * k + i] = *g[k][0];
        }
    }
}

static llama *from_hf(kiln_ctx *ctx, const char *dir, bool inference, int weights) {
    const char *who = inference ? "llama_infer_from_hf" : "llama_from_hf";
    if (!ctx || !dir) {
        kiln_set_error(KILN_ERR_ARG, "%s: NULL argument", who);
        return NULL;
    }
    llama_config c;
    bool tied = false;
    hf_gptq gq;
    bool gptq = false;
    if (hf_config(who, dir, &c, &tied) || hf_gptq_config(who, dir, &gq, &gptq)) return NULL;
    shards sh = {.who = who};
    char qname[160];
    char p[4096];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    FILE *f = fopen(p, "rb");
    if (f) {
        fclose(f);
        if (!(sh.index = kiln_json_file_open(p))) return NULL;
    }
    if (inference && !tied) { /* no lm_head: tied too, one tensor */
        kiln_safetensors *x = shard_for(&sh, dir, "lm_head.weight");
        tied = (!x || kiln_safetensors_find(x, "lm_head.weight") < 0) &&
               !gptq_name(&sh, dir, gptq ? &gq : NULL, "lm_head.weight", qname, sizeof qname);
        kiln_clear_error();
    }
    /* a GPTQ checkpoint as stored: its linears' codes in a GQ dtype (or Q8_0) */
    const bool stored = gptq && inference && weights == LLAMA_AS_STORED;
    kiln_dtype gptq_dtype = KILN_DTYPE_COUNT;
    if (hf_sizes(&sh, dir, &c, gptq ? &gq : NULL) ||
        (stored && (gptq_dtype = hf_gptq_dtype(&gq, who, (int64_t[]){c.dim, c.hidden}, 2)) == KILN_DTYPE_COUNT)) {
        shards_close(&sh);
        return NULL;
    }
    if (weights == LLAMA_AS_STORED) weights = stored ? gptq_dtype : KILN_F32; /* safetensors hold f32, f16 or bf16 */
    llama *m = inference ? llama_new_inference(ctx, &c, (kiln_dtype)weights, tied) : llama_new(ctx, &c, 0);
    kiln_status st = !m ? kiln_last_status() : stored ? float_ends(m) : KILN_OK;
    int n = 0;
    slot *s = st ? NULL : make_slots(m, &n);
    if (!st && !s) st = kiln_last_status();
    for (int i = 0; i < n && !st; i++) {
        const char *name = s[i].hf;
        if (i == n - 1 && m->tied) continue; /* the embedding tensor itself */
        bool q = gptq_name(&sh, dir, gptq ? &gq : NULL, name, qname, sizeof qname);
        if (i == n - 1 && (tied || (!q && !shard_with(&sh, dir, name)))) {
            name = "model.embed_tokens.weight";
            q = false;
        }
        if (q) {
            qname[strlen(qname) - 8] = '\0'; /* the linear's name, less .qweight */
            st = hf_read_gptq(&sh, dir, qname, &s[i], &gq, gptq_dtype, m->ctx);
        } else {
            st = hf_read(&sh, dir, name, &s[i]);
        }
    }
    if (!st && stored) share_perms(m);
    free(s);
    shards_close(&sh);
    if (st) {
        llama_free(m);
        return NULL;
    }
    return m;
}

llama *llama_from_hf(kiln_ctx *ctx, const char *dir) { return from_hf(ctx, dir, false, KILN_F32); }

llama *llama_infer_from_hf(kiln_ctx *ctx, const char *dir, int weights) { return from_hf(ctx, dir, true, weights); }

/* ---- tokenizers ---- */

kiln_tokenizer *llama_gguf_tokenizer(const char *path) {
    kiln_gguf *g = kiln_gguf_open(path);
    kiln_tokenizer *t = g ? kiln_tokenizer_from_gguf(g) : NULL;
    kiln_gguf_close(g);
    return t;
}

kiln_tokenizer *llama_hf_tokenizer(const char *dir) {
    if (!dir) {
        kiln_set_error(KILN_ERR_ARG, "llama_hf_tokenizer: dir is NULL");
        return NULL;
    }
    char p[4096];
    snprintf(p, sizeof p, "%s/tokenizer.json", dir);
    kiln_tokenizer *t = kiln_tokenizer_from_json(p);
    if (!t) return NULL;
    snprintf(p, sizeof p, "%s/config.json", dir);
    kiln_json_file *j = kiln_json_file_open(p);
    if (!j) { /* a directory without config.json: no bos/eos */
        kiln_clear_error();
        return t;
    }
    double bos = -1, eos = -1;
    if (kiln_json_file_number(j, NULL, "bos_token_id", &bos)) bos = -1;
    if (kiln_json_file_number(j, NULL, "eos_token_id", &eos)) eos = -1; /* a list (Llama 3.1): left unset */
    kiln_clear_error();
    kiln_json_file_close(j);
    kiln_tokenizer_set_bos_eos(t, (int32_t)bos, (int32_t)eos);
    return t;
}
