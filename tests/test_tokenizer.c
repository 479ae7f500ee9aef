/* test_tokenizer.c — byte-level BPE (core/tokenizer.c): a hand-written
 * tokenizer.json (the 256 byte tokens, a few merges, an added token) with
 * ids worked out by hand, the GPT-2 and Llama 3 pre-tokenizer splits
 * piece by piece, decode(encode(s)) == s on random bytes including invalid
 * UTF-8, the same tokenizer through GGUF metadata, and refusals. */
#include "kt.h"
#include "tokenizer.h"

#include <unistd.h>

/* GPT-2's bytes_to_unicode, written out again from its definition. */
static int byte_cp(int b) {
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool p = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        if (x == b) return p ? x : 256 + n;
        if (!p) n++;
    }
    return -1;
}

/* The JSON spelling of code point cp inside a string literal. */
static void put_cp(char **o, int cp) {
    if (cp == '"' || cp == '\\') *(*o)++ = '\\', *(*o)++ = (char)cp;
    else if (cp < 0x80) *(*o)++ = (char)cp;
    else *(*o)++ = (char)(0xC0 | cp >> 6), *(*o)++ = (char)(0x80 | (cp & 63));
}

static const char *PRE_GPT2 = "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
                              "\"use_regex\": true}";
static const char *PRE_LLAMA3 =
    "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
    "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
    "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": \"Isolated\", "
    "\"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"trim_offsets\": true, "
    "\"use_regex\": false}]}";

/* ids 0..255: the byte tokens (id = byte); then the merges' results. */
static const char *path_json(const char *pre) {
    static char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_tok_%d.json", (int)getpid());
    char *buf = malloc(65536), *o = buf;
    o += sprintf(o, "{\"version\": \"1.0\", \"truncation\": null, \"added_tokens\": [{\"id\": 261, \"content\": "
                    "\"<|endoftext|>\", \"single_word\": false, \"special\": true}], \"normalizer\": null, "
                    "\"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {", pre);
    for (int b = 0; b < 256; b++) {
        *o++ = '"';
        put_cp(&o, byte_cp(b));
        o += sprintf(o, "\": %d, ", b);
    }
    /* \u0120 is GPT-2's stand-in for the space byte, 'Ġ' */
    o += sprintf(o, "\"he\": 256, \"\\u0120t\": 257, \"\\u0120the\": 258, \"ll\": 259, \"llo\": 260, "
                    "\"\\u0120\\u0120\": 262}, \"merges\": [\"h e\", \"\\u0120 t\", \"\\u0120t he\", [\"l\", \"l\"], "
                    "\"ll o\", \"\\u0120 \\u0120\"]}}");
    FILE *f = fopen(path, "w");
    fputs(buf, f);
    fclose(f);
    free(buf);
    return path;
}

static kiln_tokenizer *load(const char *pre) {
    const char *p = path_json(pre);
    kiln_tokenizer *t = kiln_tokenizer_from_json(p);
    unlink(p);
    return t;
}

static void expect_ids(const kiln_tokenizer *t, const char *text, bool special, const int32_t *want, int n, int line) {
    int32_t ids[256];
    int64_t got = -1;
    kiln_status s = kiln_tokenizer_encode(t, text, strlen(text), special, ids, 256, &got);
    bool ok = !s && got == n;
    for (int i = 0; ok && i < n; i++) ok = ids[i] == want[i];
    if (!ok) {
        char msg[512];
        int k = snprintf(msg, sizeof msg, "'%s': got", text);
        for (int i = 0; i < got && i < 30 && k < 480; i++) k += snprintf(msg + k, sizeof msg - (size_t)k, " %d", ids[i]);
        kt_fail(__FILE__, line, "%s (%s)", msg, s ? kiln_last_error() : "ok");
    }
}
#define IDS(t, text, special, ...)                                                                  \
    do {                                                                                            \
        const int32_t w_[] = {__VA_ARGS__};                                                         \
        expect_ids(t, text, special, w_, (int)(sizeof w_ / sizeof w_[0]), __LINE__);                \
    } while (0)

