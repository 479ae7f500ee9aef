/* tokenizer.c — byte-level BPE (GPT-2's scheme, used by Llama 3 and many
 * others; see include/kiln.h). Tokens are strings over GPT-2's byte
 * alphabet: each byte b stands for one printable code point (b itself
 * for the 188 printable Latin-1 bytes, 256 + k for the k-th other byte), so
 * every byte string has a spelling and decoding is exact. Merges are
 * applied by rank, lowest first, all occurrences left to right (as GPT-2's
 * encoder.py). Loaded from tokenizer.json (bounded JSON parse) or GGUF. */
#include "tokenizer.h"
#include "json.h"

#include <ctype.h>
#include <stdio.h>


static uint64_t fnv(const void *p, size_t n) {
    const unsigned char *s = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
    return h;
}
static uint64_t mix(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    return k ^ (k >> 33);
}

void kiln_tokenizer_free(kiln_tokenizer *t) {
    if (!t) return;
    for (int64_t i = 0; t->tok && i < t->n; i++) free(t->tok[i]);
    free(t->tok);
    free(t->len);
    free(t->raw);
    free(t->vh);
    free(t->mk);
    free(t->mrank);
    free(t->mres);
    free(t->mpair);
    free(t->special);
    free(t->score);
    free(t->fb);
    free(t->strip);
    free(t);
}

kiln_tokenizer *kiln__tok_new(int64_t n, const char *who) {
    kiln_tokenizer *t = kiln__calloc(1, sizeof *t);
    if (t) {
        t->n = n;
        t->bos = t->eos = t->eot = t->eom = t->pad = t->unk = -1;
        t->tok = kiln__calloc((size_t)n, sizeof *t->tok);
        t->len = kiln__calloc((size_t)n, sizeof *t->len);
        t->raw = kiln__calloc((size_t)n, 1);
    }
    if (!t || !t->tok || !t->len || !t->raw) {
        kiln_tokenizer_free(t);
        return kiln__err(KILN_ERR_OOM, "%s: out of memory for %lld tokens", who, (long long)n);
    }
    int k = 0;
    for (int b = 0; b < 324; b++) t->cp_byte[b] = -1;
    for (int b = 0; b < 256; b++) {
        bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        t->byte_cp[b] = printable ? b : 256 + k++;
        t->cp_byte[t->byte_cp[b]] = (int16_t)b;
    }
    return t;
}

