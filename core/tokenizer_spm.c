/* tokenizer_spm.c — SentencePiece BPE as GGUF's "llama" tokenizer model
 * holds it (Llama 1/2, TinyLlama, Mistral): spaces are U+2581 ('▁'), a '▁'
 * goes in front of the text (tokenizer.ggml.add_space_prefix, default
 * true), the text is split into UTF-8 characters and adjacent pieces are
 * merged while their concatenation is a token, the highest score first
 * (ties: leftmost), as llama.cpp's llm_tokenizer_spm does. A character
 * that is no token becomes its bytes' <0xXX> tokens (byte fallback), or
 * the unknown token when the vocabulary has none. */
#include "tokenizer.h"
#include "json.h"

#include <stdio.h>

/* The <0xXX> byte tokens. */
kiln_status kiln__spm_byte_tokens(kiln_tokenizer *t, const char *who) {
    if (!t->fb && !(t->fb = kiln__malloc((size_t)t->n * sizeof *t->fb)))
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->byte_fb[b] = kiln__tok_find(t, name, 6);
    }
    for (int64_t i = 0; i < t->n; i++) {
        t->fb[i] = -1;
        unsigned v;
        /* %X takes a sign ("<0x-7>" reads as 0xfffffff9): v is checked before indexing */
        if (t->tok[i] && t->len[i] == 6 && sscanf(t->tok[i], "<0x%2X>", &v) == 1 && v < 256 && t->byte_fb[v] == i)
            t->fb[i] = (int16_t)v;
    }
    return KILN_OK;
}

static const char *jstr(const kiln__json *o, const char *key) {
    const kiln__json *v = kiln__json_get(o, key);
    return v && v->type == KILN_JSON_STRING ? v->str : NULL;
}

/* Hugging Face's Llama 2 form: normalizer Sequence[Prepend "\u2581",
 * Replace " " -> "\u2581"], no pre-tokenizer; newer files: no normalizer,
 * pre-tokenizer Metaspace (replacement "\u2581", prepend_scheme
 * first/always/never, split false). Merges by rank. */
kiln_status kiln__spm_json(kiln_tokenizer *t, const kiln__json *norm, const kiln__json *pre, const char *who) {
    const char *meta = "\xe2\x96\x81";
    bool prepend = false, replace = false;
    if (norm && norm->type != KILN_JSON_NULL) {
        const char *ty = jstr(norm, "type");
        const kiln__json *list = ty && !strcmp(ty, "Sequence") ? kiln__json_get(norm, "normalizers") : NULL;
        for (const kiln__json *c = list && list->type == KILN_JSON_ARRAY ? list->child : norm; c;
             c = list ? c->next : NULL) {
            const char *ct = jstr(c, "type");
            if (ct && !strcmp(ct, "Prepend") && jstr(c, "prepend") && !strcmp(jstr(c, "prepend"), meta)) prepend = true;
            else if (ct && !strcmp(ct, "Replace") && jstr(kiln__json_get(c, "pattern"), "String") &&
                     !strcmp(jstr(kiln__json_get(c, "pattern"), "String"), " ") && jstr(c, "content") &&
                     !strcmp(jstr(c, "content"), meta))
                replace = true;
            else
                return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: normalizer '%s' is not supported", who, ct ? ct : "?");
        }
        t->space_every = true; /* the normalizer sees each piece between special tokens */
    }
    if (pre && pre->type != KILN_JSON_NULL) {
        const char *ty = jstr(pre, "type"), *scheme = jstr(pre, "prepend_scheme"), *rep = jstr(pre, "replacement");
        const kiln__json *split = kiln__json_get(pre, "split");
        if (!ty || strcmp(ty, "Metaspace") || !rep || strcmp(rep, meta) || (split && split->type == KILN_JSON_TRUE))
            return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: pre-tokenizer '%s' with a SentencePiece vocabulary (kiln "
                              "reads Metaspace without split)", who, ty ? ty : "?");
        replace = true;
        prepend = !scheme || strcmp(scheme, "never");
        t->space_every = scheme && !strcmp(scheme, "always");
    }
    if (!replace)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: a byte_fallback BPE that does not spell spaces as U+2581", who);
    t->add_space = prepend;
    return kiln__spm_byte_tokens(t, who);
}