static void check_hand_worked(const kiln_tokenizer *t) {
    IDS(t, "the", false, 't', 256);             /* (h,e) is the only merge */
    IDS(t, " the", false, 258);                 /* he, then Ġt, then Ġt+he */
    IDS(t, "hello", false, 256, 260);           /* he l l o -> he ll o -> he llo */
    IDS(t, "Hi  there", false, 'H', 'i', ' ', 258, 'r', 'e'); /* "Hi" " " " there" */
    IDS(t, "I'm 42!\n", false, 'I', '\'', 'm', ' ', '4', '2', '!', '\n');
    IDS(t, "a<|endoftext|>b", true, 'a', 261, 'b');
    IDS(t, "a<|endoftext|>b", false, 'a', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x', 't', '|', '>', 'b');
    IDS(t, "   ", false, 262, ' ');                /* all spaces to the end: one piece, ĠĠ + Ġ */
}

KT_TEST(tokenizer_json_hand_worked_ids) {
    kiln_tokenizer *t = load(PRE_GPT2);
    KT_NOTNULL(t);
    KT_CHECK(kiln_tokenizer_vocab_size(t) == 263, "vocab %lld", (long long)kiln_tokenizer_vocab_size(t));
    KT_CHECK(kiln_tokenizer_bos(t) == -1 && kiln_tokenizer_eos(t) == -1, "no bos/eos in tokenizer.json");
    KT_CHECK(kiln_tokenizer_find(t, "\xc4\xa0the") == 258 && !strcmp(kiln_tokenizer_token(t, 256), "he"), "find");
    check_hand_worked(t);
    const int32_t ids[] = {'H', 'i', 258, 261, ' ', 260};
    char out[64];
    size_t len;
    KT_OK(kiln_tokenizer_decode(t, ids, 6, out, sizeof out, &len));
    KT_CHECK(len == 23 && !memcmp(out, "Hi the<|endoftext|> llo", 23), "decode '%.*s'", (int)len, out);
    int32_t few[2];
    int64_t n;
    KT_CHECK(kiln_tokenizer_encode(t, "hello world", 11, false, few, 2, &n) == KILN_ERR_ARG && n == 8, "cap");
    KT_CHECK(kiln_tokenizer_decode(t, (int32_t[]){263}, 1, out, sizeof out, &len) == KILN_ERR_ARG, "bad id");
    kiln_tokenizer_free(t);
}

/* The pieces of text under a split mode, joined by '|'. */
static void pieces(int mode, const char *text, char *out) {
    size_t n = strlen(text), k = 0;
    for (size_t i = 0; i < n;) {
        size_t e = kiln__pretok_next(mode, (const unsigned char *)text, n, i);
        if (i) out[k++] = '|';
        memcpy(out + k, text + i, e - i);
        k += e - i;
        i = e;
    }
    out[k] = 0;
}

KT_TEST(tokenizer_pretokenizer_splits) {
    static const struct { int mode; const char *in, *want; } cases[] = {
        {KILN__SPLIT_GPT2, "Hello  world 12345\n\nok", "Hello| | world| 12345|\n|\n|ok"},
        {KILN__SPLIT_GPT2, "I'm fine, they're 'here'", "I|'m| fine|,| they|'re| '|here|'"},
        {KILN__SPLIT_GPT2, "I'M", "I|'|M"}, /* GPT-2's contractions are case-sensitive */
        {KILN__SPLIT_GPT2, "a\tb  \n", "a|\t|b|  \n"},
        {KILN__SPLIT_GPT2, "caf\xc3\xa9 \xe4\xbd\xa0\xe5\xa5\xbd!!", "caf\xc3\xa9| \xe4\xbd\xa0\xe5\xa5\xbd|!!"},
        {KILN__SPLIT_LLAMA3, "Hello  world 12345\n\nok", "Hello| | world| |123|45|\n\n|ok"},
        {KILN__SPLIT_LLAMA3, "I'M (x)", "I|'M| (|x|)"},
        {KILN__SPLIT_LLAMA3, "a;b\n  \n c", "a|;b|\n  \n| c"},
        {KILN__SPLIT_LLAMA3, "x!!\n\ny", "x|!!\n\n|y"},
        {KILN__SPLIT_QWEN2, "12345", "1|2|3|4|5"},
        /* Unicode's categories: Tamil's vowel signs are marks (Mc, Mn), not letters; its digits and the
         * double-struck R are a number (Nd) and a letter (Lu) */
        {KILN__SPLIT_LLAMA3, "\u0ba4\u0bae\u0bbf\u0bb4\u0bcd \u0be7\u0be8\u0be9\u0bea",
         "\u0ba4\u0bae|\u0bbf\u0bb4|\u0bcd| |\u0be7\u0be8\u0be9|\u0bea"},
        {KILN__SPLIT_GPT2, "\u211dx \u0be7\u0be8", "\u211dx| \u0be7\u0be8"},
        /* Tekken: capitals then smalls (" i" ends before P), one digit, '/' after punctuation; where the
         * capitals run into no small letter the engine backs off to the last letter that is neither
         * (E-acute), as llama.cpp's */
        {KILN__SPLIT_TEKKEN, "HTTPServer iPhone 12 a/b//\n", "HTTPServer| i|Phone| |1|2| a|/b|//\n"},
        {KILN__SPLIT_TEKKEN, "HELLO \u00c9T! \u00c9T\u00c9", "HELLO| \u00c9|T|!| \u00c9T\u00c9"},
        /* llama.cpp's default: punctuation apart first (no contractions then), numbers without their space,
         * in threes */
        {KILN__SPLIT_DEFAULT, "$100,000.50 + 1234567", "$|100|,|000|.|50| |+| |123|456|7"},
        {KILN__SPLIT_DEFAULT, "it's \u00a1x!", "it|'|s| |\u00a1|x|!"},
    };
    char out[256];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pieces(cases[i].mode, cases[i].in, out);
        KT_CHECK(!strcmp(out, cases[i].want), "mode %d '%s': '%s', want '%s'", cases[i].mode, cases[i].in, out,
                 cases[i].want);
    }
}

