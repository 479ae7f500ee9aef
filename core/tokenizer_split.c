/* tokenizer_split.c — the pre-tokenizers of byte-level BPE: the regexes
 * of GPT-2, Llama 3 and Qwen 2 written out as code, so kiln needs no regex
 * engine. Each returns where the piece starting at i ends, trying the
 * regex's alternatives in order as a backtracking engine does.
 *
 *   GPT-2:  's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *   Llama 3 (Qwen 2: \p{N} instead of \p{N}{1,3}):
 *           (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *           ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *   Mistral's Tekken: see next_tekken.
 *
 * \p{L} and \p{N} are Unicode's general categories L* and N*
 * (tokenizer_unicode.c, generated from the Unicode Character Database),
 * \s its White_Space property; a byte that is not valid UTF-8 is one
 * character of "other". */
#include "tokenizer.h"

#include <ctype.h>

/* The code point at s[i] and its length (1 for an invalid byte, cp -1). */
static size_t cp_at(const unsigned char *s, size_t n, size_t i, int32_t *cp) {
    unsigned c = s[i];
    size_t k;
    uint32_t v, min;
    *cp = -1;
    if (c < 0x80) {
        *cp = (int32_t)c;
        return 1;
    }
    if ((c & 0xE0) == 0xC0) k = 2, v = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) k = 3, v = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) k = 4, v = c & 0x07, min = 0x10000;
    else return 1;
    if (n - i < k) return 1;
    for (size_t j = 1; j < k; j++) {
        if ((s[i + j] & 0xC0) != 0x80) return 1;
        v = v << 6 | (s[i + j] & 63);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 1;
    *cp = (int32_t)v;
    return k;
}

enum { C_L, C_N, C_S, C_O };

static bool in(int32_t c, int32_t lo, int32_t hi) { return c >= lo && c <= hi; }

static int cls(int32_t c) {
    if (c < 0) return C_O;
    if (c < 0x80) {
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return C_L;
        if (c >= '0' && c <= '9') return C_N;
        if (c == ' ' || (c >= 9 && c <= 13)) return C_S;
        return C_O;
    }
    if (c == 0x85 || c == 0xA0 || c == 0x1680 || in(c, 0x2000, 0x200A) || c == 0x2028 || c == 0x2029 ||
        c == 0x202F || c == 0x205F || c == 0x3000)
        return C_S;
    int k = kiln__unicode_class(c);
    return k == 1 ? C_L : k == 2 ? C_N : C_O;
}

typedef struct cur {
    const unsigned char *s;
    size_t n;
} cur;

static int cls_at(const cur *u, size_t i, size_t *len) {
    int32_t cp;
    *len = cp_at(u->s, u->n, i, &cp);
    return cls(cp);
}

/* End of the run of class k (or, with not, of anything but S/L/N) from i. */
static size_t run(const cur *u, size_t i, int k) {
    size_t len;
    while (i < u->n && cls_at(u, i, &len) == k) i += len;
    return i;
}

static bool is_nl(unsigned char c) { return c == '\r' || c == '\n'; }

/* 's 't 're 've 'm 'll 'd at i (case-insensitive for Llama 3): its end or 0. */
static size_t contraction(const cur *u, size_t i, bool fold) {
    if (u->s[i] != '\'' || i + 1 >= u->n) return 0;
    unsigned char a = u->s[i + 1], b = i + 2 < u->n ? u->s[i + 2] : 0;
    if (fold) {
        if (a >= 'A' && a <= 'Z') a = (unsigned char)(a + 32);
        if (b >= 'A' && b <= 'Z') b = (unsigned char)(b + 32);
    }
    if (a == 's' || a == 't' || a == 'm' || a == 'd') return i + 2;
    if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return i + 3;
    return 0;
}

/* \s+(?!\S) then \s+ from i (i is whitespace). */
static size_t spaces(const cur *u, size_t i) {
    size_t len, j = i, last = i;
    while (j < u->n && cls_at(u, j, &len) == C_S) last = j, j += len;
    if (j == u->n || last == i) return j; /* to the end; or a single one before \S (\s+) */
    return last;                           /* leave the last for the next piece */
}

/* [\p{P}\$\+<=>\^~\|]: Unicode's punctuation and those symbols (not '`'). */
static bool punct(const cur *u, size_t i, size_t *len) {
    int32_t cp;
    *len = cp_at(u->s, u->n, i, &cp);
    if (cp < 0) return false;
    if (cp < 0x80) return cp > ' ' && cp < 0x7F && cp != '`' && cls(cp) == C_O;
    return kiln__unicode_class(cp) == 3;
}

static size_t next_gpt2(const cur *u, size_t i) {
    size_t len, e;
    if ((e = contraction(u, i, false))) return e;
    int c = cls_at(u, i, &len);
    size_t j = i;
    if (u->s[i] == ' ' && i + 1 < u->n) { /* ' ?' then letters, numbers or others */
        size_t l2;
        int d = cls_at(u, i + 1, &l2);
        if (d != C_S) c = d, j = i + 1;
    }
    if (c == C_L || c == C_N) return run(u, j, c);
    if (c == C_O) return run(u, j, C_O);
    return spaces(u, i);
}

static size_t others_or_spaces(const cur *u, size_t i, bool slash);

