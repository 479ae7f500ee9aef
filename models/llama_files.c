/* llama_files.c — loading a llama from GGUF and Hugging Face files, and
 * writing one as GGUF (see llama_files.h). */
#include "llama_files.h"

#include "hf_gptq.h"
#include "llama_arch.h"
#include "llama_mix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

/* ---- shared ---- */

/* Where m's parameter slot k comes from in the files: GGUF's name and
 * Hugging Face's, and its first row in that tensor (a part of a fused
 * one: Phi-3's attn_qkv, ffn_up). Order: the embedding, per layer its
 * tensors, the final norm, the output head last; the order the writer
 * writes them in, q, k, v and gate, up next to each other, so that a
 * loader maps each group as one stack. */
typedef struct slot {
    kiln_tensor *t;
    char gguf[64], hf[96];
    int64_t row0;
    bool qk;   /* q or k rows of Llama: Hugging Face's are permuted */
    int heads; /* for the permutation */
    bool norm; /* a norm's weight (Gemma's in Hugging Face files: less 1) */
    kiln_tensor **perm; /* a linear's act-order permutation (GPTQ), else NULL */
    int64_t fused_rows; /* the rows of the fused tensor it is a part of; 0: whole */
} slot;

/* the most slots: the embedding, norm and head, 14 per layer */
static int64_t max_slots(const llama *m) { return 3 + 14 * m->cfg.layers; }

static int slots_of(llama *m, slot *s) {
    const llama_traits *t = &m->cfg.traits;
    const int64_t Q = m->cfg.heads * m->cfg.head_dim, KV = m->cfg.kv_heads * m->cfg.head_dim, F = m->cfg.hidden;
    const bool fqkv = t->fused_qkv, fgu = t->fused_gate_up;
    const char *qkv_g = "attn_qkv.weight", *qkv_h = "self_attn.qkv_proj.weight", *gu_h = "mlp.gate_up_proj.weight";
    int n = 0;
    s[n++] = (slot){m->tok_embeddings, "token_embd.weight", "model.embed_tokens.weight", 0, false, 0, false, NULL, 0};
    for (int l = 0; l < m->cfg.layers; l++) {
        llama_layer *y = &m->layers[l];
        struct { kiln_tensor *t; const char *g, *h; int64_t row0; int qk; bool norm; kiln_tensor **perm; } e[14] = {
            {y->attention_norm, "attn_norm.weight", "input_layernorm.weight", 0, 0, true, NULL},
            {y->wq, fqkv ? qkv_g : "attn_q.weight", fqkv ? qkv_h : "self_attn.q_proj.weight", 0, 1, false, &y->wq_perm},
            {y->wk, fqkv ? qkv_g : "attn_k.weight", fqkv ? qkv_h : "self_attn.k_proj.weight", fqkv ? Q : 0, 2, false,
             &y->wk_perm},
            {y->wv, fqkv ? qkv_g : "attn_v.weight", fqkv ? qkv_h : "self_attn.v_proj.weight", fqkv ? Q + KV : 0, 0,
             false, &y->wv_perm},
            {y->bq, "attn_q.bias", "self_attn.q_proj.bias", 0, 0, false, NULL},
            {y->bk, "attn_k.bias", "self_attn.k_proj.bias", 0, 0, false, NULL},
            {y->bv, "attn_v.bias", "self_attn.v_proj.bias", 0, 0, false, NULL},
            {y->wo, "attn_output.weight", "self_attn.o_proj.weight", 0, 0, false, &y->wo_perm},
            {y->attn_post_norm, "post_attention_norm.weight", "post_attention_layernorm.weight", 0, 0, true, NULL},
            {y->ffn_norm, "ffn_norm.weight",
             t->post_norms ? "pre_feedforward_layernorm.weight" : "post_attention_layernorm.weight", 0, 0, true, NULL},
            {y->w1, fgu ? "ffn_up.weight" : "ffn_gate.weight", fgu ? gu_h : "mlp.gate_proj.weight", 0, 0, false,
             &y->w1_perm},
            {y->w3, "ffn_up.weight", fgu ? gu_h : "mlp.up_proj.weight", fgu ? F : 0, 0, false, &y->w3_perm},
            {y->w2, "ffn_down.weight", "mlp.down_proj.weight", 0, 0, false, &y->w2_perm},
            {y->ffn_post_norm, "post_ffw_norm.weight", "post_feedforward_layernorm.weight", 0, 0, true, NULL},
        };
        for (int k = 0; k < 14; k++) {
            if (!e[k].t) continue;
            /* Llama's q/k rows are permuted in Hugging Face's files; the NEOX architectures' are not */
            const bool in_qkv = e[k].t == y->wq || e[k].t == y->wk || e[k].t == y->wv,
                       in_gu = e[k].t == y->w1 || e[k].t == y->w3;
            s[n] = (slot){e[k].t, "", "", e[k].row0, e[k].qk && !t->neox,
                          (int)(e[k].qk == 1 ? m->cfg.heads : m->cfg.kv_heads), e[k].norm, e[k].perm,
                          fqkv && in_qkv ? Q + 2 * KV : fgu && in_gu ? 2 * F : 0};
            snprintf(s[n].gguf, sizeof s[n].gguf, "blk.%d.%s", l, e[k].g);
            snprintf(s[n].hf, sizeof s[n].hf, "model.layers.%d.%s", l, e[k].h);
            n++;
        }
    }
    s[n++] = (slot){m->norm, "output_norm.weight", "model.norm.weight", 0, false, 0, true, NULL, 0};
    s[n++] = (slot){m->output, "output.weight", "lm_head.weight", 0, false, 0, false, NULL, 0};
    return n;
}