static uint64_t rng = 88172645463325252ull;
static unsigned rnd(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (unsigned)(rng >> 11);
}

/* Every split, on any bytes (invalid UTF-8, a character cut at the end):
 * pieces that tile the text, each ending past its start and not past the end. */
KT_TEST(tokenizer_pretokenizer_any_bytes) {
    static const char alphabet[] = "aZ1 \n\r\t'$!`\xc3\xa9\xe2\x80\x99\xe4\xbd\xa0\xd9\xa1\xf0\x9f\x98\x80\xff\xc0";
    for (int mode = KILN__SPLIT_GPT2; mode <= KILN__SPLIT_DEFAULT; mode++)
        for (int trial = 0; trial < 300; trial++) {
            unsigned char s[64];
            size_t n = rnd() % sizeof s;
            for (size_t i = 0; i < n; i++)
                s[i] = (unsigned char)(trial % 2 ? rnd() : (unsigned)alphabet[rnd() % (sizeof alphabet - 1)]);
            unsigned char *t = malloc(n ? n : 1); /* exactly n bytes: a read past them is the sanitizer's */
            memcpy(t, s, n);
            for (size_t i = 0; i < n;) {
                size_t e = kiln__pretok_next(mode, t, n, i);
                KT_REQUIRE(e > i && e <= n, "mode %d trial %d: piece [%zu, %zu) of %zu bytes", mode, trial, i, e, n);
                i = e;
            }
            free(t);
        }
}

