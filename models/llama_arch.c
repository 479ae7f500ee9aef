/* llama_arch.c — each architecture's traits, and the config from GGUF keys
 * or a Hugging Face config.json (see llama_arch.h). */
#include "llama_arch.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct arch_row {
    const char *gguf, *hf[2]; /* general.architecture; config.json's model_type values */
    llama_traits t;
} arch_row;

static const arch_row ARCHS[] = {
    {"llama", {"llama", "mistral"}, {.arch = "llama"}},
    {"qwen2", {"qwen2", NULL}, {.arch = "qwen2", .neox = true, .qkv_bias = true}},
    {"phi3", {"phi3", NULL}, {.arch = "phi3", .neox = true, .swa_every = 1, .fused_qkv = true, .fused_gate_up = true}},
    {"gemma2",
     {"gemma2", NULL},
     {.arch = "gemma2", .neox = true, .post_norms = true, .embed_scale = true, .act = LLAMA_ACT_GELU_TANH,
      .swa_every = 2, .hf_norm_minus_one = true}},
};
enum { N_ARCHS = sizeof ARCHS / sizeof *ARCHS };
static const char KNOWN[] = "llama, qwen2, phi3 or gemma2";

const llama_traits *llama_arch_gguf(const char *name) {
    for (int i = 0; name && i < N_ARCHS; i++)
        if (!strcmp(ARCHS[i].gguf, name)) return &ARCHS[i].t;
    return NULL;
}

static const llama_traits *arch_hf(const char *model_type) {
    for (int i = 0; i < N_ARCHS; i++)
        for (int k = 0; k < 2; k++)
            if (ARCHS[i].hf[k] && !strcmp(ARCHS[i].hf[k], model_type)) return &ARCHS[i].t;
    return NULL;
}

/* ---- GGUF ---- */

/* The GGUF keys of arch, for llama_config_check's messages. */
typedef struct gguf_keys {
    char k[10][64];
    llama_config_names n;
} gguf_keys;

static void keys_of(gguf_keys *K, const char *arch) {
    static const char *const tail[10] = {NULL,
                                         "context_length",
                                         "block_count",
                                         "attention.head_count",
                                         "attention.head_count_kv",
                                         "embedding_length",
                                         "feed_forward_length",
                                         "attention.layer_norm_rms_epsilon",
                                         "rope.freq_base",
                                         "attention.key_length"};
    snprintf(K->k[0], sizeof K->k[0], "token_embd.weight's rows");
    for (int i = 1; i < 10; i++) snprintf(K->k[i], sizeof K->k[i], "%s.%s", arch, tail[i]);
    K->n = (llama_config_names){K->k[0], K->k[1], K->k[2], K->k[3], K->k[4],
                                K->k[5], K->k[6], K->k[7], K->k[8], K->k[9]};
}

/* arch.key as an integer in [1, 2^40] (def where absent, unless def < 0) */
static kiln_status gg_int(const kiln_gguf *g, const char *who, const char *path, const char *arch, const char *key,
                          int64_t def, int64_t *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (kiln_gguf_find_key(g, k) < 0 && def >= 0) {
        *out = def;
        return KILN_OK;
    }
    kiln_status s = kiln_gguf_get_int(g, k, out);
    if (!s && (*out < 1 || *out > (1ll << 40)))
        s = kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s = %lld is out of range", who, path, k, (long long)*out);
    return s;
}

/* arch.key as a number (def where absent; checked with the rest by llama_config_check) */
static kiln_status gg_float(const kiln_gguf *g, const char *arch, const char *key, double def, double *out) {
    char k[128];
    snprintf(k, sizeof k, "%s.%s", arch, key);
    if (kiln_gguf_find_key(g, k) < 0) {
        *out = def;
        return KILN_OK;
    }
    return kiln_gguf_get_float(g, k, out);
}

/* The file's tensor name is [rows, cols]; an error naming the key the
 * sizes came from otherwise. */
static kiln_status gguf_shape(const kiln_gguf *g, const char *who, const char *path, const char *name, int64_t rows,
                              int64_t cols, const char *key) {
    kiln_gguf_tensor_info ti;
    int i = kiln_gguf_find_tensor(g, name);
    if (i < 0 || kiln_gguf_tensor_info_at(g, i, &ti))
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: no tensor '%s'", who, path, name);
    if ((cols ? ti.ndim != 2 : ti.ndim != 1) || ti.shape[0] != rows || (cols && ti.shape[1] != cols))
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: '%s' is not [%lld%s%.0lld] as %s says", who, path, name,
                              (long long)rows, cols ? ", " : "", (long long)cols, key);
    return KILN_OK;
}

