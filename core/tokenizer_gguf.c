/* tokenizer_gguf.c — a tokenizer from and to GGUF's tokenizer.ggml.* keys
 * (as llama.cpp's convert_hf_to_gguf writes them and llama.cpp reads
 * them): the model ("gpt2" byte-level BPE or "llama" SentencePiece), the
 * pre-tokenizer, tokens, token types, merges or scores, the special ids
 * and the add_bos / add_eos flags; and the byte vocabulary kiln writes for
 * a model that has no tokenizer of its own. */
#include "tokenizer.h"

#include <ctype.h>
#include <stddef.h>
#include <stdio.h>

/* llama.cpp's pre-tokenizer names for the three splits kiln has. */
static int split_of(const char *pre) {
    static const struct {
        const char *name;
        int mode;
    } names[] = {
        {"default", KILN__SPLIT_DEFAULT},  {"gpt-2", KILN__SPLIT_GPT2},       {"gpt2", KILN__SPLIT_GPT2},
        {"phi-2", KILN__SPLIT_GPT2},       {"roberta-bpe", KILN__SPLIT_GPT2}, {"llama-bpe", KILN__SPLIT_LLAMA3},
        {"llama3", KILN__SPLIT_LLAMA3},    {"llama-v3", KILN__SPLIT_LLAMA3},  {"falcon3", KILN__SPLIT_LLAMA3},
        {"smaug-bpe", KILN__SPLIT_LLAMA3}, {"qwen2", KILN__SPLIT_QWEN2},      {"deepseek-r1-qwen", KILN__SPLIT_QWEN2},
        {"megrez", KILN__SPLIT_QWEN2},     {"tekken", KILN__SPLIT_TEKKEN},
    };
    if (!pre) return KILN__SPLIT_DEFAULT; /* as llama.cpp, which warns that quality suffers */
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!strcmp(pre, names[i].name)) return names[i].mode;
    return -1;
}

static const struct {
    const char *key;
    size_t at; /* offsetof the id in kiln_tokenizer */
} special_keys[] = {
    {"tokenizer.ggml.bos_token_id", offsetof(kiln_tokenizer, bos)},
    {"tokenizer.ggml.eos_token_id", offsetof(kiln_tokenizer, eos)},
    {"tokenizer.ggml.eot_token_id", offsetof(kiln_tokenizer, eot)},
    {"tokenizer.ggml.eom_token_id", offsetof(kiln_tokenizer, eom)},
    {"tokenizer.ggml.unknown_token_id", offsetof(kiln_tokenizer, unk)},
    {"tokenizer.ggml.padding_token_id", offsetof(kiln_tokenizer, pad)},
};
#define SPECIAL(t, i) ((int32_t *)((char *)(t) + special_keys[i].at))

static kiln_status flag(const kiln_gguf *g, const char *key, bool *v) {
    int64_t x;
    if (kiln_gguf_find_key(g, key) < 0) return KILN_OK;
    kiln_status s = kiln_gguf_get_int(g, key, &x);
    if (!s) *v = x != 0;
    return s;
}

/* The special ids and the flags; llama.cpp's defaults where a key is absent. */
static kiln_status specials(kiln_tokenizer *t, const kiln_gguf *g, const char *who) {
    kiln_status s = KILN_OK;
    if (t->spm && t->n >= 3) t->unk = 0, t->bos = 1, t->eos = 2; /* llama.cpp's SentencePiece defaults */
    for (size_t k = 0; k < sizeof special_keys / sizeof special_keys[0] && !s; k++) {
        int64_t v;
        if (kiln_gguf_find_key(g, special_keys[k].key) < 0) continue;
        if ((s = kiln_gguf_get_int(g, special_keys[k].key, &v))) break;
        if (v >= 0 && v < t->n) *SPECIAL(t, k) = (int32_t)v;
        else if (k < 2) /* bos, eos; another out of range is ignored, as llama.cpp does (files have such pads) */
            s = kiln__errs(KILN_ERR_FORMAT, "%s: %s %lld is not a token id", who, special_keys[k].key, (long long)v);
    }
    t->add_bos = t->spm || t->split == KILN__SPLIT_LLAMA3 || t->split == KILN__SPLIT_TEKKEN;
    t->add_eos = false;
    if (!s) s = flag(g, "tokenizer.ggml.add_bos_token", &t->add_bos);
    if (!s) s = flag(g, "tokenizer.ggml.add_eos_token", &t->add_eos);
    return s;
}