KT_TEST(tokenizer_round_trip_arbitrary_bytes) {
    const char *pres[2] = {PRE_GPT2, PRE_LLAMA3};
    for (int m = 0; m < 2; m++) {
        kiln_tokenizer *t = load(pres[m]);
        KT_NOTNULL(t);
        static const char alphabet[] = "the llo  \n\r\t'sMe12!<|>\xc3\xa9\xe4\xbd\xa0\xff\xc0\x80\xed\xa0\x80";
        for (int trial = 0; trial < 300; trial++) {
            char s[200], back[400];
            size_t n = rnd() % sizeof s;
            for (size_t i = 0; i < n; i++)
                s[i] = trial % 2 ? (char)rnd() : alphabet[rnd() % (sizeof alphabet - 1)]; /* any byte, or tricky ones */
            int32_t ids[201];
            int64_t k;
            size_t len;
            KT_OK(kiln_tokenizer_encode(t, s, n, trial % 3 == 0, ids, 201, &k));
            KT_CHECK(k <= (int64_t)n, "%lld ids for %zu bytes", (long long)k, n);
            KT_OK(kiln_tokenizer_decode(t, ids, k, back, sizeof back, &len));
            KT_CHECK(len == n && !memcmp(s, back, n), "mode %d trial %d: round trip differs", m, trial);
        }
        kiln_tokenizer_free(t);
    }
}

KT_TEST(tokenizer_through_gguf) {
    kiln_tokenizer *t = load(PRE_GPT2);
    KT_NOTNULL(t);
    kiln_tokenizer_set_bos_eos(t, 261, 261);
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_string(w, "general.architecture", "llama"));
    KT_OK(kiln_tokenizer_to_gguf(t, w));
    char p[128];
    snprintf(p, sizeof p, "/tmp/kiln_tok_%d.gguf", (int)getpid());
    KT_OK(kiln_gguf_writer_save(w, p));
    kiln_gguf_writer_free(w);
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    size_t len;
    KT_CHECK(!strcmp(kiln_gguf_array_string(g, "tokenizer.ggml.merges", 2, &len), "\xc4\xa0t he"), "merge 2");
    kiln_tokenizer *u = kiln_tokenizer_from_gguf(g);
    KT_NOTNULL(u);
    KT_CHECK(kiln_tokenizer_vocab_size(u) == 263 && kiln_tokenizer_bos(u) == 261 && kiln_tokenizer_eos(u) == 261,
             "vocab/bos/eos");
    check_hand_worked(u);
    kiln_gguf_close(g);
    kiln_gguf_writer *bad = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_string(bad, "tokenizer.ggml.model", "bert"));
    KT_OK(kiln_gguf_writer_save(bad, p));
    kiln_gguf_writer_free(bad);
    g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    KT_EXPECT_ERR(kiln_tokenizer_from_gguf(g), KILN_ERR_UNSUPPORTED, "bert");
    kiln_gguf_close(g);
    unlink(p);
    kiln_tokenizer_free(t);
    kiln_tokenizer_free(u);
}

KT_TEST(tokenizer_json_refusals) {
    KT_EXPECT_ERR(load("{\"type\": \"Metaspace\"}"), KILN_ERR_UNSUPPORTED, "Metaspace");
    KT_EXPECT_ERR(load("{\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}}"), KILN_ERR_UNSUPPORTED, "regex");
    char p[128];
    snprintf(p, sizeof p, "/tmp/kiln_tok_bad_%d.json", (int)getpid());
    static const struct { const char *json, *msg; } bad[] = {
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 2000000000}, \"merges\": []}}", "token id"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", "not in the vocabulary"},
        {"{\"model\": {\"type\": \"WordPiece\", \"vocab\": {}}}", "WordPiece"},
        {"{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}, \"pre_tokenizer\": "
         "{\"type\": \"ByteLevel\"}}", "no token for byte"},
        {"{\"model\": {\"vocab\": {\"a\": 0", "JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        FILE *f = fopen(p, "w");
        fputs(bad[i].json, f);
        fclose(f);
        kiln_clear_error();
        kiln_tokenizer *t = kiln_tokenizer_from_json(p);
        KT_CHECK(!t && strstr(kiln_last_error(), bad[i].msg), "case %zu: '%s'", i, kiln_last_error());
        kiln_tokenizer_free(t);
    }
    unlink(p);
}