kiln_status kiln__spm_load(kiln_tokenizer *t, const kiln_gguf *g, const char *who) {
    t->spm = true;
    t->add_space = true;
    t->space_every = true; /* llama.cpp: a space after each special token too */
    if (kiln_gguf_find_key(g, "tokenizer.ggml.add_space_prefix") >= 0) {
        int64_t v;
        kiln_status s = kiln_gguf_get_int(g, "tokenizer.ggml.add_space_prefix", &v);
        if (s) return s;
        t->add_space = v != 0;
    }
    t->score = kiln__calloc((size_t)t->n, sizeof *t->score);
    if (!t->score) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    kiln_status bs = kiln__spm_byte_tokens(t, who);
    if (bs) return bs;
    kiln_gguf_type et;
    uint64_t n = 0;
    if (kiln_gguf_find_key(g, "tokenizer.ggml.scores") >= 0 &&
        (kiln_gguf_get_array(g, "tokenizer.ggml.scores", &et, &n) || (int64_t)n != t->n))
        return kiln__errs(KILN_ERR_FORMAT, "%s: tokenizer.ggml.scores does not have one number per token", who);
    for (uint64_t i = 0; i < n; i++) {
        double v;
        kiln_status s = kiln_gguf_array_float(g, "tokenizer.ggml.scores", i, &v);
        if (s) return s;
        t->score[i] = (float)v;
    }
    return KILN_OK;
}

/* toks, types: the writer's, n of them (the tokenizer's ids, then holes). */
kiln_status kiln__spm_save(const kiln_tokenizer *t, kiln_gguf_writer *w, int64_t n, const char **toks,
                           const int32_t *types) {
    float *score = kiln__calloc((size_t)n, sizeof *score);
    if (!score) return kiln__errs(KILN_ERR_OOM, "kiln_tokenizer_to_gguf: out of memory");
    if (t->score) {
        memcpy(score, t->score, (size_t)t->n * sizeof *score);
    } else { /* tokenizer.json's merges by rank: the lower the rank, the higher the merged token's score */
        for (int64_t i = 0; i < t->n; i++) score[i] = -(float)t->n_merges - 1;
        for (int64_t i = t->n_merges - 1; i >= 0; i--) {
            int32_t res;
            if (kiln__tok_merge_of(t, t->mpair[2 * i], t->mpair[2 * i + 1], &res) >= 0) score[res] = -(float)i;
        }
    }
    kiln_status s = kiln_gguf_set_string(w, "tokenizer.ggml.model", "llama");
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, (uint64_t)n);
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, score, (uint64_t)n);
    if (!s) s = kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, (uint64_t)n);
    if (!s) s = kiln_gguf_set_int(w, "tokenizer.ggml.add_space_prefix", KILN_GGUF_BOOL, t->add_space);
    free(score);
    return s;
}

/* ---- encoding ---- */

typedef struct bigram {
    float score;
    int32_t left, right;
    uint32_t size;
} bigram;