static slot *make_slots(llama *m, int *n) {
    slot *s = calloc((size_t)max_slots(m), sizeof *s);
    if (!s) kiln_set_error(KILN_ERR_OOM, "llama files: out of memory");
    else *n = slots_of(m, s);
    return s;
}

/* ---- GGUF ---- */

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

/* Rows [row0, row0 + rows of dst) of the file's tensor called name into
 * dst (a leaf or a row view of one, host memory, any dtype; 1-d: elements
 * row0 ..): copied when the dtypes match, else converted a chunk of rows
 * at a time (dequantized to f32 through a small tensor of the file's
 * dtype, then llama_put_rows). */
static kiln_status gguf_into(kiln_gguf *g, const char *who, const char *path, const char *name, int64_t row0,
                             kiln_tensor *dst) {
    kiln_gguf_tensor_info ti;
    int i = kiln_gguf_find_tensor(g, name);
    kiln_status s = i < 0 ? kiln_set_error(KILN_ERR_FORMAT, "%s: %s: no tensor '%s'", who, path, name)
                          : kiln_gguf_tensor_info_at(g, i, &ti);
    if (s) return s;
    const bool flat = kiln_tensor_ndim(dst) == 1;
    int64_t rows = flat ? 1 : kiln_tensor_dim(dst, 0), n = kiln_tensor_numel(dst);
    int64_t cols = n / rows, fr = ti.ndim == 1 ? 1 : ti.shape[0], fn = 1;
    for (int d = 0; d < ti.ndim; d++) fn *= ti.shape[d];
    if (ti.ndim > 2 || (flat ? ti.ndim != 1 || row0 + n > fn : fn / fr != cols || row0 + rows > fr))
        return kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' has the wrong shape for the model", who, path, name);
    int sd = ti.kiln_dtype;
    if (sd < 0 || sd == KILN_I32 || (sd != KILN_F32 && sd != KILN_F16 && sd != KILN_BF16 &&
                                    !kiln_dtype_is_quantized((kiln_dtype)sd)))
        return kiln_set_error(KILN_ERR_DTYPE, "%s: %s: '%s' is %s, which kiln cannot read", who, path, name,
                              ti.type_name ? ti.type_name : "an unknown type");
    int64_t sblk = kiln_dtype_block((kiln_dtype)sd), first = flat ? row0 : row0 * cols;
    size_t ssz = kiln_dtype_size((kiln_dtype)sd);
    if (first % sblk)
        return kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' from row %lld starts inside a %s block", who, path, name,
                              (long long)row0, kiln_dtype_name((kiln_dtype)sd));
    const char *src = (const char *)ti.data + (size_t)(first / sblk) * ssz;
    if (sd == (int)kiln_tensor_dtype(dst) && kiln_tensor_is_contiguous(dst)) {
        memcpy(kiln_tensor_data(dst), src, kiln_tensor_nbytes(dst));
    } else {
        int64_t step = llama_row_chunk(dst, 1 << 20);
        float *f = malloc((size_t)(step * cols) * sizeof *f);
        if (!f) s = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
        for (int64_t r = 0; r < rows && !s; r += step) {
            int64_t k = rows - r < step ? rows - r : step;
            kiln_ctx *tmp = kiln_ctx_new();
            kiln_tensor *x = tmp ? kiln_new_2d(tmp, (kiln_dtype)sd, k, cols) : NULL;
            if (!x) s = kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
            if (!s) memcpy(kiln_tensor_data(x), src + (size_t)(r * cols / sblk) * ssz, kiln_tensor_nbytes(x));
            if (!s) s = kiln_tensor_get_f32(x, f, k * cols);
            if (!s) s = llama_put_rows(dst, r, k, f);
            kiln_ctx_free(tmp);
        }
        free(f);
    }
    drop_pages(ti.data, ti.nbytes);
    return s;
}