/* SentencePiece BPE ("llama" in GGUF): <unk> <s> </s>, the 256 byte
 * tokens (ids 3..258), then pieces with scores. Worked by hand:
 * "hello" -> "\u2581hello": ll (-3) first, then llo (-4), he (-5), \u2581he (-6). */
/* The tokenizer in w, saved to path (removed after, with drop) and read back. */
static kiln_tokenizer *read_back(kiln_gguf_writer *w, const char *path, bool drop) {
    kiln_status s = kiln_gguf_writer_save(w, path);
    kiln_gguf_writer_free(w);
    kiln_gguf *g = s ? NULL : kiln_gguf_open(path);
    kiln_tokenizer *t = g ? kiln_tokenizer_from_gguf(g) : NULL;
    kiln_gguf_close(g);
    if (drop) unlink(path);
    return t;
}

static kiln_tokenizer *spm_tok_named(const char *path, const char *name);
static kiln_tokenizer *spm_tok(const char *path) { return spm_tok_named(path, NULL); }
/* name: general.name, and then <|end|> (id 268, control) and <u> (269, user-defined) too */
static kiln_tokenizer *spm_tok_named(const char *path, const char *name) {
    const char *pieces[] = {"\xe2\x96\x81", "h", "e", "l", "o", "he", "ll", "llo", "\xe2\x96\x81he"};
    const float pscore[] = {-10, -10, -10, -10, -10, -5, -3, -4, -6};
    enum { M = 3 + 256 + 9, N = M + 2 };
    static char bytes[256][8];
    const char *toks[N];
    float scores[N];
    int32_t types[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < 9; i++) toks[259 + i] = pieces[i], types[259 + i] = 1, scores[259 + i] = pscore[i];
    for (int i = 0; i < 259; i++) scores[i] = 0;
    toks[M] = "<|end|>", types[M] = 3, toks[M + 1] = "<u>", types[M + 1] = 4, scores[M] = scores[M + 1] = 0;
    int n = name ? N : M;
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    if (name) kiln_gguf_set_string(w, "general.name", name);
    kiln_gguf_set_string(w, "tokenizer.ggml.model", "llama");
    kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, n);
    kiln_gguf_set_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, n);
    kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, n);
    kiln_gguf_set_int(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, 1);
    kiln_gguf_set_int(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, 2);
    kiln_gguf_set_int(w, "tokenizer.ggml.unknown_token_id", KILN_GGUF_UINT32, 0);
    return read_back(w, path, false);
}