/* The sizes of the metadata against the tensors, before a model of those
 * sizes is allocated: a header claiming a huge width or layer count is
 * refused here, not by an allocation of what it claims. */
static kiln_status gguf_sizes(const kiln_gguf *g, const char *who, const char *path, const llama_config *c,
                              const gguf_keys *K) {
    char ffn[64], what[160];
    const int64_t Q = c->heads * c->head_dim, KV = c->kv_heads * c->head_dim;
    const bool fqkv = c->traits.fused_qkv, fgu = c->traits.fused_gate_up;
    snprintf(ffn, sizeof ffn, "blk.%lld.%s.weight", (long long)(c->layers - 1), fgu ? "ffn_up" : "ffn_gate");
    snprintf(what, sizeof what, "%s / %s", K->n.layers, K->n.hidden);
    kiln_status s;
    if ((s = gguf_shape(g, who, path, "token_embd.weight", c->vocab, c->dim, K->n.dim)) ||
        (s = gguf_shape(g, who, path, fqkv ? "blk.0.attn_qkv.weight" : "blk.0.attn_k.weight", fqkv ? Q + 2 * KV : KV,
                        c->dim, K->n.kv_heads)) ||
        (!fqkv && (s = gguf_shape(g, who, path, "blk.0.attn_q.weight", Q, c->dim, K->n.head_dim))) ||
        (s = gguf_shape(g, who, path, ffn, fgu ? 2 * c->hidden : c->hidden, c->dim, what)))
        return s;
    if (c->rope_freqs &&
        (s = gguf_shape(g, who, path, "rope_freqs.weight", c->head_dim / 2, 0, "the head size (key_length) / 2")))
        return s;
    return KILN_OK;
}

/* What kiln's rope does not do: an error naming it, or KILN_OK. */
static kiln_status gguf_rope(const kiln_gguf *g, const char *who, const char *path, const char *arch, llama_config *c) {
    char k[128];
    snprintf(k, sizeof k, "%s.rope.scaling.type", arch);
    const char *scaling = kiln_gguf_get_string(g, k, NULL);
    if (scaling && strcmp(scaling, "none"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: %s = '%s': kiln's rope has no such scaling", who, path, k,
                              scaling);
    static const char *const longrope[2] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int i = 0; i < 2; i++)
        if (kiln_gguf_find_tensor(g, longrope[i]) >= 0)
            return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: %s: LongRoPE is not supported", who, path, longrope[i]);
    c->rope_freqs = kiln_gguf_find_tensor(g, "rope_freqs.weight") >= 0;
    return KILN_OK;
}