/* llama.cpp's token attributes by the model's name: Phi-3's special tokens
 * take the whitespace after them (the chat template's newlines), but for
 * <unk>, <s> and <|endoftext|>. */
static kiln_status strips(kiln_tokenizer *t, const kiln_gguf *g, const char *who) {
    const char *name = kiln_gguf_get_string(g, "general.name", NULL);
    char low[128] = "";
    for (size_t i = 0; name && name[i] && i + 1 < sizeof low; i++) low[i] = (char)tolower((unsigned char)name[i]);
    if (!strstr(low, "phi-3") && !strstr(low, "phi3")) return KILN_OK;
    kiln_status s = KILN_OK;
    for (int64_t id = 0; id < t->n && !s; id++) {
        bool keep = t->tok[id] && (!strcmp(t->tok[id], "<unk>") || !strcmp(t->tok[id], "<s>") ||
                                   !strcmp(t->tok[id], "<|endoftext|>"));
        if (t->raw[id] && !keep) s = kiln__tok_strip(t, (int32_t)id, 2, who);
    }
    int32_t eos = kiln__tok_find(t, "</s>", 4);
    return !s && eos >= 0 ? kiln__tok_strip(t, eos, 2, who) : s;
}

kiln_tokenizer *kiln_tokenizer_from_gguf(const kiln_gguf *g) {
    const char *who = "kiln_tokenizer_from_gguf";
    if (!g) return kiln__err(KILN_ERR_ARG, "%s: NULL file", who);
    const char *model = kiln_gguf_get_string(g, "tokenizer.ggml.model", NULL);
    if (!model) return kiln__err(KILN_ERR_FORMAT, "%s: no tokenizer.ggml.model", who);
    bool spm = !strcmp(model, "llama");
    if (strcmp(model, "gpt2") && !spm)
        return kiln__err(KILN_ERR_UNSUPPORTED, "%s: tokenizer model '%s' (kiln reads \"gpt2\" byte-level BPE and "
                         "\"llama\" SentencePiece BPE)", who, model);
    const char *pre = kiln_gguf_get_string(g, "tokenizer.ggml.pre", NULL);
    int mode = spm ? KILN__SPLIT_GPT2 /* unused */ : split_of(pre);
    if (mode < 0)
        return kiln__err(KILN_ERR_UNSUPPORTED, "%s: tokenizer.ggml.pre '%s' is not one kiln knows (Llama 3's "
                         "llama-bpe, qwen2, Mistral's tekken, gpt-2 and their aliases)", who, pre);
    kiln_gguf_type et;
    uint64_t n, nm = 0, nt = 0;
    if (kiln_gguf_get_array(g, "tokenizer.ggml.tokens", &et, &n)) return NULL;
    if (et != KILN_GGUF_STRING || n == 0 || n > INT32_MAX)
        return kiln__err(KILN_ERR_FORMAT, "%s: tokenizer.ggml.tokens is not a non-empty array of strings", who);
    if (kiln_gguf_find_key(g, "tokenizer.ggml.merges") >= 0 &&
        (kiln_gguf_get_array(g, "tokenizer.ggml.merges", &et, &nm) || et != KILN_GGUF_STRING))
        return kiln__err(KILN_ERR_FORMAT, "%s: tokenizer.ggml.merges is not an array of strings", who);
    bool types = kiln_gguf_find_key(g, "tokenizer.ggml.token_type") >= 0;
    if (types && (kiln_gguf_get_array(g, "tokenizer.ggml.token_type", &et, &nt) || nt != n))
        return kiln__err(KILN_ERR_FORMAT, "%s: tokenizer.ggml.token_type does not have one entry per token", who);
    kiln_tokenizer *t = kiln__tok_new((int64_t)n, who);
    if (!t) return NULL;
    t->split = mode;
    /* as llama.cpp: a word that is a token is taken whole */
    t->ignore_merges = !spm && (mode == KILN__SPLIT_LLAMA3 || mode == KILN__SPLIT_TEKKEN);
    kiln_status s = KILN_OK;
    for (uint64_t i = 0; i < n && !s; i++) {
        size_t len;
        const char *str = kiln_gguf_array_string(g, "tokenizer.ggml.tokens", i, &len);
        int64_t ty = 1;
        if (types) s = kiln_gguf_array_int(g, "tokenizer.ggml.token_type", i, &ty);
        /* 2 unknown, 3 control, 4 user defined: literal text; 5 unused: skipped */
        if (!s && ty != 5) s = kiln__tok_set(t, (int64_t)i, str, len, ty == 2 || ty == 3 ? 1 : ty == 4 ? 2 : 0, who);
    }
    if (!s) s = kiln__tok_index(t, who);
    if (!s && spm) s = kiln__spm_load(t, g, who);
    if (!s) s = kiln__tok_merges_alloc(t, (int64_t)nm, who);
    for (uint64_t i = 0; i < nm && !s; i++) {
        size_t len;
        const char *m = kiln_gguf_array_string(g, "tokenizer.ggml.merges", i, &len);
        const char *sp = memchr(m, ' ', len);
        s = sp ? kiln__tok_merge(t, m, (size_t)(sp - m), sp + 1, len - (size_t)(sp - m) - 1, who)
               : kiln__errs(KILN_ERR_FORMAT, "%s: merge %llu '%s' is not two tokens", who, (unsigned long long)i, m);
    }
    if (!s) s = specials(t, g, who);
    if (!s) s = strips(t, g, who);
    if (!s) s = kiln__tok_finish(t, who);
    if (s) {
        kiln_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* BPE's merges as "a b" strings. */
static kiln_status bpe_save(const kiln_tokenizer *t, kiln_gguf_writer *w, int64_t n, const char **toks,
                            const int32_t *types) {
    const char *who = "kiln_tokenizer_to_gguf";
    char **merges = kiln__calloc((size_t)(t->n_merges ? t->n_merges : 1), sizeof *merges);
    kiln_status s = merges ? KILN_OK : kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    for (int64_t i = 0; i < t->n_merges && !s; i++) {
        int32_t a = t->mpair[2 * i], b = t->mpair[2 * i + 1];
        if (!(merges[i] = kiln__malloc(t->len[a] + t->len[b] + 2))) {
            s = kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
        } else {
            memcpy(merges[i], t->tok[a], t->len[a]);
            merges[i][t->len[a]] = ' ';
            memcpy(merges[i] + t->len[a] + 1, t->tok[b], t->len[b] + 1);
        }
    }
    static const char *pre[] = {"gpt-2", "llama-bpe", "qwen2", "tekken", "default"};
    if (!s) s = kiln_gguf_set_string(w, "tokenizer.ggml.model", "gpt2");
    if (!s) s = kiln_gguf_set_string(w, "tokenizer.ggml.pre", pre[t->split]);
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, (uint64_t)n);
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, (uint64_t)n);
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.merges", KILN_GGUF_STRING, merges, (uint64_t)t->n_merges);
    for (int64_t i = 0; merges && i < t->n_merges; i++) free(merges[i]);
    free(merges);
    return s;
}