KT_TEST(tokenizer_sentencepiece_from_gguf) {
    char p[128];
    snprintf(p, sizeof p, "/tmp/kiln_spm_%d.gguf", (int)getpid());
    kiln_tokenizer *t = spm_tok(p);
    KT_NOTNULL(t);
    KT_CHECK(kiln_tokenizer_bos(t) == 1 && kiln_tokenizer_eos(t) == 2 && kiln_tokenizer_vocab_size(t) == 268, "ids");
    IDS(t, "hello", false, 267, 266);                   /* \u2581he llo */
    IDS(t, "hi", false, 259, 260, 3 + 'i');             /* 'i' is no piece: <0x69> */
    IDS(t, "a b", false, 259, 3 + 'a', 259, 3 + 'b');
    IDS(t, "x</s>y", true, 259, 3 + 'x', 2, 259, 3 + 'y'); /* a space goes in front after a special too */
    IDS(t, "\xc3\xa9", false, 259, 3 + 0xc3, 3 + 0xa9);   /* byte fallback of a 2-byte character */
    char out[64];
    size_t len;
    KT_OK(kiln_tokenizer_decode(t, (int32_t[]){267, 266, 259, 3 + 'x', 2, 259, 3 + 'y'}, 7, out, sizeof out, &len));
    KT_CHECK(len == 12 && !memcmp(out, "hello x</s>y", 12), "decode '%.*s'", (int)len, out);
    for (int trial = 0; trial < 200; trial++) {
        char s[100], back[200];
        size_t n = rnd() % sizeof s;
        for (size_t i = 0; i < n; i++) s[i] = trial % 2 ? (char)rnd() : "hel o\xe2\x96\x81"[rnd() % 8];
        /* SentencePiece spells a space U+2581, so that character itself comes back as a space */
        for (size_t i = 0; i + 2 < n; i++)
            if (!memcmp(s + i, "\xe2\x96\x81", 3)) s[i] = 'h';
        int32_t ids[400];
        int64_t k;
        KT_OK(kiln_tokenizer_encode(t, s, n, false, ids, 400, &k));
        KT_OK(kiln_tokenizer_decode(t, ids, k, back, sizeof back, &len));
        KT_CHECK(len == n && !memcmp(s, back, n), "trial %d: round trip differs (%zu vs %zu bytes)", trial, len, n);
    }
    /* and back out through the writer */
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_tokenizer_to_gguf(t, w));
    KT_OK(kiln_gguf_writer_save(w, p));
    kiln_gguf_writer_free(w);
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    kiln_tokenizer *u = kiln_tokenizer_from_gguf(g);
    KT_NOTNULL(u);
    IDS(u, "hello", false, 267, 266);
    kiln_gguf_close(g);
    kiln_tokenizer_free(u);
    kiln_tokenizer_free(t);
    unlink(p);
}

/* A SentencePiece vocabulary of bytes only (<unk> <s> </s> <0x00>..<0xFF>,
 * as gguf-ref's models and kiln's random ones): every character falls back
 * to bytes, a space to U+2581's three. */
static kiln_tokenizer *spm_bytes_tok(const char *path) {
    static char bytes[256][8];
    const char *toks[259] = {"<unk>", "<s>", "</s>"};
    int32_t types[259] = {2, 3, 3};
    float scores[259] = {0};
    for (int b = 0; b < 256; b++) snprintf(bytes[b], 8, "<0x%02X>", b), toks[3 + b] = bytes[b], types[3 + b] = 6;
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    kiln_gguf_set_string(w, "tokenizer.ggml.model", "llama");
    kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, 259);
    kiln_gguf_set_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, 259);
    kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, 259);
    return read_back(w, path, true);
}

/* The reported bug: 16 bytes made 25 ids (4 spaces as 3 bytes each) where
 * the caller had room for len + 2. kiln_tokenizer_max_ids bounds them all. */
KT_TEST(tokenizer_max_ids_bounds_byte_fallback) {
    char p[128];
    snprintf(p, sizeof p, "/tmp/kiln_spmb_%d.gguf", (int)getpid());
    kiln_tokenizer *t = spm_bytes_tok(p);
    KT_NOTNULL(t);
    int32_t ids[512];
    int64_t n;
    KT_OK(kiln_tokenizer_encode(t, "Once upon a time", 16, false, ids, 512, &n));
    KT_CHECK(n == 25 && n <= kiln_tokenizer_max_ids(t, 16), "%lld ids, bound %lld", (long long)n,
             (long long)kiln_tokenizer_max_ids(t, 16));
    for (int trial = 0; trial < 300; trial++) { /* spaces, specials, any byte: never past the bound */
        char s[100];
        size_t len = rnd() % 40;
        for (size_t i = 0; i < len; i++) s[i] = trial % 2 ? (char)rnd() : " a</s>"[rnd() % 6];
        KT_OK(kiln_tokenizer_encode(t, s, len, trial % 3 != 0, ids, 512, &n));
        KT_CHECK(n <= kiln_tokenizer_max_ids(t, len), "trial %d: %lld ids for %zu bytes, bound %lld", trial,
                 (long long)n, len, (long long)kiln_tokenizer_max_ids(t, len));
    }
    KT_OK(kiln_tokenizer_encode(t, "    ", 4, false, ids, 512, &n)); /* the worst case, reached */
    KT_CHECK(n == 15, "%lld ids for 4 spaces", (long long)n);
    kiln_tokenizer *b = load(PRE_GPT2);
    KT_NOTNULL(b);
    KT_CHECK(kiln_tokenizer_max_ids(b, 10) == 11, "byte-level: %lld", (long long)kiln_tokenizer_max_ids(b, 10));
    kiln_tokenizer_free(b);
    kiln_tokenizer_free(t);
}