/* A weight's dtype as the file stores it (llama_new_inference_typed's
 * chooser): its own quantized type, F32 for F32, F16 and BF16 (and for a
 * type kiln cannot read, which gguf_into then names). */
typedef struct stored {
    kiln_gguf *g;
    const llama_traits *t;
    kiln_ctx *ctx;                /* where mapped leaves go */
    const unsigned char *lo, *hi; /* the file's tensor bytes */
} stored;

static kiln_dtype stored_dtype(void *user, const char *name, int64_t rows, int64_t cols) {
    (void)rows, (void)cols;
    const stored *st = user;
    static const struct { const char *kiln, *gguf; int fused; } map[] = {
        {"attention.wq.weight", "attn_q", 1},     {"attention.wk.weight", "attn_k", 1},
        {"attention.wv.weight", "attn_v", 1},     {"attention.wo.weight", "attn_output", 0},
        {"feed_forward.w1.weight", "ffn_gate", 2}, {"feed_forward.w2.weight", "ffn_down", 0},
        {"feed_forward.w3.weight", "ffn_up", 0},
    };
    char file[96] = "token_embd.weight", what[64];
    int layer;
    if (sscanf(name, "layers.%d.%63s", &layer, what) == 2) {
        for (size_t i = 0; i < sizeof map / sizeof *map; i++)
            if (!strcmp(what, map[i].kiln)) {
                const char *g = map[i].fused == 1 && st->t->fused_qkv       ? "attn_qkv"
                                : map[i].fused == 2 && st->t->fused_gate_up ? "ffn_up"
                                                                            : map[i].gguf;
                snprintf(file, sizeof file, "blk.%d.%s.weight", layer, g);
            }
    } else if (!strcmp(name, "output.weight") && kiln_gguf_find_tensor(st->g, name) >= 0) {
        snprintf(file, sizeof file, "%s", name);
    }
    kiln_gguf_tensor_info ti;
    int i = kiln_gguf_find_tensor(st->g, file);
    if (i < 0 || kiln_gguf_tensor_info_at(st->g, i, &ti) || ti.kiln_dtype < 0) return KILN_F32;
    return kiln_dtype_is_quantized((kiln_dtype)ti.kiln_dtype) ? (kiln_dtype)ti.kiln_dtype : KILN_F32;
}

/* llama_new_inference_leaves' source: a weight, or a stack of weights
 * (the fused tensor of Phi-3, or parts that follow each other in the
 * file), kept in the file's type is the file's bytes, mapped; NULL (made,
 * then filled by gguf_into) for the others. */