/* A max-heap on score, then the leftmost. */
static bool before(const bigram *a, const bigram *b) {
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct spm {
    const kiln_tokenizer *t;
    const char *text;
    int32_t *start, *len, *prev, *next;
    bigram *heap;
    size_t n_heap;
} spm;

static void push(spm *m, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    float score;
    if (m->t->n_merges || !m->t->score) { /* tokenizer.json (no scores): the pair must be a merge; lower rank first */
        int32_t a = kiln__tok_find(m->t, m->text + m->start[l], (size_t)m->len[l]);
        int32_t b = kiln__tok_find(m->t, m->text + m->start[r], (size_t)m->len[r]), res;
        int32_t rank = a >= 0 && b >= 0 ? kiln__tok_merge_of(m->t, a, b, &res) : -1;
        if (rank < 0) return;
        score = -(float)rank;
    } else { /* GGUF: the concatenation must be a token; higher score first */
        int32_t id = kiln__tok_find(m->t, m->text + m->start[l], (size_t)(m->len[l] + m->len[r]));
        if (id < 0 || m->t->raw[id]) return;
        score = m->t->score[id];
    }
    bigram b = {score, l, r, (uint32_t)(m->len[l] + m->len[r])};
    size_t i = m->n_heap++;
    while (i > 0 && before(&b, &m->heap[(i - 1) / 2])) {
        m->heap[i] = m->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    m->heap[i] = b;
}

static bigram pop(spm *m) {
    bigram top = m->heap[0], last = m->heap[--m->n_heap];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m->n_heap) break;
        if (c + 1 < m->n_heap && before(&m->heap[c + 1], &m->heap[c])) c++;
        if (!before(&m->heap[c], &last)) break;
        m->heap[i] = m->heap[c];
        i = c;
    }
    if (m->n_heap) m->heap[i] = last;
    return top;
}

static size_t char_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    if (k > n) return 1;
    for (size_t j = 1; j < k; j++)
        if ((s[j] & 0xC0) != 0x80) return 1;
    return k;
}

kiln_status kiln__spm_encode(const kiln_tokenizer *t, const unsigned char *s, size_t n, bool space, kiln__ids *o) {
    const char *who = "kiln_tokenizer_encode";
    size_t cap = 3 * n + 3; /* every byte a space becomes 3 bytes; and the prefix */
    char *text = kiln__malloc(cap);
    int32_t *arr = kiln__malloc(4 * cap * sizeof *arr);
    bigram *heap = kiln__malloc(3 * cap * sizeof *heap);
    kiln_status st = KILN_OK;
    if (!text || !arr || !heap) {
        st = kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
        goto done;
    }
    size_t L = 0;
    if (space) memcpy(text, "\xe2\x96\x81", 3), L = 3;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == ' ') memcpy(text + L, "\xe2\x96\x81", 3), L += 3;
        else text[L++] = (char)s[i];
    }
    spm m = {t, text, arr, arr + cap, arr + 2 * cap, arr + 3 * cap, heap, 0};
    int32_t k = 0;
    for (size_t i = 0; i < L; k++) {
        size_t c = char_len((const unsigned char *)text + i, L - i);
        m.start[k] = (int32_t)i;
        m.len[k] = (int32_t)c;
        m.prev[k] = k - 1;
        m.next[k] = -1;
        if (k) m.next[k - 1] = k;
        i += c;
    }
    for (int32_t i = 0; i + 1 < k; i++) push(&m, i, i + 1);
    while (m.n_heap) {
        bigram b = pop(&m);
        if (!m.len[b.left] || !m.len[b.right] || (uint32_t)(m.len[b.left] + m.len[b.right]) != b.size) continue;
        m.len[b.left] += m.len[b.right];
        m.len[b.right] = 0;
        m.next[b.left] = m.next[b.right];
        if (m.next[b.right] >= 0) m.prev[m.next[b.right]] = b.left;
        push(&m, m.prev[b.left], b.left);
        push(&m, b.left, m.next[b.left]);
    }
    for (int32_t i = k ? 0 : -1; i >= 0; i = m.next[i]) {
        int32_t id = kiln__tok_find(t, text + m.start[i], (size_t)m.len[i]);
        if (id >= 0 && !t->raw[id]) {
            kiln__emit(o, id);
            continue;
        }
        for (int32_t j = 0; j < m.len[i]; j++) {
            unsigned char byte = (unsigned char)text[m.start[i] + j];
            int32_t fb = t->byte_fb[byte] >= 0 ? t->byte_fb[byte] : t->unk;
            if (fb < 0) {
                st = kiln__errs(KILN_ERR_UNSUPPORTED, "%s: byte 0x%02x has no token and there is no unknown token",
                                who, byte);
                goto done;
            }
            kiln__emit(o, fb);
            if (fb == t->unk) break; /* one <unk> per character */
        }
    }
done:
    free(text);
    free(arr);
    free(heap);
    return st;
}