/* As llama.cpp: a user-defined token is found in text even without
 * special; Phi-3's special tokens (by general.name) take the whitespace
 * after them, the chat template's newlines; <unk> is special text too. */
KT_TEST(tokenizer_user_defined_and_phi3_strip) {
    char p[128];
    snprintf(p, sizeof p, "/tmp/kiln_spmn_%d.gguf", (int)getpid());
    kiln_tokenizer *t = spm_tok_named(p, "other");
    KT_NOTNULL(t);
    IDS(t, "<u>he", false, 269, 267);                         /* a space after it: \u2581he */
    IDS(t, "<|end|>\n hello", true, 268, 259, 3 + '\n', 267, 266);
    IDS(t, "x<unk>", true, 259, 3 + 'x', 0);
    kiln_tokenizer_free(t);
    t = spm_tok_named(p, "Phi3 Mini 4K");
    KT_NOTNULL(t);
    IDS(t, "<|end|>\n hello", true, 268, 267, 266);          /* the newline and space go: \u2581he llo */
    IDS(t, "<u> \nhello</s>\n", true, 269, 267, 266, 2);     /* </s> strips too, at the end */
    kiln_tokenizer_free(t);
    unlink(p);
}

/* Llama 3's ignore_merges: a word that is a token is taken whole. */
KT_TEST(tokenizer_ignore_merges) {
    char *json = NULL;
    size_t n = 0;
    const char *p = path_json(PRE_GPT2);
    FILE *f = fopen(p, "r");
    KT_REQUIRE(f, "open");
    json = malloc(70000);
    n = fread(json, 1, 69000, f);
    fclose(f);
    json[n] = 0;
    /* add "hel" (no merge makes it) and the flag */
    char *v = strstr(json, "\"he\": 256");
    char *out = malloc(71000);
    size_t a = (size_t)(v - json);
    memcpy(out, json, a);
    int k = sprintf(out + a, "\"hel\": 263, ");
    strcpy(out + a + k, json + a);
    char *m = strstr(out, "\"vocab\"");
    char *with = malloc(72000);
    size_t b = (size_t)(m - out);
    memcpy(with, out, b);
    strcpy(with + b, "\"ignore_merges\": true, ");
    strcat(with, out + b);
    for (int pass = 0; pass < 2; pass++) {
        f = fopen(p, "w");
        fputs(pass ? with : out, f);
        fclose(f);
        kiln_tokenizer *t = kiln_tokenizer_from_json(p);
        KT_NOTNULL(t);
        if (pass) IDS(t, "hel", false, 263);
        else IDS(t, "hel", false, 256, 'l');
        IDS(t, "hello", false, 256, 260);
        kiln_tokenizer_free(t);
    }
    unlink(p);
    free(json), free(out), free(with);
}

/* tokenizer.json's SentencePiece form (Llama 2 on Hugging Face):
 * byte_fallback BPE over characters, spaces as U+2581 by the normalizer
 * (or a Metaspace pre-tokenizer), merges by rank. Same pieces as the GGUF
 * test above, ranks: l l, ll o, h e, \u2581 he. */