static kiln_tensor *mapped_leaf(void *user, const char *const *names, int n, kiln_dtype dtype, int ndim,
                                const int64_t *shape) {
    stored *st = user;
    char file[3][96];
    const char *fn[3] = {file[0], file[1], file[2]};
    int layer = -1;
    if (n > 1 && sscanf(names[0], "layers.%d.", &layer) == 1 && (n == 3 ? st->t->fused_qkv : st->t->fused_gate_up)) {
        snprintf(file[0], sizeof file[0], "blk.%d.%s", layer, n == 3 ? "attn_qkv.weight" : "ffn_up.weight");
        n = 1;
    } else {
        for (int i = 0; i < n; i++)
            if (n > 3 || !llama_param_gguf_name(names[i], file[i], sizeof file[i])) return NULL;
    }
    for (int i = 0; i < n; i++) { /* each the model's dtype, and a lone one its shape */
        kiln_gguf_tensor_info ti;
        int k = kiln_gguf_find_tensor(st->g, fn[i]);
        if (k < 0 || kiln_gguf_tensor_info_at(st->g, k, &ti) || ti.kiln_dtype != (int)dtype ||
            (n == 1 && (ti.ndim != ndim || memcmp(ti.shape, shape, (size_t)ndim * sizeof *shape))))
            return NULL;
    }
    kiln_tensor *t = kiln_gguf_map_rows(st->g, st->ctx, fn, n);
    if (!t || kiln_tensor_ndim(t) != ndim || memcmp(kiln_tensor_shape(t), shape, (size_t)ndim * sizeof *shape)) {
        kiln_clear_error(); /* not mappable (apart, unaligned): made and copied */
        return NULL;
    }
    return t;
}

/* Whether t's bytes are the file's (mapped_leaf's, or a row view of one). */
static bool is_mapped(const stored *st, kiln_tensor *t) {
    const unsigned char *p = kiln_tensor_data(t);
    return p && p >= st->lo && p < st->hi;
}

/* weights: a kiln_dtype, LLAMA_AS_STORED(_COPY), or TYPED: dtype_of chooses */
enum { TYPED = -3 };
static llama *from_gguf(kiln_ctx *ctx, const char *path, bool inference, int weights, llama_dtype_fn dtype_of,
                        void *user) {
    kiln_gguf *g = kiln_gguf_open(path);
    if (!g) return NULL;
    llama_config c;
    llama *m = NULL;
    slot *s = NULL;
    int n = 0;
    const char *who = inference ? "llama_infer_from_gguf" : "llama_from_gguf";
    kiln_status st = llama_arch_gguf_config(g, who, path, &c);
    bool tied = kiln_gguf_find_tensor(g, "output.weight") < 0;
    stored types = {g, &c.traits, ctx, NULL, NULL};
    for (int i = 0; i < kiln_gguf_tensor_count(g); i++) {
        kiln_gguf_tensor_info ti;
        if (kiln_gguf_tensor_info_at(g, i, &ti)) continue;
        const unsigned char *p = ti.data;
        if (!types.lo || p < types.lo) types.lo = p;
        if (!types.hi || p + ti.nbytes > types.hi) types.hi = p + ti.nbytes;
    }
    if (!st && !(m = !inference                        ? llama_new(ctx, &c, 0)
                     : weights == TYPED                ? llama_new_inference_typed(ctx, &c, dtype_of, user, tied)
                     : weights == LLAMA_AS_STORED      ? llama_new_inference_leaves(ctx, &c, stored_dtype, mapped_leaf,
                                                                                    &types, tied)
                     : weights == LLAMA_AS_STORED_COPY ? llama_new_inference_typed(ctx, &c, stored_dtype, &types, tied)
                                                       : llama_new_inference(ctx, &c, (kiln_dtype)weights, tied)))
        st = kiln_last_status();
    if (!st && !(s = make_slots(m, &n))) st = kiln_last_status();
    for (int i = 0; i < n && !st; i++) {
        const char *name = s[i].gguf;
        if (i == n - 1 && (tied || kiln_gguf_find_tensor(g, name) < 0)) { /* the head */
            if (m->tied) continue; /* the embedding tensor itself */
            name = "token_embd.weight";
        }
        if (inference && is_mapped(&types, s[i].t)) continue; /* the file's bytes already */
        /* a training model's leaves take the file's tensors whole (on any backend) */
        st = inference || c.traits.fused_qkv || c.traits.fused_gate_up ? gguf_into(g, who, path, name, s[i].row0, s[i].t)
                                                                       : kiln_gguf_read_into(g, name, s[i].t);
    }
    if (!st && m->rope_freqs) st = gguf_into(g, who, path, "rope_freqs.weight", 0, m->rope_freqs);
    free(s);
    kiln_gguf_close(g);
    if (st) {
        llama_free(m);
        return NULL;
    }
    return m;
}

