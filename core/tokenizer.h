/* tokenizer.h — what core/tokenizer.c shares with its pre-tokenizers
 * (core/tokenizer_split.c); not installed. */
#ifndef KILN_CORE_TOKENIZER_H
#define KILN_CORE_TOKENIZER_H

#include "internal.h"

/* Tokens are spelled in GPT-2's byte alphabet (BPE) or SentencePiece's
 * (spaces as U+2581, <0xXX> byte tokens). */
struct kiln_tokenizer {
    int64_t n;      /* ids 0..n-1 */
    char **tok;     /* NUL-terminated spelling per id, NULL for a hole */
    uint32_t *len;
    uint8_t *raw;   /* its text is literal, not byte-mapped: 1 a control token (found in text when encode is
                     * asked to), 2 a user-defined one (always found, as llama.cpp and transformers do) */
    int32_t *vh;    /* open-addressed: spelling -> id, -1 empty */
    size_t vcap;
    uint64_t *mk;   /* open-addressed: (left id, right id) -> rank, merged id */
    int32_t *mrank, *mres;
    size_t mcap;
    int32_t *mpair; /* the merges in rank order, two ids each */
    int64_t n_merges;
    int32_t byte_tok[256];
    int32_t byte_cp[256];
    int16_t cp_byte[324];
    int split;
    bool prefix_space, ignore_merges;
    int32_t bos, eos, eot, eom, pad; /* -1: none (unk is SentencePiece's, below, and tokenizer.json's) */
    bool add_bos, add_eos;
    int32_t eog[16]; /* the ids that end a turn: eos, eot, eom and the tokens spelled as chat templates end one */
    int n_eog;
    int32_t *special; /* raw ids, longest text first */
    int n_special, n_always; /* n_always: user-defined ones among them */
    uint8_t *strip;           /* NULL, or per id: 1 the whitespace before it goes, 2 the whitespace after */
    /* SentencePiece BPE (GGUF's "llama"): merges by score, '▁' for spaces */
    bool spm, add_space, space_every; /* space_every: after each special token too */
    float *score;
    int16_t *fb;      /* per id: the byte of a <0xXX> token, else -1 */
    int32_t byte_fb[256], unk;
};

/* Building one (tokenizer.c): n ids, all holes; a token's spelling (raw:
 * as the field); the spelling index; the
 * merge table for n merges and one merge "a b" at the next rank; the byte
 * tokens and the specials' list, once all is read. */
kiln_tokenizer *kiln__tok_new(int64_t n, const char *who);
kiln_status kiln__tok_set(kiln_tokenizer *t, int64_t id, const char *s, size_t len, int raw, const char *who);
kiln_status kiln__tok_index(kiln_tokenizer *t, const char *who);
kiln_status kiln__tok_merges_alloc(kiln_tokenizer *t, int64_t n, const char *who);
kiln_status kiln__tok_merge(kiln_tokenizer *t, const char *a, size_t alen, const char *b, size_t blen, const char *who);
kiln_status kiln__tok_finish(kiln_tokenizer *t, const char *who);
/* Token id strips the whitespace before it (1), after it (2) when found in text. */
kiln_status kiln__tok_strip(kiln_tokenizer *t, int32_t id, int how, const char *who);

/* The id spelled s[0..len), or -1. */
int32_t kiln__tok_find(const kiln_tokenizer *t, const char *s, size_t len);

/* Ids out: counted always, stored while they fit. */
typedef struct kiln__ids {
    int32_t *ids;
    int64_t cap, n;
} kiln__ids;
static inline void kiln__emit(kiln__ids *o, int32_t id) {
    if (o->n < o->cap) o->ids[o->n] = id;
    o->n++;
}

/* The rank of merging ids a, b (its result in *res), or -1. */
int32_t kiln__tok_merge_of(const kiln_tokenizer *t, int32_t a, int32_t b, int32_t *res);

/* SentencePiece BPE of one fragment (tokenizer_spm.c); space: put U+2581 first. */
kiln_status kiln__spm_encode(const kiln_tokenizer *t, const unsigned char *s, size_t n, bool space, kiln__ids *o);
/* The SentencePiece parts of loading from / saving to GGUF. */
kiln_status kiln__spm_load(kiln_tokenizer *t, const kiln_gguf *g, const char *who);
kiln_status kiln__spm_save(const kiln_tokenizer *t, kiln_gguf_writer *w, int64_t n, const char **toks,
                           const int32_t *types);
/* The <0xXX> byte tokens of a SentencePiece vocabulary. */
kiln_status kiln__spm_byte_tokens(kiln_tokenizer *t, const char *who);
/* tokenizer.json's SentencePiece form (byte_fallback BPE): the normalizer
 * (Prepend + Replace) or pre-tokenizer (Metaspace) that spells spaces. */
struct kiln__json;
kiln_status kiln__spm_json(kiln_tokenizer *t, const struct kiln__json *norm, const struct kiln__json *pre,
                           const char *who);

enum { KILN__SPLIT_GPT2, KILN__SPLIT_LLAMA3, KILN__SPLIT_QWEN2, KILN__SPLIT_TEKKEN, KILN__SPLIT_DEFAULT };

/* Code point cp's class in Unicode (tokenizer_unicode.c, generated): 1 a
 * letter (L*), 2 a number (N*), 3 punctuation (P*), 0 anything else or ASCII. */
int kiln__unicode_class(int32_t cp);

/* Where the pre-token starting at byte i of s[0..n) ends (> i). */
size_t kiln__pretok_next(int mode, const unsigned char *s, size_t n, size_t i);

#endif