kiln_status llama_arch_gguf_config(const kiln_gguf *g, const char *who, const char *path, llama_config *c) {
    const char *a = kiln_gguf_get_string(g, "general.architecture", NULL);
    const llama_traits *t = llama_arch_gguf(a);
    if (!t)
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: general.architecture is '%s', not %s", who, path,
                              a ? a : "(missing)", KNOWN);
    *c = llama_defaults();
    c->traits = *t;
    const bool gemma2 = !strcmp(a, "gemma2");
    gguf_keys K;
    keys_of(&K, a);
    int64_t rot = 0, key_len = 0, val_len = 0;
    kiln_status s;
    if ((s = gg_int(g, who, path, a, "block_count", -1, &c->layers)) ||
        (s = gg_int(g, who, path, a, "embedding_length", -1, &c->dim)) ||
        (s = gg_int(g, who, path, a, "feed_forward_length", -1, &c->hidden)) ||
        (s = gg_int(g, who, path, a, "attention.head_count", -1, &c->heads)) ||
        (s = gg_int(g, who, path, a, "attention.head_count_kv", c->heads, &c->kv_heads)) ||
        (s = gg_int(g, who, path, a, "context_length", 2048, &c->context)) ||
        (s = gg_int(g, who, path, a, "attention.key_length", c->dim % c->heads ? 0 : c->dim / c->heads, &key_len)) ||
        (s = gg_int(g, who, path, a, "attention.value_length", key_len, &val_len)) ||
        (s = gg_float(g, a, "rope.freq_base", 10000.0, &c->rope_theta)) ||
        (s = gg_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, &c->norm_eps)) ||
        /* llama.cpp's defaults where Gemma 2's keys are absent */
        (s = gg_float(g, a, "attn_logit_softcapping", gemma2 ? 50.0 : 0.0, &c->attn_softcap)) ||
        (s = gg_float(g, a, "final_logit_softcapping", gemma2 ? 30.0 : 0.0, &c->final_softcap)) ||
        (s = gg_int(g, who, path, a, "attention.sliding_window", gemma2 ? 4096 : t->swa_every ? -1 : 0,
                    &c->sliding_window)))
        return s;
    c->head_dim = key_len;
    if (val_len != key_len)
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: %s.attention.value_length %lld is not key_length %lld", who,
                              path, a, (long long)val_len, (long long)key_len);
    if (!t->swa_every) c->sliding_window = 0; /* (llama.cpp's llama ignores Mistral's) */
    /* llama.cpp scales Gemma 2 27B's queries (46 layers) by its query_pre_attn_scalar, dim / heads */
    if (gemma2 && c->layers == 46) c->query_scale = 1.0 / sqrt((double)c->dim / (double)c->heads);
    if ((s = llama_config_check(c, &K.n, who, path, KILN_ERR_FORMAT))) return s;
    if ((s = gg_int(g, who, path, a, "rope.dimension_count", c->head_dim, &rot))) return s;
    if (rot != c->head_dim)
        return kiln_set_error(KILN_ERR_UNSUPPORTED,
                              "%s: %s: %s.rope.dimension_count = %lld: kiln rotates whole heads of %lld (partial rotary "
                              "embeddings are not supported)",
                              who, path, a, (long long)rot, (long long)c->head_dim);
    if ((s = gguf_rope(g, who, path, a, c))) return s;
    int e = kiln_gguf_find_tensor(g, "token_embd.weight");
    kiln_gguf_tensor_info ti;
    if (e < 0 || kiln_gguf_tensor_info_at(g, e, &ti) || ti.ndim != 2)
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: no 2-d token_embd.weight", who, path);
    c->vocab = ti.shape[0];
    if ((s = gguf_sizes(g, who, path, c, &K))) return s;
    char vk[80];
    snprintf(vk, sizeof vk, "%s.vocab_size", a);
    if (kiln_gguf_find_key(g, vk) >= 0) {
        int64_t v;
        if ((s = kiln_gguf_get_int(g, vk, &v))) return s;
        if (v != c->vocab)
            return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: %s %lld but token_embd has %lld rows", who, path, vk,
                                  (long long)v, (long long)c->vocab);
    }
    return KILN_OK;
}

/* ---- Hugging Face ---- */

static const llama_config_names hf_names = {"vocab_size",          "max_position_embeddings", "num_hidden_layers",
                                            "num_attention_heads", "num_key_value_heads",     "hidden_size",
                                            "intermediate_size",   "rms_norm_eps",            "rope_theta",
                                            "head_dim"};

/* A whole number in [1, max] from a double, or false. */
static bool whole(double v, int64_t max, int64_t *out) {
    if (!(v >= 1 && v <= (double)max && v == floor(v))) return false;
    *out = (int64_t)v;
    return true;
}

/* A number of config.json, where it is one (absent or null: false). */
static bool hf_number(const kiln_json_file *j, const char *obj, const char *key, double *v) {
    if (!kiln_json_file_has(j, obj, key)) return false;
    bool ok = !kiln_json_file_number(j, obj, key, v);
    kiln_clear_error();
    return ok;
}

/* rope_scaling: none (absent or null), Llama 3.1's "llama3", or an error naming its type. */
static kiln_status hf_rope_scaling(const kiln_json_file *j, const char *who, const char *p, llama_config *c,
                                   llama3_scaling *sc) {
    *sc = (llama3_scaling){0};
    const char *type = kiln_json_file_string(j, "rope_scaling", "rope_type");
    if (!type) type = kiln_json_file_string(j, "rope_scaling", "type");
    kiln_clear_error();
    if (!type && !kiln_json_file_has(j, "rope_scaling", "factor")) return KILN_OK; /* null or {} */
    if (!type || strcmp(type, "llama3"))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: rope_scaling of type '%s' is not supported (llama3 is)",
                              who, p, type ? type : "(none)");
    static const char *const keys[4] = {"factor", "low_freq_factor", "high_freq_factor",
                                        "original_max_position_embeddings"};
    double *out[4] = {&sc->factor, &sc->low_freq_factor, &sc->high_freq_factor, &sc->original_context};
    for (int i = 0; i < 4; i++)
        if (!hf_number(j, "rope_scaling", keys[i], out[i]) || !(*out[i] > 0) || isinf(*out[i]))
            return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: rope_scaling.%s must be a number > 0", who, p, keys[i]);
    if (!(sc->high_freq_factor > sc->low_freq_factor))
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: rope_scaling.high_freq_factor %g must exceed low_freq_factor %g",
                              who, p, sc->high_freq_factor, sc->low_freq_factor);
    c->rope_freqs = true;
    return KILN_OK;
}