static size_t next_llama3(const cur *u, size_t i, int max_digits) {
    size_t len, l2, e;
    if ((e = contraction(u, i, true))) return e;
    int c = cls_at(u, i, &len);
    if (c == C_L) return run(u, i, C_L);
    /* [^\r\n\p{L}\p{N}]?\p{L}+ */
    if (c != C_N && !is_nl(u->s[i]) && i + len < u->n && cls_at(u, i + len, &l2) == C_L) return run(u, i + len, C_L);
    if (c == C_N) {
        size_t j = i;
        for (int k = 0; k < max_digits && j < u->n && cls_at(u, j, &l2) == C_N; k++) j += l2;
        return j;
    }
    return others_or_spaces(u, i, false);
}

/* The regexes' tails: ' ?[^\s\p{L}\p{N}]+[\r\n]*' ([\r\n/]* with slash), then
 * \s*[\r\n]+, \s+(?!\S), \s+. */
static size_t others_or_spaces(const cur *u, size_t i, bool slash) {
    size_t l2, j = i;
    if (u->s[i] == ' ' && i + 1 < u->n && cls_at(u, i + 1, &l2) == C_O) j = i + 1;
    if (cls_at(u, j, &l2) == C_O) {
        j = run(u, j, C_O);
        while (j < u->n && (is_nl(u->s[j]) || (slash && u->s[j] == '/'))) j++;
        return j;
    }
    /* \s*[\r\n]+ : up to the last newline of the whitespace run */
    size_t k = i, nl = 0;
    while (k < u->n && cls_at(u, k, &l2) == C_S) {
        if (is_nl(u->s[k])) nl = k + 1;
        k += l2;
    }
    if (nl) return nl;
    return spaces(u, i);
}

/* A letter at i: 1 A-Z, 2 a-z, 3 any other letter; 0 not a letter. */
static int letter_case(const cur *u, size_t i, size_t *len) {
    if (i >= u->n || cls_at(u, i, len) != C_L) return 0;
    return u->s[i] >= 'A' && u->s[i] <= 'Z' ? 1 : u->s[i] >= 'a' && u->s[i] <= 'z' ? 2 : 3;
}

/* Tekken's words from j, U*W+ else U+W* with U a letter but a-z and W a
 * letter but A-Z (llama.cpp's reading of \p{Lu}... and \p{Ll}...): the end,
 * or 0. Where the greedy U* leaves no W, the engine backs off to the last
 * letter of the run that is both (neither A-Z nor a-z) and ends there. */
static size_t tekken_word(const cur *u, size_t j) {
    size_t len, e = j, both = 0;
    int k;
    while ((k = letter_case(u, e, &len)) && k != 2) {
        if (k == 3) both = e + len;
        e += len;
    }
    if ((k = letter_case(u, e, &len)) && k != 1) {
        while ((k = letter_case(u, e, &len)) && k != 1) e += len;
        return e;
    }
    return both ? both : e > j ? e : 0;
}

/* Tekken (Mistral Nemo), as llama.cpp runs it:
 *   [^\r\n\p{L}\p{N}]?U*W+|[^\r\n\p{L}\p{N}]?U+W*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+ */
static size_t next_tekken(const cur *u, size_t i) {
    size_t len, e;
    int c = cls_at(u, i, &len);
    if (c == C_L) return tekken_word(u, i);
    if (c != C_N && !is_nl(u->s[i]) && i + len < u->n && (e = tekken_word(u, i + len))) return e;
    if (c == C_N) return i + len;
    return others_or_spaces(u, i, true);
}

/* llama.cpp's "default" (a BPE GGUF without tokenizer.ggml.pre): four
 * regexes, each splitting the pieces of the one before, what they do not
 * match kept as pieces too:
 *   [\p{P}\$\+<=>\^~\|]+   then GPT-2's (without its last \s+)
 *   \p{N}+                 then [0-9][0-9][0-9] */
static size_t next_default(const cur *u, size_t i) {
    size_t len, e = i;
    bool p = punct(u, i, &len);
    while (e < u->n && punct(u, e, &len) == p) e += len; /* the first regex's piece around i */
    cur seg = {u->s, e};
    e = next_gpt2(&seg, i);
    size_t j = i, l2;
    while (j < e && cls_at(u, j, &l2) != C_N) j += l2; /* \p{N}+ in the piece: what is before it first */
    if (j > i) return j;
    while (j < e && cls_at(u, j, &l2) == C_N) j += l2;
    for (size_t k = i; k + 3 <= j; k++) /* then three ASCII digits, or what comes before them */
        if (isdigit(u->s[k]) && isdigit(u->s[k + 1]) && isdigit(u->s[k + 2])) return k > i ? k : k + 3;
    return j;
}

size_t kiln__pretok_next(int mode, const unsigned char *s, size_t n, size_t i) {
    cur u = {s, n};
    if (mode == KILN__SPLIT_DEFAULT) {
        size_t e = next_default(&u, i);
        return e > i ? e : i + 1;
    }
    size_t e = mode == KILN__SPLIT_GPT2     ? next_gpt2(&u, i)
             : mode == KILN__SPLIT_TEKKEN ? next_tekken(&u, i)
                                          : next_llama3(&u, i, mode == KILN__SPLIT_LLAMA3 ? 3 : 1);
    return e > i ? e : i + 1; /* never stuck */
}