llama *llama_from_gguf(kiln_ctx *ctx, const char *path) { return from_gguf(ctx, path, false, KILN_F32, NULL, NULL); }

llama *llama_infer_from_gguf(kiln_ctx *ctx, const char *path, int weights) {
    return from_gguf(ctx, path, true, weights, NULL, NULL);
}

llama *llama_infer_from_gguf_typed(kiln_ctx *ctx, const char *path, llama_dtype_fn dtype_of, void *user) {
    return from_gguf(ctx, path, true, TYPED, dtype_of, user);
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

/* Each 2-d weight's dtype in the file: dtype for every one (pure), or the
 * mix's (llama_mix_dtype), or its own (LLAMA_FTYPE_AS_STORED). */
typedef struct save_plan {
    llama_ftype mix; /* LLAMA_FTYPE_UNKNOWN: every weight in dtype */
    kiln_dtype dtype;
} save_plan;

static kiln_dtype planned(const save_plan *p, const llama *m, bool tied, const char *name, kiln_tensor *t) {
    if (kiln_tensor_ndim(t) != 2) return kiln_tensor_dtype(t); /* norms stay F32 as llama.cpp writes them */
    if (p->mix == LLAMA_FTYPE_UNKNOWN) return p->dtype;
    if (p->mix == LLAMA_FTYPE_AS_STORED) return kiln_tensor_dtype(t);
    return llama_mix_dtype(p->mix, &m->cfg, tied, name, kiln_tensor_shape(t)[1]);
}

/* t's values in dtype (a new tensor of tmp; t itself when it has it). */
static kiln_tensor *converted(kiln_ctx *tmp, kiln_tensor *t, kiln_dtype dtype) {
    kiln_dtype have = kiln_tensor_dtype(t);
    if (have == dtype) return t;
    if (kiln_dtype_is_quantized(have)) { /* an inference model's quantized weight: its values in f32 first */
        kiln_tensor *f = kiln_tensor_new(tmp, KILN_F32, 2, kiln_tensor_shape(t));
        if (!f || kiln_tensor_get_f32(t, kiln_tensor_data(f), kiln_tensor_numel(t))) return NULL;
        t = f;
    }
    if (kiln_dtype_is_quantized(dtype)) return kiln_quantize(tmp, t, dtype); /* ggml's block layout */
    kiln_tensor *h = kiln_tensor_new(tmp, dtype, 2, kiln_tensor_shape(t));
    int64_t k = kiln_tensor_numel(t);
    float *f = h ? malloc((size_t)k * sizeof *f) : NULL;
    kiln_status st = !f ? kiln_set_error(KILN_ERR_OOM, "llama_save_gguf: out of memory") : kiln_tensor_get_f32(t, f, k);
    if (!st) st = kiln_tensor_set_f32(h, f, k);
    free(f);
    return st ? NULL : h;
}

/* general.file_type for a file of these weights: the mix's number, or that
 * of the commonest weight dtype by elements (as llama.cpp's loader guesses). */
static llama_ftype file_type_of(const save_plan *p, const kiln_dtype *types, const int64_t *elems, int n) {
    if (p->mix >= 0) return p->mix;
    int best = -1;
    for (int i = 0; i < n; i++)
        if (types[i] != KILN_DTYPE_COUNT && (best < 0 || elems[i] > elems[best])) best = i;
    return best < 0 ? LLAMA_FTYPE_ALL_F32 : llama_ftype_of_dtype(types[best]);
}

static kiln_status save(const llama *mc, const kiln_tokenizer *tok, const char *path, save_plan plan) {
    llama *m = (llama *)mc; /* the slots table takes non-const tensors; nothing is changed */
    const char *who = "llama_save_gguf";
    if (!m || !path) return kiln_set_error(KILN_ERR_ARG, "%s: NULL argument", who);
    if (plan.mix == LLAMA_FTYPE_UNKNOWN && ((unsigned)plan.dtype >= KILN_DTYPE_COUNT ||
                                            llama_ftype_of_dtype(plan.dtype) == LLAMA_FTYPE_UNKNOWN))
        return kiln_set_error(KILN_ERR_DTYPE, "%s: %s: weights as %s, which llama.cpp stores no weights in (F32, F16, "
                              "BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K ... Q6_K, IQ4_NL, IQ4_XS)",
                              who, path, kiln_dtype_name(plan.dtype));
    if (plan.mix != LLAMA_FTYPE_UNKNOWN && plan.mix != LLAMA_FTYPE_AS_STORED && !llama_ftype_name(plan.mix))
        return kiln_set_error(KILN_ERR_ARG, "%s: %s: llama_ftype %d is no mix kiln makes (%s)", who, path,
                              (int)plan.mix, llama_ftype_names());
    const llama_config *c = &m->cfg;
    if ((c->traits.arch && strcmp(c->traits.arch, "llama")) || m->rope_freqs || c->head_dim * c->heads != c->dim)
        return kiln_set_error(KILN_ERR_UNSUPPORTED,
                              "%s: writes Llama models (no rope_freqs, head_dim dim / heads), not this %s", who,
                              c->traits.arch ? c->traits.arch : "llama");
    int n = 0;
    slot *s = make_slots(m, &n);
    if (!s) return kiln_last_status();
    /* a tied head (the embedding's values) is left out, as llama.cpp writes tied models */
    const bool tied = m->tied || same_values(m->output, m->tok_embeddings);
    const int n_write = tied ? n - 1 : n;
    kiln_dtype *types = calloc((size_t)n, sizeof *types);
    int64_t *elems = calloc((size_t)n, sizeof *elems);
    kiln_status st = types && elems ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
    for (int i = 0; i < n_write && !st; i++) {
        kiln_tensor *t = s[i].t;
        types[i] = planned(&plan, m, tied, s[i].gguf, t);
        elems[i] = kiln_tensor_ndim(t) == 2 ? kiln_tensor_numel(t) : 0;
        if (types[i] == KILN_DTYPE_COUNT || llama_ftype_of_dtype(types[i]) == LLAMA_FTYPE_UNKNOWN)
            st = kiln_set_error(KILN_ERR_DTYPE, "%s: %s: '%s' is %s, which llama.cpp stores no weights in", who,
                                path, s[i].gguf, kiln_dtype_name(types[i]));
        else if (kiln_tensor_ndim(t) == 2 && kiln_tensor_shape(t)[1] % kiln_dtype_block(types[i]))
            st = kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' has %lld columns, not whole %s blocks of %lld", who,
                                path, s[i].gguf, (long long)kiln_tensor_shape(t)[1], kiln_dtype_name(types[i]),
                                (long long)kiln_dtype_block(types[i]));
        if (kiln_tensor_ndim(t) != 2) types[i] = KILN_DTYPE_COUNT; /* not counted in the file type */
    }
    kiln_gguf_writer *w = st ? NULL : kiln_gguf_writer_new();
    kiln_ctx *tmp = st ? NULL : kiln_ctx_new();
    if (!st && (!w || !tmp)) st = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", who);
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
    if (!st) st = kiln_gguf_set_int(w, "general.file_type", KILN_GGUF_UINT32, file_type_of(&plan, types, elems, n));
    for (int i = 0; i < n_write && !st; i++) {
        kiln_tensor *t = s[i].t;
        if (kiln_tensor_ndim(t) == 2 && !(t = converted(tmp, t, types[i]))) st = kiln_last_status();
        if (!st) st = kiln_gguf_add_tensor(w, s[i].gguf, t);
    }
    if (st == KILN_ERR_OOM && !kiln_last_status()) kiln_set_error(st, "%s: out of memory", who);
    if (!st) st = kiln_gguf_writer_save(w, path);
    free(s), free(types), free(elems);
    kiln_gguf_writer_free(w);
    kiln_ctx_free(tmp);
    return st;
}

