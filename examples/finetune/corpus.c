/* corpus.c — the data file as one token stream with a label mask: plain
 * text whole, or chat JSONL rendered by the chat template one message at a
 * time, so that each token is known to be the assistant's or not. */
#include "finetune.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool grow(corpus *c, int64_t more) {
    if (c->n + more <= c->cap) return true;
    int64_t cap = c->cap ? c->cap : 4096;
    while (cap < c->n + more) cap *= 2;
    int32_t *ids = realloc(c->ids, (size_t)cap * sizeof *ids);
    if (ids) c->ids = ids;
    uint8_t *train = realloc(c->train, (size_t)cap);
    if (train) c->train = train;
    if (!ids || !train) return false;
    c->cap = cap;
    return true;
}

/* Encode len bytes of text onto the stream, each token labelled train. */
static bool append(corpus *c, const kiln_tokenizer *tok, const char *text, size_t len, bool special, bool train) {
    int64_t cap = kiln_tokenizer_max_ids(tok, len), n = 0;
    if (!grow(c, cap)) return false;
    if (kiln_tokenizer_encode(tok, text, len, special, c->ids + c->n, cap, &n)) return false;
    memset(c->train + c->n, train, (size_t)n);
    c->n += n;
    return true;
}

static bool append_id(corpus *c, int32_t id) {
    if (!grow(c, 1)) return false;
    c->ids[c->n] = id, c->train[c->n++] = 0;
    return true;
}

static char *read_all(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t cap = 0, n = 0, got;
    do {
        if (n == cap) {
            char *b = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!b) break;
            buf = b;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    bool bad = ferror(f) || !feof(f);
    fclose(f);
    if (bad) {
        free(buf);
        return NULL;
    }
    *len = n;
    return buf;
}

/* msgs[0..n) rendered, into a malloc'd string (*len bytes). */
static char *render(const char *tmpl, const kiln_chat_msg *msgs, int n, bool gen, const char *bos, const char *eos,
                    size_t *len) {
    *len = 0;
    kiln_chat_render(tmpl, msgs, n, gen, bos, eos, NULL, 0, len);
    char *s = malloc(*len + 1);
    if (s && kiln_chat_render(tmpl, msgs, n, gen, bos, eos, s, *len, len)) {
        free(s);
        return NULL;
    }
    return s;
}

/* s[0..n) starts with prefix[0..k) (NULL when k is 0) */
static bool extends(const char *s, size_t n, const char *prefix, size_t k) {
    return n >= k && (!k || !memcmp(s, prefix, k));
}

/* One conversation: each message appended as the part its rendering adds
 * to the rendering of those before it; an assistant's part split into the
 * generation prompt (no labels) and the reply (labels). Each rendering must
 * extend the one before, which the common templates do. */
static const char *conversation(corpus *c, const kiln_tokenizer *tok, const char *tmpl, const kiln_chat_msg *msgs,
                                int n) {
    const char *bos = kiln_tokenizer_token(tok, kiln_tokenizer_bos(tok)),
               *eos = kiln_tokenizer_token(tok, kiln_tokenizer_eos(tok));
    bos = bos ? bos : "", eos = eos ? eos : "";
    char *prev = NULL;
    size_t prev_len = 0;
    const char *why = NULL;
    for (int i = 0; i < n && !why; i++) {
        bool reply = !strcmp(msgs[i].role, "assistant");
        size_t plen = prev_len, flen;
        char *prompt = reply ? render(tmpl, msgs, i, true, bos, eos, &plen) : NULL;
        char *full = render(tmpl, msgs, i + 1, false, bos, eos, &flen);
        if ((reply && !prompt) || !full) why = kiln_last_error();
        else if (reply && (!extends(prompt, plen, prev, prev_len) || !extends(full, flen, prompt, plen)))
            why = "the template's rendering with this reply does not extend the one before it";
        else if (!reply && !extends(full, flen, prev, prev_len))
            why = "the template's rendering with this message does not extend the one before it";
        else {
            if (i == 0 && kiln_tokenizer_add_bos(tok) &&
                !(*bos && flen >= strlen(bos) && !memcmp(full, bos, strlen(bos))))
                append_id(c, kiln_tokenizer_bos(tok));
            if (!append(c, tok, full + prev_len, plen - prev_len, true, false) ||
                !append(c, tok, full + plen, flen - plen, true, reply))
                why = kiln_last_error();
        }
        free(prompt);
        free(prev);
        prev = full, prev_len = flen;
    }
    free(prev);
    return why;
}

static bool load_chat(corpus *c, const char *path, char *buf, size_t len, const kiln_tokenizer *tok, const char *tmpl) {
    int64_t line = 0;
    for (char *at = buf, *end; at < buf + len; at = end + 1) {
        end = memchr(at, '\n', (size_t)(buf + len - at));
        if (!end) end = buf + len;
        line++;
        if (end == at || (end - at == 1 && *at == '\r')) continue;
        json_error_t err;
        json_t *root = json_loadb(at, (size_t)(end - at), 0, &err);
        json_t *msgs = root ? json_object_get(root, "messages") : NULL;
        size_t n = json_array_size(msgs);
        kiln_chat_msg *m = n ? calloc(n, sizeof *m) : NULL;
        const char *why = !root ? err.text
                          : !n  ? "no \"messages\" array (or an empty one)"
                          : !m  ? "out of memory"
                                : NULL;
        for (size_t i = 0; i < n && !why; i++) {
            json_t *e = json_array_get(msgs, i);
            m[i].role = json_string_value(json_object_get(e, "role"));
            m[i].content = json_string_value(json_object_get(e, "content"));
            if (!m[i].role || !m[i].content) why = "a message without a string \"role\" and \"content\"";
        }
        if (!why) why = conversation(c, tok, tmpl, m, (int)n);
        free(m);
        json_decref(root);
        if (why) {
            fprintf(stderr, "finetune: %s line %lld: %s\n", path, (long long)line, why);
            return false;
        }
        c->docs++;
    }
    return true;
}

bool corpus_load(corpus *c, const char *path, bool chat, const kiln_tokenizer *tok, const char *tmpl) {
    *c = (corpus){.chat = chat};
    size_t len = 0;
    char *buf = read_all(path, &len);
    if (!buf) {
        fprintf(stderr, "finetune: --data %s: cannot read it\n", path);
        return false;
    }
    bool ok;
    if (chat) ok = load_chat(c, path, buf, len, tok, tmpl);
    else {
        c->docs = 1;
        ok = (!kiln_tokenizer_add_bos(tok) || append_id(c, kiln_tokenizer_bos(tok))) &&
             append(c, tok, buf, len, false, true);
        if (!ok) fprintf(stderr, "finetune: --data %s: %s\n", path, kiln_last_error());
    }
    free(buf);
    if (!ok) corpus_free(c);
    return ok;
}

void corpus_free(corpus *c) {
    free(c->ids);
    free(c->train);
    *c = (corpus){0};
}
