/* llama_mix.c — llama.cpp's quantization mixes per tensor (llama_mix.h). */
#include "llama_mix.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

static const struct {
    llama_ftype f;
    const char *name;
    kiln_dtype base;
} mixes[] = {
    {LLAMA_FTYPE_ALL_F32, "F32", KILN_F32},          {LLAMA_FTYPE_MOSTLY_F16, "F16", KILN_F16},
    {LLAMA_FTYPE_MOSTLY_BF16, "BF16", KILN_BF16},    {LLAMA_FTYPE_MOSTLY_Q8_0, "Q8_0", KILN_Q8_0},
    {LLAMA_FTYPE_MOSTLY_Q4_0, "Q4_0", KILN_Q4_0},    {LLAMA_FTYPE_MOSTLY_Q4_1, "Q4_1", KILN_Q4_1},
    {LLAMA_FTYPE_MOSTLY_Q5_0, "Q5_0", KILN_Q5_0},    {LLAMA_FTYPE_MOSTLY_Q5_1, "Q5_1", KILN_Q5_1},
    {LLAMA_FTYPE_MOSTLY_Q2_K, "Q2_K", KILN_Q2_K},    {LLAMA_FTYPE_MOSTLY_Q2_K_S, "Q2_K_S", KILN_Q2_K},
    {LLAMA_FTYPE_MOSTLY_Q3_K_S, "Q3_K_S", KILN_Q3_K}, {LLAMA_FTYPE_MOSTLY_Q3_K_M, "Q3_K_M", KILN_Q3_K},
    {LLAMA_FTYPE_MOSTLY_Q3_K_L, "Q3_K_L", KILN_Q3_K}, {LLAMA_FTYPE_MOSTLY_Q4_K_S, "Q4_K_S", KILN_Q4_K},
    {LLAMA_FTYPE_MOSTLY_Q4_K_M, "Q4_K_M", KILN_Q4_K}, {LLAMA_FTYPE_MOSTLY_Q5_K_S, "Q5_K_S", KILN_Q5_K},
    {LLAMA_FTYPE_MOSTLY_Q5_K_M, "Q5_K_M", KILN_Q5_K}, {LLAMA_FTYPE_MOSTLY_Q6_K, "Q6_K", KILN_Q6_K},
    {LLAMA_FTYPE_MOSTLY_IQ4_NL, "IQ4_NL", KILN_IQ4_NL}, {LLAMA_FTYPE_MOSTLY_IQ4_XS, "IQ4_XS", KILN_IQ4_XS},
};
#define N_MIXES ((int)(sizeof mixes / sizeof *mixes))

llama_ftype llama_ftype_parse(const char *name) {
    for (int i = 0; name && i < N_MIXES; i++)
        if (!strcasecmp(name, mixes[i].name)) return mixes[i].f;
    return LLAMA_FTYPE_UNKNOWN;
}

const char *llama_ftype_name(llama_ftype f) {
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].f == f) return mixes[i].name;
    return NULL;
}

const char *llama_ftype_names(void) {
    return "F32|F16|BF16|Q8_0|Q4_0|Q4_1|Q5_0|Q5_1|Q2_K|Q2_K_S|Q3_K_S|Q3_K_M|Q3_K_L|Q4_K_S|Q4_K_M|Q5_K_S|Q5_K_M|Q6_K|"
           "IQ4_NL|IQ4_XS"; /* the table's, in its order (test_llama_mix checks) */
}

kiln_dtype llama_ftype_base(llama_ftype f) {
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].f == f) return mixes[i].base;
    return KILN_DTYPE_COUNT;
}

llama_ftype llama_ftype_of_dtype(kiln_dtype d) {
    switch (d) { /* a K type alone: its _M mix, as llama.cpp's loader guesses a file's */
    case KILN_Q3_K: return LLAMA_FTYPE_MOSTLY_Q3_K_M;
    case KILN_Q4_K: return LLAMA_FTYPE_MOSTLY_Q4_K_M;
    case KILN_Q5_K: return LLAMA_FTYPE_MOSTLY_Q5_K_M;
    default: break;
    }
    for (int i = 0; i < N_MIXES; i++)
        if (mixes[i].base == d) return mixes[i].f;
    return LLAMA_FTYPE_UNKNOWN;
}

/* llama.cpp's use_more_bits: the first and last eighth of the layers and every third one between */
static bool more_bits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

/* A weight too narrow for its type's blocks: llama.cpp's fallback. */
static kiln_dtype fall_back(kiln_dtype t, int64_t cols) {
    if (cols % kiln_dtype_block(t) == 0) return t;
    switch (t) {
    case KILN_Q2_K:
    case KILN_Q3_K: t = KILN_Q4_0; break;
    case KILN_Q4_K: t = KILN_Q5_0; break;
    case KILN_Q5_K: t = KILN_Q5_1; break;
    case KILN_Q6_K: t = KILN_Q8_0; break;
    case KILN_IQ4_XS: t = KILN_IQ4_NL; break;
    default: break;
    }
    return cols % kiln_dtype_block(t) ? KILN_F16 : t;
}