static const char *spm_json(bool metaspace) {
    static char path[128];
    snprintf(path, sizeof path, "/tmp/kiln_spmj_%d.json", (int)getpid());
    FILE *f = fopen(path, "w");
    fprintf(f, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, \"content\": "
               "\"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],\n");
    if (metaspace)
        fprintf(f, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"\\u2581\", "
                   "\"prepend_scheme\": \"first\", \"split\": false},\n");
    else
        fprintf(f, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", \"prepend\": "
                   "\"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\\u2581\"}]}, "
                   "\"pre_tokenizer\": null,\n");
    fprintf(f, "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"vocab\": {\"<unk>\": 0, "
               "\"<s>\": 1, \"</s>\": 2");
    for (int b = 0; b < 256; b++) fprintf(f, ", \"<0x%02X>\": %d", b, 3 + b);
    fprintf(f, ", \"\\u2581\": 259, \"h\": 260, \"e\": 261, \"l\": 262, \"o\": 263, \"he\": 264, \"ll\": 265, "
               "\"llo\": 266, \"\\u2581he\": 267}, \"merges\": [\"l l\", \"ll o\", \"h e\", \"\\u2581 he\"]}}\n");
    fclose(f);
    return path;
}

KT_TEST(tokenizer_json_sentencepiece_form) {
    for (int ms = 0; ms < 2; ms++) {
        const char *p = spm_json(ms);
        kiln_tokenizer *t = kiln_tokenizer_from_json(p);
        unlink(p);
        KT_NOTNULL(t);
        IDS(t, "hello", false, 267, 266);
        IDS(t, "hi", false, 259, 260, 3 + 'i');
        IDS(t, "a b", false, 259, 3 + 'a', 259, 3 + 'b');
        if (ms) IDS(t, "x</s>y", true, 259, 3 + 'x', 2, 3 + 'y'); /* Metaspace "first": only at the start */
        else IDS(t, "x</s>y", true, 259, 3 + 'x', 2, 259, 3 + 'y'); /* the normalizer sees each piece */
        for (int trial = 0; trial < 100; trial++) {
            char s[80], back[200];
            size_t n = rnd() % sizeof s, len;
            for (size_t i = 0; i < n; i++) s[i] = trial % 2 ? (char)rnd() : "hel o<>/s"[rnd() % 9];
            for (size_t i = 0; i + 2 < n; i++)
                if (!memcmp(s + i, "\xe2\x96\x81", 3)) s[i] = 'h';
            int32_t ids[300];
            int64_t k;
            KT_OK(kiln_tokenizer_encode(t, s, n, true, ids, 300, &k));
            KT_OK(kiln_tokenizer_decode(t, ids, k, back, sizeof back, &len));
            KT_CHECK(len == n && !memcmp(s, back, n), "form %d trial %d: round trip differs", ms, trial);
        }
        if (!ms) { /* into GGUF, whose SentencePiece has scores: the merges' ranks become them */
            char g_path[128];
            snprintf(g_path, sizeof g_path, "/tmp/kiln_spmj_%d.gguf", (int)getpid());
            kiln_gguf_writer *w = kiln_gguf_writer_new();
            KT_OK(kiln_tokenizer_to_gguf(t, w));
            KT_OK(kiln_gguf_writer_save(w, g_path));
            kiln_gguf_writer_free(w);
            kiln_gguf *g = kiln_gguf_open(g_path);
            kiln_tokenizer *u = g ? kiln_tokenizer_from_gguf(g) : NULL;
            kiln_gguf_close(g);
            unlink(g_path);
            KT_NOTNULL(u);
            IDS(u, "hello", false, 267, 266);
            IDS(u, "hi", false, 259, 260, 3 + 'i');
            IDS(u, "x</s>y", true, 259, 3 + 'x', 2, 259, 3 + 'y');
            kiln_tokenizer_free(u);
        }
        kiln_tokenizer_free(t);
    }
}