kiln_status kiln_tokenizer_to_gguf_padded(const kiln_tokenizer *t, kiln_gguf_writer *w, int64_t vocab) {
    const char *who = "kiln_tokenizer_to_gguf";
    if (!t || !w) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    if (vocab < t->n)
        return kiln__errs(KILN_ERR_ARG, "%s: the tokenizer has %lld ids, more than the vocabulary of %lld", who,
                          (long long)t->n, (long long)vocab);
    const char **toks = kiln__malloc((size_t)vocab * sizeof *toks);
    int32_t *types = kiln__malloc((size_t)vocab * sizeof *types);
    char (*holes)[32] = kiln__malloc((size_t)vocab * sizeof *holes);
    kiln_status s = toks && types && holes ? KILN_OK : kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    /* llama.cpp's token types: 1 normal, 2 unknown, 3 control, 5 unused, 6 byte */
    for (int64_t i = 0; i < vocab && !s; i++) {
        bool hole = i >= t->n || !t->tok[i];
        if (!hole) toks[i] = t->tok[i];
        else snprintf(holes[i], sizeof holes[i], "[PAD%lld]", (long long)i), toks[i] = holes[i]; /* as llama.cpp */
        types[i] = hole ? 5 : i == t->unk ? 2 : t->raw[i] == 1 ? 3 : t->raw[i] == 2 ? 4 : t->spm && t->fb && t->fb[i] >= 0 ? 6 : 1;
    }
    if (!s) s = t->spm ? kiln__spm_save(t, w, vocab, toks, types) : bpe_save(t, w, vocab, toks, types);
    for (size_t k = 0; k < sizeof special_keys / sizeof special_keys[0] && !s; k++) {
        int32_t id = *SPECIAL(t, k);
        if (id >= 0) s = kiln_gguf_set_int(w, special_keys[k].key, KILN_GGUF_UINT32, id);
    }
    if (!s) s = kiln_gguf_set_int(w, "tokenizer.ggml.add_bos_token", KILN_GGUF_BOOL, t->add_bos);
    if (!s) s = kiln_gguf_set_int(w, "tokenizer.ggml.add_eos_token", KILN_GGUF_BOOL, t->add_eos);
    free(toks);
    free(types);
    free(holes);
    return s;
}