kiln_status kiln__tok_set(kiln_tokenizer *t, int64_t id, const char *s, size_t len, int raw, const char *who) {
    if (id < 0 || id >= t->n) return kiln__errs(KILN_ERR_FORMAT, "%s: token id %lld out of range", who, (long long)id);
    if (len > UINT32_MAX) return kiln__errs(KILN_ERR_FORMAT, "%s: token %lld is too long", who, (long long)id);
    if (t->tok[id]) {
        if (t->len[id] != len || memcmp(t->tok[id], s, len))
            return kiln__errs(KILN_ERR_FORMAT, "%s: id %lld is both '%s' and '%.*s'", who, (long long)id, t->tok[id],
                              (int)(len > 64 ? 64 : len), s);
        if (raw > t->raw[id]) t->raw[id] = (uint8_t)raw;
        return KILN_OK;
    }
    if (!(t->tok[id] = kiln__malloc(len + 1))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memcpy(t->tok[id], s, len);
    t->tok[id][len] = 0;
    t->len[id] = (uint32_t)len;
    t->raw[id] = (uint8_t)raw;
    return KILN_OK;
}

int32_t kiln__tok_find(const kiln_tokenizer *t, const char *s, size_t len) {
    if (!t->vh) return -1;
    for (size_t h = fnv(s, len) & (t->vcap - 1);; h = (h + 1) & (t->vcap - 1)) {
        int32_t id = t->vh[h];
        if (id < 0) return -1;
        if (t->len[id] == len && !memcmp(t->tok[id], s, len)) return id;
    }
}

kiln_status kiln__tok_strip(kiln_tokenizer *t, int32_t id, int how, const char *who) {
    if (!t->strip && !(t->strip = kiln__calloc((size_t)t->n, 1))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    t->strip[id] = (uint8_t)how;
    return KILN_OK;
}

/* The spelling index; a spelling given twice keeps its first id. */
kiln_status kiln__tok_index(kiln_tokenizer *t, const char *who) {
    t->vcap = 16;
    while (t->vcap < 2 * (size_t)t->n) t->vcap *= 2;
    if (!(t->vh = kiln__malloc(t->vcap * sizeof *t->vh))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memset(t->vh, 0xff, t->vcap * sizeof *t->vh);
    for (int64_t id = 0; id < t->n; id++) {
        if (!t->tok[id] || kiln__tok_find(t, t->tok[id], t->len[id]) >= 0) continue;
        size_t h = fnv(t->tok[id], t->len[id]) & (t->vcap - 1);
        while (t->vh[h] >= 0) h = (h + 1) & (t->vcap - 1);
        t->vh[h] = (int32_t)id;
    }
    return KILN_OK;
}

kiln_status kiln__tok_merges_alloc(kiln_tokenizer *t, int64_t n, const char *who) {
    t->mcap = 16;
    while (t->mcap < 2 * (size_t)n) t->mcap *= 2;
    t->mk = kiln__malloc(t->mcap * sizeof *t->mk);
    t->mrank = kiln__malloc(t->mcap * sizeof *t->mrank);
    t->mres = kiln__malloc(t->mcap * sizeof *t->mres);
    t->mpair = kiln__malloc((size_t)(2 * n + 1) * sizeof *t->mpair);
    if (!t->mk || !t->mrank || !t->mres || !t->mpair) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memset(t->mk, 0xff, t->mcap * sizeof *t->mk);
    return KILN_OK;
}

static size_t merge_slot(const kiln_tokenizer *t, int32_t a, int32_t b) {
    uint64_t k = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    size_t h = mix(k) & (t->mcap - 1);
    while (t->mk[h] != UINT64_MAX && t->mk[h] != k) h = (h + 1) & (t->mcap - 1);
    return h;
}

/* Merge "a b" (the spellings) at the next rank. */
kiln_status kiln__tok_merge(kiln_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen,
                            const char *who) {
    int32_t ia = kiln__tok_find(t, a, alen), ib = kiln__tok_find(t, b, blen);
    char small[256], *buf = alen + blen <= sizeof small ? small : kiln__malloc(alen + blen);
    if (!buf) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    memcpy(buf, a, alen);
    memcpy(buf + alen, b, blen);
    int32_t ir = kiln__tok_find(t, buf, alen + blen);
    if (buf != small) free(buf);
    if (ia < 0 || ib < 0 || ir < 0)
        return kiln__errs(KILN_ERR_FORMAT, "%s: merge %lld ('%.*s' '%.*s') names a token not in the vocabulary", who,
                          (long long)t->n_merges, (int)(alen > 64 ? 64 : alen), a, (int)(blen > 64 ? 64 : blen), b);
    size_t h = merge_slot(t, ia, ib);
    if (t->mk[h] == UINT64_MAX) { /* a repeated pair keeps its first (lowest) rank */
        t->mk[h] = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
        t->mrank[h] = (int32_t)t->n_merges;
        t->mres[h] = ir;
    }
    t->mpair[2 * t->n_merges] = ia;
    t->mpair[2 * t->n_merges + 1] = ib;
    t->n_merges++;
    return KILN_OK;
}

static size_t put_utf8(char *o, int32_t cp) {
    if (cp < 0x80) return o[0] = (char)cp, 1;
    if (cp < 0x800) return o[0] = (char)(0xC0 | cp >> 6), o[1] = (char)(0x80 | (cp & 63)), 2;
    o[0] = (char)(0xE0 | cp >> 12), o[1] = (char)(0x80 | ((cp >> 6) & 63)), o[2] = (char)(0x80 | (cp & 63));
    return 3;
}

static int cmp_special_len(const kiln_tokenizer *t, int32_t a, int32_t b) {
    return t->len[a] != t->len[b] ? (t->len[a] > t->len[b] ? -1 : 1) : (a < b ? -1 : 1);
}

/* The byte tokens, the spelling index (done by the caller) and the specials. */
kiln_status kiln__tok_finish(kiln_tokenizer *t, const char *who) {
    for (int b = 0; b < 256 && !t->spm; b++) {
        char s[4];
        size_t k = put_utf8(s, t->byte_cp[b]);
        if ((t->byte_tok[b] = kiln__tok_find(t, s, k)) < 0)
            return kiln__errs(KILN_ERR_UNSUPPORTED,
                              "%s: the vocabulary has no token for byte 0x%02x ('%.*s'): not a byte-level BPE", who, b,
                              (int)k, s);
    }
    /* the ends of a turn as llama.cpp knows them by their spelling */
    static const char *eog[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>",
                                "<EOT>"};
    t->n_eog = 0;
    for (size_t i = 0; i < sizeof eog / sizeof eog[0]; i++) {
        int32_t id = kiln__tok_find(t, eog[i], strlen(eog[i]));
        if (id >= 0) t->eog[t->n_eog++] = id;
    }
    int n = 0;
    for (int64_t i = 0; i < t->n; i++) n += t->raw[i] && t->len[i];
    if (!(t->special = kiln__malloc((size_t)(n ? n : 1) * sizeof *t->special)))
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    for (int64_t i = 0; i < t->n; i++)
        if (t->raw[i] && t->len[i]) t->special[t->n_special++] = (int32_t)i, t->n_always += t->raw[i] == 2;
    for (int i = 1; i < t->n_special; i++) /* insertion sort: few specials */
        for (int j = i; j > 0 && cmp_special_len(t, t->special[j], t->special[j - 1]) < 0; j--) {
            int32_t x = t->special[j];
            t->special[j] = t->special[j - 1];
            t->special[j - 1] = x;
        }
    return KILN_OK;
}

/* ---- pre-tokenizer regexes kiln knows ---- */

static const struct {
    const char *re;
    int mode;
} known_re[] = {
    {"'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+", KILN__SPLIT_GPT2},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+", KILN__SPLIT_LLAMA3},
    {"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|"
     "\\s+(?!\\S)|\\s+", KILN__SPLIT_QWEN2},
};

static kiln_status pretok(kiln_tokenizer *t, const kiln__json *p, int *mode, const char *who) {
    const kiln__json *ty = kiln__json_get(p, "type");
    const char *type = ty && ty->type == KILN_JSON_STRING ? ty->str : "?";
    if (!strcmp(type, "Sequence")) {
        const kiln__json *l = kiln__json_get(p, "pretokenizers");
        for (const kiln__json *c = l && l->type == KILN_JSON_ARRAY ? l->child : NULL; c; c = c->next) {
            kiln_status s = pretok(t, c, mode, who);
            if (s) return s;
        }
        return KILN_OK;
    }
    int m = -1;
    if (!strcmp(type, "ByteLevel")) {
        const kiln__json *ur = kiln__json_get(p, "use_regex"), *ap = kiln__json_get(p, "add_prefix_space");
        t->prefix_space = ap && ap->type == KILN_JSON_TRUE;
        if (ur && ur->type == KILN_JSON_FALSE) return KILN_OK;
        m = KILN__SPLIT_GPT2;
    } else if (!strcmp(type, "Split")) {
        const kiln__json *re = kiln__json_get(kiln__json_get(p, "pattern"), "Regex");
        for (size_t i = 0; re && re->type == KILN_JSON_STRING && i < sizeof known_re / sizeof known_re[0]; i++)
            if (!strcmp(re->str, known_re[i].re)) m = known_re[i].mode;
        if (m < 0)
            return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: the pre-tokenizer's regex %s%.120s%s is not one kiln knows "
                              "(GPT-2's, Llama 3's, Qwen 2's)", who, re ? "'" : "", re && re->str ? re->str : "(none)",
                              re ? "'" : "");
    } else {
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: pre-tokenizer '%s' is not supported", who, type);
    }
    if (*mode >= 0 && *mode != m) return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: two different pre-tokenizer splits", who);
    *mode = m;
    return KILN_OK;
}

/* ---- tokenizer.json ---- */

static kiln_status json_vocab(kiln_tokenizer **out, const kiln__json *root, const char *who) {
    const kiln__json *model = kiln__json_get(root, "model"), *vocab = kiln__json_get(model, "vocab"),
                     *merges = kiln__json_get(model, "merges"), *added = kiln__json_get(root, "added_tokens");
    const kiln__json *ty = kiln__json_get(model, "type");
    if (ty && (ty->type != KILN_JSON_STRING || strcmp(ty->str, "BPE")))
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: model type '%s' (kiln reads BPE)", who,
                          ty->type == KILN_JSON_STRING ? ty->str : "?");
    if (!vocab || vocab->type != KILN_JSON_OBJECT || (merges && merges->type != KILN_JSON_ARRAY) ||
        (added && added->type != KILN_JSON_ARRAY))
        return kiln__errs(KILN_ERR_FORMAT, "%s: needs model.vocab (object), model.merges and added_tokens (arrays)", who);
    /* ids are dense in practice: refuse one far past the count before allocating for it */
    int64_t count = (int64_t)vocab->len + (added ? (int64_t)added->len : 0), max = -1;
    for (int pass = 0; pass < 2; pass++)
        for (const kiln__json *c = pass ? (added ? added->child : NULL) : vocab->child; c; c = c->next) {
            const kiln__json *id = pass ? kiln__json_get(c, "id") : c;
            if (!id || id->type != KILN_JSON_NUMBER || !id->is_int || id->i64 < 0 || id->i64 >= 2 * count + 256)
                return kiln__errs(KILN_ERR_FORMAT, "%s: a token id is not an integer in [0, %lld) (byte %zu)", who,
                                  (long long)(2 * count + 256), c->offset);
            if (id->i64 > max) max = id->i64;
        }
    kiln_tokenizer *t = *out = kiln__tok_new(max + 1, who);
    if (!t) return kiln_last_status();
    kiln_status s;
    for (const kiln__json *c = vocab->child; c; c = c->next)
        if ((s = kiln__tok_set(t, c->i64, c->key, c->key_len, 0, who))) return s;
    for (const kiln__json *c = added ? added->child : NULL; c; c = c->next) {
        const kiln__json *ct = kiln__json_get(c, "content");
        if (!ct || ct->type != KILN_JSON_STRING)
            return kiln__errs(KILN_ERR_FORMAT, "%s: an added token has no content (byte %zu)", who, c->offset);
        const kiln__json *sp = kiln__json_get(c, "special"), /* "special": false is always found in text */
                         *ls = kiln__json_get(c, "lstrip"), *rs = kiln__json_get(c, "rstrip");
        int64_t id = kiln__json_get(c, "id")->i64;
        int how = (ls && ls->type == KILN_JSON_TRUE ? 1 : 0) | (rs && rs->type == KILN_JSON_TRUE ? 2 : 0);
        if ((s = kiln__tok_set(t, id, ct->str, ct->len, sp && sp->type == KILN_JSON_TRUE ? 1 : 2, who)) ||
            (how && (s = kiln__tok_strip(t, (int32_t)id, how, who))))
            return s;
    }
    if ((s = kiln__tok_index(t, who)) || (s = kiln__tok_merges_alloc(t, merges ? (int64_t)merges->len : 0, who)))
        return s;
    for (const kiln__json *m = merges ? merges->child : NULL; m; m = m->next) {
        if (m->type == KILN_JSON_STRING) { /* "a b" */
            const char *sp = memchr(m->str, ' ', m->len);
            if (!sp) return kiln__errs(KILN_ERR_FORMAT, "%s: merge '%s' is not two tokens (byte %zu)", who, m->str, m->offset);
            s = kiln__tok_merge(t, m->str, (size_t)(sp - m->str), sp + 1, m->len - (size_t)(sp - m->str) - 1, who);
        } else if (m->type == KILN_JSON_ARRAY && m->len == 2 && m->child->type == KILN_JSON_STRING &&
                   m->child->next->type == KILN_JSON_STRING) { /* ["a", "b"] */
            s = kiln__tok_merge(t, m->child->str, m->child->len, m->child->next->str, m->child->next->len, who);
        } else {
            s = kiln__errs(KILN_ERR_FORMAT, "%s: a merge is neither \"a b\" nor [\"a\", \"b\"] (byte %zu)", who, m->offset);
        }
        if (s) return s;
    }
    const kiln__json *im = kiln__json_get(model, "ignore_merges"), *bf = kiln__json_get(model, "byte_fallback"),
                     *unk = kiln__json_get(model, "unk_token");
    t->ignore_merges = im && im->type == KILN_JSON_TRUE;
    t->spm = bf && bf->type == KILN_JSON_TRUE; /* SentencePiece converted: characters, '\u2581', <0xXX> */
    t->unk = unk && unk->type == KILN_JSON_STRING ? kiln__tok_find(t, unk->str, unk->len) : -1;
    return KILN_OK;
}

kiln_tokenizer *kiln_tokenizer_from_json(const char *path) {
    const char *who = "kiln_tokenizer_from_json";
    if (!path) return kiln__err(KILN_ERR_ARG, "%s: path is NULL", who);
    size_t n;
    char *text = kiln__read_file(path, (size_t)1 << 30, &n, who);
    if (!text) return NULL;
    char msg[320];
    snprintf(msg, sizeof msg, "%s: %s", who, path);
    kiln__json_doc *doc = kiln__json_parse_bounded(text, n, 64, (int64_t)n / 2 + 16, msg);
    kiln_tokenizer *t = NULL;
    kiln_status s = doc ? KILN_OK : kiln_last_status();
    const kiln__json *root = kiln__json_root(doc);
    if (!s) s = json_vocab(&t, root, msg);
    const kiln__json *norm = kiln__json_get(root, "normalizer");
    int mode = -1;
    const kiln__json *pre = kiln__json_get(root, "pre_tokenizer");
    if (!s && t->spm) {
        s = kiln__spm_json(t, norm, pre, msg);
        mode = KILN__SPLIT_GPT2; /* unused */
    } else if (!s && norm && norm->type != KILN_JSON_NULL) {
        s = kiln__errs(KILN_ERR_UNSUPPORTED, "%s: normalizers are not supported", msg);
    }
    if (!s && !t->spm && pre && pre->type != KILN_JSON_NULL) s = pretok(t, pre, &mode, msg);
    if (!s && mode < 0) s = kiln__errs(KILN_ERR_UNSUPPORTED, "%s: no pre-tokenizer split kiln knows", msg);
    if (!s) t->split = mode;
    if (!s) t->add_bos = t->spm || mode == KILN__SPLIT_LLAMA3; /* as llama.cpp's defaults for such files */
    if (!s) s = kiln__tok_finish(t, msg);
    kiln__json_free(doc);
    free(text);
    if (s) {
        kiln_tokenizer_free(t);
        return NULL;
    }
    return t;
}

/* ---- encode, decode ---- */

int64_t kiln_tokenizer_vocab_size(const kiln_tokenizer *t) { return t ? t->n : 0; }
int32_t kiln_tokenizer_bos(const kiln_tokenizer *t) { return t ? t->bos : -1; }
int32_t kiln_tokenizer_eos(const kiln_tokenizer *t) { return t ? t->eos : -1; }
void kiln_tokenizer_set_bos_eos(kiln_tokenizer *t, int32_t bos, int32_t eos) {
    if (!t) return;
    t->bos = bos >= 0 && bos < t->n ? bos : -1;
    t->eos = eos >= 0 && eos < t->n ? eos : -1;
}
int32_t kiln_tokenizer_special(const kiln_tokenizer *t, kiln_tok_special which) {
    if (!t) return -1;
    switch (which) {
    case KILN_TOK_BOS: return t->bos;
    case KILN_TOK_EOS: return t->eos;
    case KILN_TOK_EOT: return t->eot >= 0 ? t->eot : t->n_eog && t->eog[0] != t->eos ? t->eog[0] : -1;
    case KILN_TOK_UNK: return t->unk;
    case KILN_TOK_PAD: return t->pad;
    }
    return -1;
}
bool kiln_tokenizer_is_eog(const kiln_tokenizer *t, int32_t id) {
    if (!t || id < 0) return false;
    bool hit = id == t->eos || id == t->eot || id == t->eom;
    for (int i = 0; i < t->n_eog && !hit; i++) hit = id == t->eog[i];
    return hit;
}
bool kiln_tokenizer_add_bos(const kiln_tokenizer *t) { return t && t->add_bos && t->bos >= 0; }
bool kiln_tokenizer_add_eos(const kiln_tokenizer *t) { return t && t->add_eos && t->eos >= 0; }
const char *kiln_tokenizer_token(const kiln_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n ? t->tok[id] : NULL;
}
int32_t kiln_tokenizer_find(const kiln_tokenizer *t, const char *token) {
    return t && token ? kiln__tok_find(t, token, strlen(token)) : -1;
}


int32_t kiln__tok_merge_of(const kiln_tokenizer *t, int32_t a, int32_t b, int32_t *res) {
    if (!t->mk) return -1;
    size_t h = merge_slot(t, a, b);
    if (t->mk[h] == UINT64_MAX) return -1;
    *res = t->mres[h];
    return t->mrank[h];
}

/* One pre-token's bytes through the merges. sym is scratch of n ids. */
static void bpe_word(const kiln_tokenizer *t, const unsigned char *w, size_t n, int32_t *sym, char *spell, kiln__ids *o) {
    if (t->ignore_merges) { /* Llama 3: a word that is a token is that token */
        size_t k = 0;
        for (size_t i = 0; i < n; i++) k += put_utf8(spell + k, t->byte_cp[w[i]]);
        int32_t id = kiln__tok_find(t, spell, k);
        if (id >= 0 && !t->raw[id]) { /* added tokens are not the model's vocabulary */
            kiln__emit(o, id);
            return;
        }
    }
    size_t m = n;
    for (size_t i = 0; i < n; i++) sym[i] = t->byte_tok[w[i]];
    while (m > 1) {
        int32_t best = INT32_MAX, res = -1, a = 0, b = 0;
        for (size_t i = 0; i + 1 < m; i++) {
            int32_t r2, rank = kiln__tok_merge_of(t, sym[i], sym[i + 1], &r2);
            if (rank >= 0 && rank < best) best = rank, res = r2, a = sym[i], b = sym[i + 1];
        }
        if (res < 0) break;
        size_t j = 0;
        for (size_t i = 0; i < m; i++) {
            if (i + 1 < m && sym[i] == a && sym[i + 1] == b) {
                sym[j++] = res;
                i++;
            } else {
                sym[j++] = sym[i];
            }
        }
        m = j;
    }
    for (size_t i = 0; i < m; i++) kiln__emit(o, sym[i]);
}

/* A fragment of plain text (no specials): pre-tokenized and BPE'd, or
 * SentencePiece's. first: the text's start or right after a special. */
static kiln_status encode_plain(const kiln_tokenizer *t, const unsigned char *s, size_t n, bool at_start, bool first,
                                int32_t *sym, char *spell, kiln__ids *o) {
    if (t->spm) return n ? kiln__spm_encode(t, s, n, t->add_space && (at_start || (first && t->space_every)), o) : KILN_OK;
    if (t->prefix_space && at_start && n && s[0] != ' ') { /* ByteLevel's add_prefix_space */
        unsigned char *w = kiln__malloc(n + 1);
        if (!w) return kiln__errs(KILN_ERR_OOM, "kiln_tokenizer_encode: out of memory");
        w[0] = ' ';
        memcpy(w + 1, s, n);
        kiln_status st = encode_plain(t, w, n + 1, false, first, sym, spell, o);
        free(w);
        return st;
    }
    for (size_t i = 0; i < n;) {
        size_t e = kiln__pretok_next(t->split, s, n, i);
        bpe_word(t, s + i, e - i, sym, spell, o);
        i = e;
    }
    return KILN_OK;
}

/* SentencePiece: each plain byte at most 3 ids (a space is U+2581's three
 * byte tokens), each special 1 id and 3 for the space after it, 3 for the
 * space in front: 3 * plain + 4 * specials + 3 <= 4 * len + 3. */
int64_t kiln_tokenizer_max_ids(const kiln_tokenizer *t, size_t len) {
    if (!t) return 0;
    uint64_t k = t->spm ? 4 : 1, most = ((uint64_t)INT64_MAX - 3) / 4;
    return len > most ? INT64_MAX : (int64_t)(k * len + (t->spm ? 3 : 1));
}

kiln_status kiln_tokenizer_encode(const kiln_tokenizer *t, const char *text, size_t len, bool special, int32_t *ids,
                                  int64_t cap, int64_t *n) {
    const char *who = "kiln_tokenizer_encode";
    if (!t || (!text && len) || (!ids && cap) || cap < 0 || !n) return kiln__errs(KILN_ERR_ARG, "%s: bad argument", who);
    const unsigned char *buf = (const unsigned char *)text;
    int32_t *sym = kiln__malloc((len + 2) * sizeof *sym);
    char *spell = kiln__malloc(2 * len + 3);
    if (!sym || !spell) {
        free(sym), free(spell);
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    }
    kiln__ids o = {ids, cap, 0};
    size_t start = 0;
    bool first = true;
    kiln_status s = KILN_OK;
    for (size_t i = 0; (special || t->n_always) && i < len && !s;) {
        int32_t hit = -1;
        for (int j = 0; j < t->n_special && hit < 0; j++) {
            int32_t id = t->special[j];
            if ((special || t->raw[id] == 2) && t->len[id] <= len - i && !memcmp(buf + i, t->tok[id], t->len[id]))
                hit = id;
        }
        if (hit < 0) {
            i++;
            continue;
        }
        size_t end = i; /* lstrip / rstrip: the whitespace beside the token is not text */
        while (t->strip && (t->strip[hit] & 1) && end > start && isspace(buf[end - 1])) end--;
        if (end > start) s = encode_plain(t, buf + start, end - start, start == 0, first, sym, spell, &o);
        kiln__emit(&o, hit);
        first = true;
        i += t->len[hit];
        while (t->strip && (t->strip[hit] & 2) && i < len && isspace(buf[i])) i++;
        start = i;
    }
    if (!s && (len > start || !len)) s = encode_plain(t, buf + start, len - start, start == 0, first, sym, spell, &o);
    free(sym), free(spell);
    if (s) return s;
    *n = o.n;
    if (o.n > cap)
        return kiln__errs(KILN_ERR_ARG, "%s: %lld ids do not fit in %lld", who, (long long)o.n, (long long)cap);
    return KILN_OK;
}

kiln_status kiln_tokenizer_decode(const kiln_tokenizer *t, const int32_t *ids, int64_t n, char *out, size_t cap,
                                  size_t *len) {
    const char *who = "kiln_tokenizer_decode";
    if (!t || (!ids && n) || (!out && cap) || !len || n < 0) return kiln__errs(KILN_ERR_ARG, "%s: bad argument", who);
    size_t k = 0;
    bool strip = t->spm && t->add_space; /* the space encode put in front */
#define PUT(c)                                                                                                         \
    do {                                                                                                               \
        if (k < cap) out[k] = (char)(c);                                                                               \
        k++;                                                                                                           \
    } while (0)
    for (int64_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n)
            return kiln__errs(KILN_ERR_ARG, "%s: id %d (position %lld) is not a token", who, id, (long long)i);
        if (!t->tok[id]) continue; /* an unused id spells nothing, as in llama.cpp */
        const unsigned char *s = (const unsigned char *)t->tok[id];
        size_t L = t->len[id];
        if (t->raw[id]) {
            for (size_t j = 0; j < L; j++) PUT(s[j]);
            strip = t->spm && t->add_space && t->space_every;
            continue;
        }
        if (t->spm) { /* <0xXX> is its byte; U+2581 a space, dropped where encode put one */
            if (t->fb[id] >= 0) {
                PUT(t->fb[id]);
            } else {
                for (size_t j = 0; j < L; j++) {
                    if (L - j >= 3 && !memcmp(s + j, "\xe2\x96\x81", 3)) {
                        if (!strip) PUT(' ');
                        j += 2;
                    } else {
                        PUT(s[j]);
                    }
                    strip = false;
                }
            }
            strip = false;
            continue;
        }
        for (size_t j = 0; j < L;) { /* each stand-in character back to its byte */
            unsigned c = s[j];
            size_t w = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : 4;
            if (w > L - j) w = 1;
            int32_t cp = (int32_t)c;
            if (w == 2) cp = (int32_t)((c & 0x1F) << 6 | (s[j + 1] & 63));
            if (w <= 2 && cp < 324 && t->cp_byte[cp] >= 0) {
                PUT(t->cp_byte[cp]);
            } else {
                for (size_t q = 0; q < w; q++) PUT(s[j + q]); /* not a stand-in: as written */
            }
            j += w;
        }
    }
#undef PUT
    *len = k;
    if (k > cap) return kiln__errs(KILN_ERR_ARG, "%s: %zu bytes do not fit in %zu", who, k, cap);
    return KILN_OK;
}