kiln_status llama_save_gguf_tok(const llama *m, const kiln_tokenizer *tok, const char *path, kiln_dtype dtype) {
    return save(m, tok, path, (save_plan){LLAMA_FTYPE_UNKNOWN, dtype});
}

kiln_status llama_save_gguf_mix(const llama *m, const kiln_tokenizer *tok, const char *path, llama_ftype mix) {
    return save(m, tok, path, (save_plan){mix, KILN_F32});
}

/* ---- Hugging Face ---- */

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

/* Tensor name of the files (rows from s->row0) into slot s, q/k rows
 * permuted back, a Gemma norm's weight made whole (plus_one). */
static kiln_status hf_read(shards *sh, const char *dir, const char *name, const slot *s, bool plus_one) {
    kiln_safetensors *st = shard_for(sh, dir, name);
    if (!st) {
        if (!kiln_last_status())
            kiln_set_error(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", sh->who, dir, name);
        return kiln_last_status() ? kiln_last_status() : KILN_ERR_FORMAT;
    }
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *t = tmp ? kiln_safetensors_load(st, tmp, name) : NULL;
    kiln_status r = t ? KILN_OK : kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    int64_t n = kiln_tensor_numel(s->t), rows = kiln_tensor_dim(s->t, 0), fn = t ? kiln_tensor_numel(t) : 0;
    if (!r && (kiln_tensor_ndim(t) != kiln_tensor_ndim(s->t) || fn / kiln_tensor_dim(t, 0) != n / rows ||
               kiln_tensor_dim(t, 0) < s->row0 + rows))
        r = kiln_set_error(KILN_ERR_SHAPE, "%s: %s: '%s' has the wrong shape for config.json", sh->who, dir, name);
    float *f = NULL;
    if (!r && !(f = malloc((size_t)fn * sizeof *f))) r = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who);
    if (!r) r = kiln_tensor_get_f32(t, f, fn);
    if (!r && s->row0) memmove(f, f + s->row0 * (n / rows), (size_t)n * sizeof *f);
    for (int64_t i = 0; !r && plus_one && i < n; i++) f[i] += 1;
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
 * its rows from s->row0 (a part of a fused linear), Llama's q/k rows in
 * Meta's order, stored as they are where s holds gptq_dtype (its act-order
 * permutation into *s->perm), dequantized otherwise. */
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
    kiln_gptq_result *r = hf_gptq_read(gq, sh->who, dir, base, &(hf_gptq_files){st[0], st[1], st[2], st[3]},
                                       s->fused_rows ? s->fused_rows : rows, cols);
    if (!r) return kiln_last_status();
    kiln_status e = KILN_OK;
    if (s->qk || s->fused_rows) {
        int64_t *src = malloc((size_t)rows * sizeof *src);
        if (!src) e = kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who);
        for (int64_t i = 0; src && !s->qk && i < rows; i++) src[i] = i;
        if (src && s->qk) qk_rows(src, rows, s->heads);
        for (int64_t i = 0; src && i < rows; i++) src[i] += s->row0;
        if (!e) e = hf_gptq_take_rows(r, src, rows);
        free(src);
    }
    if (!e && s->perm && kiln_tensor_dtype(s->t) == gptq_dtype) {
        e = hf_gptq_store(r, base, s->t, ctx, s->perm);
    } else if (!e) {
        slot plain = *s; /* its rows already in place */
        plain.qk = false;
        float *f = malloc((size_t)(rows * cols) * sizeof *f);
        e = !f ? kiln_set_error(KILN_ERR_OOM, "%s: out of memory", sh->who) : kiln_gptq_dequantize(r, f);
        if (!e) e = put_values(sh->who, &plain, f, rows * cols);
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
    /* llama_arch_hf_config checked the settings (llama_config_check) */
    const int64_t hd = c->head_dim ? c->head_dim : c->dim / c->heads, kv = (c->kv_heads ? c->kv_heads : c->heads) * hd;
    const bool fqkv = c->traits.fused_qkv, fgu = c->traits.fused_gate_up;
    char name[96];
    snprintf(name, sizeof name, "model.layers.%lld.mlp.%s.weight", (long long)(c->layers - 1),
             fgu ? "gate_up_proj" : "gate_proj");
    kiln_status s;
    if ((s = hf_shape(sh, dir, "model.embed_tokens.weight", c->vocab, c->dim, "vocab_size and hidden_size", NULL)) ||
        (s = hf_shape(sh, dir, fqkv ? "model.layers.0.self_attn.qkv_proj.weight"
                                    : "model.layers.0.self_attn.k_proj.weight",
                      fqkv ? c->heads * hd + 2 * kv : kv, c->dim, "num_key_value_heads, head_dim, hidden_size", gq)) ||
        (s = hf_shape(sh, dir, name, fgu ? 2 * c->hidden : c->hidden, c->dim,
                      "num_hidden_layers and intermediate_size", gq)))
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

static llama *from_hf(kiln_ctx *ctx, const char *dir, bool inference, int weights, llama_dtype_fn dtype_of,
                      void *user) {
    const char *who = inference ? "llama_infer_from_hf" : "llama_from_hf";
    if (!ctx || !dir) {
        kiln_set_error(KILN_ERR_ARG, "%s: NULL argument", who);
        return NULL;
    }
    llama_config c;
    bool tied = false;
    hf_gptq gq;
    bool gptq = false;
    llama3_scaling scaling;
    if (llama_arch_hf_config(who, dir, &c, &tied, &scaling) || hf_gptq_config(who, dir, &gq, &gptq)) return NULL;
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
    const bool stored = gptq && inference && (weights == LLAMA_AS_STORED || weights == LLAMA_AS_STORED_COPY);
    kiln_dtype gptq_dtype = KILN_DTYPE_COUNT;
    const int64_t ins[3] = {c.dim, c.hidden, c.heads * (c.head_dim ? c.head_dim : c.dim / c.heads)}; /* wo's */
    if (hf_sizes(&sh, dir, &c, gptq ? &gq : NULL) ||
        (stored && (gptq_dtype = hf_gptq_dtype(&gq, who, ins, 3)) == KILN_DTYPE_COUNT)) {
        shards_close(&sh);
        return NULL;
    }
    if (weights == LLAMA_AS_STORED || weights == LLAMA_AS_STORED_COPY) /* safetensors hold f32, f16 or bf16 */
        weights = stored ? gptq_dtype : KILN_F32;
    llama *m = !inference         ? llama_new(ctx, &c, 0)
               : weights == TYPED ? llama_new_inference_typed(ctx, &c, dtype_of, user, tied)
                                  : llama_new_inference(ctx, &c, (kiln_dtype)weights, tied);
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
            st = hf_read(&sh, dir, name, &s[i], s[i].norm && c.traits.hf_norm_minus_one);
        }
    }
    if (!st && m->rope_freqs) { /* Llama 3.1's rope_scaling as llama.cpp's converter bakes it */
        float f[4096];
        llama3_rope_factors(&scaling, c.rope_theta, m->cfg.head_dim, f);
        st = m->cfg.head_dim / 2 > 4096 ? kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: head_dim %lld", who,
                                                         (long long)m->cfg.head_dim)
                                        : kiln_tensor_set_f32(m->rope_freqs, f, m->cfg.head_dim / 2);
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

llama *llama_from_hf(kiln_ctx *ctx, const char *dir) { return from_hf(ctx, dir, false, KILN_F32, NULL, NULL); }

llama *llama_infer_from_hf(kiln_ctx *ctx, const char *dir, int weights) {
    return from_hf(ctx, dir, true, weights, NULL, NULL);
}

llama *llama_infer_from_hf_typed(kiln_ctx *ctx, const char *dir, llama_dtype_fn dtype_of, void *user) {
    return from_hf(ctx, dir, true, TYPED, dtype_of, user);
}

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