kiln_status kiln_tokenizer_to_gguf(const kiln_tokenizer *t, kiln_gguf_writer *w) {
    return kiln_tokenizer_to_gguf_padded(t, w, t ? t->n : 0);
}

kiln_tokenizer *kiln_tokenizer_bytes(int64_t vocab) {
    const char *who = "kiln_tokenizer_bytes";
    if (vocab < 3 || vocab > INT32_MAX)
        return kiln__err(KILN_ERR_ARG, "%s: a vocabulary of %lld ids (3 or more: <unk> <s> </s>)", who,
                         (long long)vocab);
    kiln_tokenizer *t = kiln__tok_new(vocab, who);
    if (!t) return NULL;
    static const char *names[3] = {"<unk>", "<s>", "</s>"};
    kiln_status s = KILN_OK;
    for (int i = 0; i < 3 && !s; i++) s = kiln__tok_set(t, i, names[i], strlen(names[i]), i > 0, who);
    for (int64_t b = 0; b < 256 && 3 + b < vocab && !s; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", (unsigned)b);
        s = kiln__tok_set(t, 3 + b, name, 6, 0, who);
    }
    if (vocab > 259 && !s) s = kiln__tok_set(t, 259, "\xe2\x96\x81", 3, 0, who); /* a space is one id */
    t->spm = t->add_space = t->space_every = t->add_bos = true;
    t->unk = 0, t->bos = 1, t->eos = 2;
    if (!s) s = kiln__tok_index(t, who);
    if (!s && !(t->score = kiln__calloc((size_t)vocab, sizeof *t->score)))
        s = kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    if (!s) s = kiln__spm_byte_tokens(t, who);
    if (!s) s = kiln__tok_finish(t, who);
    if (s) {
        kiln_tokenizer_free(t);
        return NULL;
    }
    return t;
}