/* What differs by architecture: biases, activation, Gemma 2's caps, scale and window. */
static kiln_status hf_arch_keys(const kiln_json_file *j, const char *who, const char *p, llama_config *c, bool *tied) {
    const llama_traits *t = &c->traits;
    double v;
    const char *bias[] = {"attention_bias", "mlp_bias"};
    for (int i = 0; i < 2; i++)
        if (hf_number(j, NULL, bias[i], &v) && v != 0)
            return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: %s is not supported", who, p, bias[i]);
    const char *act = kiln_json_file_string(j, NULL, "hidden_activation");
    if (!act) act = kiln_json_file_string(j, NULL, "hidden_act");
    kiln_clear_error();
    const char *want = t->act == LLAMA_ACT_GELU_TANH ? "gelu_pytorch_tanh" : "silu";
    if (act && strcmp(act, want))
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: hidden_act '%s' (kiln's %s MLP takes %s)", who, p, act,
                              t->arch, want);
    if (t->swa_every && hf_number(j, NULL, "sliding_window", &v) && !whole(v, 1ll << 40, &c->sliding_window))
        return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: sliding_window = %g is not a positive integer", who, p, v);
    if (t->swa_every && !c->sliding_window) c->traits.swa_every = 0; /* null: none */
    if (!strcmp(t->arch, "gemma2")) {
        *tied = true; /* Gemma2Config's default */
        if (hf_number(j, NULL, "query_pre_attn_scalar", &v)) {
            if (!(v > 0) || isinf(v))
                return kiln_set_error(KILN_ERR_FORMAT, "%s: %s: query_pre_attn_scalar = %g must be > 0", who, p, v);
            c->query_scale = 1.0 / sqrt(v);
        }
        if (hf_number(j, NULL, "attn_logit_softcapping", &v)) c->attn_softcap = v;
        if (hf_number(j, NULL, "final_logit_softcapping", &v)) c->final_softcap = v;
    }
    if (hf_number(j, NULL, "tie_word_embeddings", &v)) *tied = v != 0;
    if (hf_number(j, NULL, "partial_rotary_factor", &v) && v != 1)
        return kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: partial rotary embeddings (partial_rotary_factor %g)", who,
                              p, v);
    return KILN_OK;
}

kiln_status llama_arch_hf_config(const char *who, const char *dir, llama_config *c, bool *tied,
                                 llama3_scaling *scaling) {
    char p[4096];
    snprintf(p, sizeof p, "%s/config.json", dir);
    kiln_json_file *j = kiln_json_file_open(p);
    if (!j) return kiln_last_status();
    *c = llama_defaults();
    *tied = false;
    kiln_status s = KILN_OK;
    const char *type = kiln_json_file_string(j, NULL, "model_type");
    kiln_clear_error();
    const llama_traits *t = arch_hf(type ? type : "llama");
    if (!t)
        s = kiln_set_error(KILN_ERR_UNSUPPORTED, "%s: %s: model_type is '%s', not llama, mistral, qwen2, phi3 or gemma2",
                           who, p, type);
    else
        c->traits = *t;
    struct { const char *key; int64_t *out; int64_t def; } ints[] = {
        {"num_hidden_layers", &c->layers, -1},     {"hidden_size", &c->dim, -1},
        {"intermediate_size", &c->hidden, -1},     {"num_attention_heads", &c->heads, -1},
        {"vocab_size", &c->vocab, -1},             {"max_position_embeddings", &c->context, 2048},
        {"num_key_value_heads", &c->kv_heads, 0},  {"head_dim", &c->head_dim, 0},
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
    if (!s) s = hf_arch_keys(j, who, p, c, tied);
    if (!s) s = hf_rope_scaling(j, who, p, c, scaling);
    if (!s) s = llama_config_check(c, &hf_names, who, p, KILN_ERR_FORMAT);
    kiln_json_file_close(j);
    return s;
}

void llama3_rope_factors(const llama3_scaling *s, double theta, int64_t head_dim, float *out) {
    const double lo_wave = s->original_context / s->low_freq_factor, hi_wave = s->original_context / s->high_freq_factor;
    for (int64_t i = 0; i < head_dim / 2; i++) {
        /* the converter's float32 frequency */
        double wave = 2 * M_PI / (double)(float)(1.0 / pow(theta, (double)(2 * i) / (double)head_dim));
        double f;
        if (wave < hi_wave) f = 1;
        else if (wave > lo_wave) f = s->factor;
        else {
            double smooth =
                (s->original_context / wave - s->low_freq_factor) / (s->high_freq_factor - s->low_freq_factor);
            f = 1 / ((1 - smooth) / s->factor + smooth);
        }
        out[i] = (float)f;
    }
}