kiln_dtype llama_mix_dtype(llama_ftype f, const llama_config *c, bool tied, const char *name, int64_t cols) {
    const kiln_dtype base = llama_ftype_base(f);
    if (base == KILN_DTYPE_COUNT || !c || !name) return KILN_DTYPE_COUNT;
    if (!kiln_dtype_is_quantized(base)) return base;
    const int n = (int)c->layers, gqa = c->kv_heads ? (int)(c->heads / c->kv_heads) : 1;
    int l = -1;
    sscanf(name, "blk.%d.", &l);
    const bool Q2 = f == LLAMA_FTYPE_MOSTLY_Q2_K, Q2S = f == LLAMA_FTYPE_MOSTLY_Q2_K_S,
               Q3M = f == LLAMA_FTYPE_MOSTLY_Q3_K_M, Q3L = f == LLAMA_FTYPE_MOSTLY_Q3_K_L,
               Q4S = f == LLAMA_FTYPE_MOSTLY_Q4_K_S, Q4M = f == LLAMA_FTYPE_MOSTLY_Q4_K_M,
               Q5M = f == LLAMA_FTYPE_MOSTLY_Q5_K_M,
               IQ4 = f == LLAMA_FTYPE_MOSTLY_IQ4_NL || f == LLAMA_FTYPE_MOSTLY_IQ4_XS;
    kiln_dtype t = base;
    if (!strcmp(name, "output.weight") || (tied && !strcmp(name, "token_embd.weight"))) {
        if (cols % kiln_dtype_block(base)) t = KILN_Q8_0;
        else if (base != KILN_Q8_0) t = KILN_Q6_K;
    } else if (strstr(name, "attn_v.weight")) {
        if (Q2) t = gqa >= 4 ? KILN_Q4_K : KILN_Q3_K;
        else if (Q2S && gqa >= 4) t = KILN_Q4_K;
        else if (Q3M) t = l < 2 ? KILN_Q5_K : KILN_Q4_K;
        else if (Q3L) t = KILN_Q5_K;
        else if (IQ4 && gqa >= 4) t = KILN_Q5_K;
        else if ((Q4M || Q5M) && more_bits(l, n)) t = KILN_Q6_K;
        else if (Q4S && l < 4) t = KILN_Q5_K;
    } else if (strstr(name, "ffn_down")) {
        if (Q2) t = KILN_Q3_K;
        else if (Q2S) t = l < n / 8 ? KILN_Q4_K : t;
        else if (Q3M) t = l < n / 16 ? KILN_Q5_K : KILN_Q4_K;
        else if (Q3L) t = KILN_Q5_K;
        else if (Q4M) t = more_bits(l, n) ? KILN_Q6_K : t;
        else if (IQ4 && l < n / 8) t = KILN_Q5_K;
        else if (Q5M && more_bits(l, n)) t = KILN_Q6_K;
        else if (Q4S && l < n / 8) t = KILN_Q5_K;
    } else if (strstr(name, "attn_output.weight")) {
        if (Q2) t = KILN_Q3_K;
        else if (Q3M) t = KILN_Q4_K;
        else if (Q3L) t = KILN_Q5_K;
    }
    return fall_back(t, cols);
}

bool llama_param_gguf_name(const char *param, char *out, size_t size) {
    static const char *const map[][2] = {
        {"tok_embeddings.weight", "token_embd.weight"}, {"output.weight", "output.weight"},
        {"norm.weight", "output_norm.weight"},          {"attention.wq.weight", "attn_q.weight"},
        {"attention.wk.weight", "attn_k.weight"},       {"attention.wv.weight", "attn_v.weight"},
        {"attention.wo.weight", "attn_output.weight"},  {"feed_forward.w1.weight", "ffn_gate.weight"},
        {"feed_forward.w2.weight", "ffn_down.weight"},  {"feed_forward.w3.weight", "ffn_up.weight"},
        {"attention_norm.weight", "attn_norm.weight"},  {"ffn_norm.weight", "ffn_norm.weight"},
        {"attention_post_norm.weight", "post_attention_norm.weight"}, {"ffn_post_norm.weight", "post_ffw_norm.weight"},
    };
    int l = -1, at = 0;
    if (sscanf(param, "layers.%d.%n", &l, &at) < 1 || !at) l = -1, at = 0;
    for (size_t i = 0; i < sizeof map / sizeof *map; i++) {
        if (strcmp(param + at, map[i][0]) || (l < 0) != (i < 3)) continue;
        int k = l < 0 ? snprintf(out, size, "%s", map[i][1]) : snprintf(out, size, "blk.%d.%s", l, map[i][1]);
        return k > 0 && (size_t)k < size;
    }
    return false;
}

kiln_dtype llama_mix_param_dtype(void *user, const char *param, int64_t rows, int64_t cols) {
    const llama_mix_choice *m = user;
    char name[64];
    (void)rows; /* the rules look at the columns */
    if (!llama_param_gguf_name(param, name, sizeof name)) return KILN_F32;
    kiln_dtype t = llama_mix_dtype(m->mix, m->c, false, name, cols);
    return kiln_dtype_is_quantized(t) ? t : KILN_F32;
}
