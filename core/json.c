/* json.c — the JSON reader and string writer of json.h (RFC 8259: strict
 * grammar, no trailing commas or comments, UTF-8 only). A recursive
 * descent parser whose depth is bounded by the caller; nodes and decoded
 * strings come from blocks owned by the document, freed together. */
#include "json.h"

#include <errno.h>
#include <stdio.h>

typedef struct block {
    struct block *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} block;

struct kiln__json_doc {
    block *blocks;
    kiln__json *root;
};

typedef struct parser {
    const unsigned char *s;
    size_t len, pos;
    int depth, max_depth;
    int64_t values, max_values;
    const char *who;
    kiln__json_doc *doc;
    bool failed;
} parser;

static void *doc_alloc(kiln__json_doc *d, size_t n) {
    n = (n + 15) & ~(size_t)15;
    block *b = d->blocks;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        b = kiln__malloc(sizeof *b + cap);
        if (!b) return NULL;
        b->used = 0;
        b->cap = cap;
        b->next = d->blocks;
        d->blocks = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

static void *fail(parser *p, size_t at, const char *what) {
    if (!p->failed) kiln__err(KILN_ERR_FORMAT, "%s: JSON: %s at byte %zu", p->who, what, at);
    p->failed = true;
    return NULL;
}

static void *oom(parser *p) {
    if (!p->failed) kiln__err(KILN_ERR_OOM, "%s: JSON: out of memory", p->who);
    p->failed = true;
    return NULL;
}

static void skip_ws(parser *p) {
    while (p->pos < p->len) {
        unsigned char c = p->s[p->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        p->pos++;
    }
}

static kiln__json *value(parser *p);

static int hex4(const unsigned char *s) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        int c = s[i], d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
                          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0) return -1;
        v = v * 16 + d;
    }
    return v;
}

static size_t put_utf8(unsigned char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (unsigned char)cp; return 1; }
    if (cp < 0x800) { o[0] = (unsigned char)(0xC0 | cp >> 6); o[1] = (unsigned char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | cp >> 12);
        o[1] = (unsigned char)(0x80 | (cp >> 6 & 63));
        o[2] = (unsigned char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | cp >> 18);
    o[1] = (unsigned char)(0x80 | (cp >> 12 & 63));
    o[2] = (unsigned char)(0x80 | (cp >> 6 & 63));
    o[3] = (unsigned char)(0x80 | (cp & 63));
    return 4;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 if invalid
 * (overlong forms, surrogates and code points past U+10FFFF included). */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k;
    uint32_t cp, min;
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) k = 2, cp = c & 0x1F, min = 0x80;
    else if ((c & 0xF0) == 0xE0) k = 3, cp = c & 0x0F, min = 0x800;
    else if ((c & 0xF8) == 0xF0) k = 4, cp = c & 0x07, min = 0x10000;
    else return 0;
    if (n < k) return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        cp = cp << 6 | (s[i] & 63);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
    return k;
}

/* A string at p->pos (on the opening quote): decoded into doc memory. */
static const char *string(parser *p, size_t *out_len) {
    size_t start = ++p->pos, end = start;
    /* find the closing quote first: the decoded form is never longer */
    while (end < p->len && p->s[end] != '"') end += p->s[end] == '\\' ? 2 : 1;
    if (end >= p->len) return fail(p, start - 1, "unterminated string");
    unsigned char *o = doc_alloc(p->doc, end - start + 1), *w = o;
    if (!o) return oom(p);
    while (p->pos < end) {
        unsigned char c = p->s[p->pos];
        if (c < 0x20) return fail(p, p->pos, "control character in string");
        if (c != '\\') {
            size_t k = utf8_len(p->s + p->pos, end - p->pos);
            if (!k) return fail(p, p->pos, "invalid UTF-8 in string");
            memcpy(w, p->s + p->pos, k);
            w += k;
            p->pos += k;
            continue;
        }
        size_t at = p->pos;
        c = p->s[++p->pos];
        p->pos++;
        switch (c) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            int u = end - p->pos >= 4 ? hex4(p->s + p->pos) : -1;
            if (u < 0) return fail(p, at, "bad \\u escape");
            p->pos += 4;
            uint32_t cp = (uint32_t)u;
            if (cp >= 0xDC00 && cp <= 0xDFFF) return fail(p, at, "lone low surrogate in \\u escape");
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                int lo = end - p->pos >= 6 && p->s[p->pos] == '\\' && p->s[p->pos + 1] == 'u' ? hex4(p->s + p->pos + 2)
                                                                                               : -1;
                if (lo < 0xDC00 || lo > 0xDFFF) return fail(p, at, "lone high surrogate in \\u escape");
                p->pos += 6;
                cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)lo - 0xDC00);
            }
            w += put_utf8(w, cp);
            break;
        }
        default: return fail(p, at, "bad escape in string");
        }
    }
    p->pos = end + 1;
    *w = 0;
    *out_len = (size_t)(w - o);
    return (const char *)o;
}

static bool is_digit(unsigned char c) { return c >= '0' && c <= '9'; }

static kiln__json *number(parser *p, kiln__json *v) {
    size_t start = p->pos, i = start;
    const unsigned char *s = p->s;
    bool neg = false, integral = true;
    if (i < p->len && s[i] == '-') neg = true, i++;
    if (i >= p->len || !is_digit(s[i])) return fail(p, start, "bad number");
    if (s[i] == '0') i++;
    else
        while (i < p->len && is_digit(s[i])) i++;
    if (i < p->len && s[i] == '.') {
        integral = false;
        if (++i >= p->len || !is_digit(s[i])) return fail(p, start, "bad number (digits must follow '.')");
        while (i < p->len && is_digit(s[i])) i++;
    }
    if (i < p->len && (s[i] == 'e' || s[i] == 'E')) {
        integral = false;
        i++;
        if (i < p->len && (s[i] == '+' || s[i] == '-')) i++;
        if (i >= p->len || !is_digit(s[i])) return fail(p, start, "bad number (digits must follow the exponent)");
        while (i < p->len && is_digit(s[i])) i++;
    }
    size_t n = i - start;
    char tmp[64], *buf = n < sizeof tmp ? tmp : kiln__malloc(n + 1);
    if (!buf) return oom(p);
    memcpy(buf, s + start, n);
    buf[n] = 0;
    v->num = strtod(buf, NULL);
    if (buf != tmp) free(buf);
    if (integral) { /* exact int64, or not an integer for our purposes */
        uint64_t u = 0, lim = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
        bool fits = true;
        for (size_t k = start + neg; k < i && fits; k++) {
            unsigned d = s[k] - '0';
            if (u > (lim - d) / 10) fits = false;
            else u = u * 10 + d;
        }
        if (fits) {
            v->is_int = true;
            v->i64 = neg ? (u == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)u) : (int64_t)u;
        }
    }
    v->type = KILN_JSON_NUMBER;
    p->pos = i;
    return v;
}

static bool literal(parser *p, const char *word) {
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n)) return false;
    p->pos += n;
    return true;
}

/* An array or object at p->pos (on '[' or '{'). */
static kiln__json *container(parser *p, kiln__json *v, bool obj) {
    if (++p->depth > p->max_depth) return fail(p, p->pos, "nesting too deep");
    v->type = obj ? KILN_JSON_OBJECT : KILN_JSON_ARRAY;
    char close = obj ? '}' : ']';
    p->pos++;
    skip_ws(p);
    kiln__json **tail = &v->child;
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
        p->depth--;
        return v;
    }
    for (;;) {
        const char *key = NULL;
        size_t key_len = 0;
        skip_ws(p);
        if (obj) {
            if (p->pos >= p->len || p->s[p->pos] != '"') return fail(p, p->pos, "expected a string key");
            if (!(key = string(p, &key_len))) return NULL;
            skip_ws(p);
            if (p->pos >= p->len || p->s[p->pos] != ':') return fail(p, p->pos, "expected ':'");
            p->pos++;
        }
        kiln__json *c = value(p);
        if (!c) return NULL;
        c->key = key;
        c->key_len = key_len;
        *tail = c;
        tail = &c->next;
        v->len++;
        skip_ws(p);
        if (p->pos >= p->len) return fail(p, p->pos, obj ? "unterminated object" : "unterminated array");
        if (p->s[p->pos] == ',') {
            p->pos++;
            continue;
        }
        if (p->s[p->pos] == close) {
            p->pos++;
            p->depth--;
            return v;
        }
        return fail(p, p->pos, obj ? "expected ',' or '}'" : "expected ',' or ']'");
    }
}

static kiln__json *value(parser *p) {
    skip_ws(p);
    if (p->pos >= p->len) return fail(p, p->pos, "unexpected end of input");
    if (p->max_values > 0 && ++p->values > p->max_values) return fail(p, p->pos, "too many values");
    kiln__json *v = doc_alloc(p->doc, sizeof *v);
    if (!v) return oom(p);
    v->offset = p->pos;
    switch (p->s[p->pos]) {
    case '{': return container(p, v, true);
    case '[': return container(p, v, false);
    case '"':
        v->type = KILN_JSON_STRING;
        return (v->str = string(p, &v->len)) ? v : NULL;
    case 't': if (literal(p, "true")) { v->type = KILN_JSON_TRUE; return v; } break;
    case 'f': if (literal(p, "false")) { v->type = KILN_JSON_FALSE; return v; } break;
    case 'n': if (literal(p, "null")) { v->type = KILN_JSON_NULL; return v; } break;
    default:
        if (p->s[p->pos] == '-' || is_digit(p->s[p->pos])) return number(p, v);
    }
    return fail(p, p->pos, "unexpected character");
}

kiln__json_doc *kiln__json_parse(const char *buf, size_t len, int max_depth, const char *who) {
    return kiln__json_parse_bounded(buf, len, max_depth, 0, who);
}

kiln__json_doc *kiln__json_parse_bounded(const char *buf, size_t len, int max_depth, int64_t max_values,
                                         const char *who) {
    if (!buf && len) return kiln__err(KILN_ERR_ARG, "%s: JSON: NULL buffer", who);
    kiln__json_doc *d = kiln__calloc(1, sizeof *d);
    if (!d) return kiln__err(KILN_ERR_OOM, "%s: JSON: out of memory", who);
    parser p = {.s = (const unsigned char *)buf, .len = len, .max_depth = max_depth > 0 ? max_depth : 64,
                .max_values = max_values, .who = who, .doc = d};
    d->root = value(&p);
    if (d->root) {
        skip_ws(&p);
        if (p.pos != len) fail(&p, p.pos, "trailing characters after the value");
    }
    if (p.failed || !d->root) {
        kiln__json_free(d);
        return NULL;
    }
    return d;
}

const kiln__json *kiln__json_root(const kiln__json_doc *d) { return d ? d->root : NULL; }

void kiln__json_free(kiln__json_doc *d) {
    if (!d) return;
    for (block *b = d->blocks, *n; b; b = n) {
        n = b->next;
        free(b);
    }
    free(d);
}

const kiln__json *kiln__json_get(const kiln__json *o, const char *key) {
    if (!o || o->type != KILN_JSON_OBJECT) return NULL;
    size_t n = strlen(key);
    for (const kiln__json *c = o->child; c; c = c->next)
        if (c->key_len == n && !memcmp(c->key, key, n)) return c;
    return NULL;
}

/* ---- writing ---- */

void kiln__buf_add(kiln__buf *b, const void *s, size_t n) {
    if (b->oom) return;
    if (b->cap - b->len < n + 1) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->len < n + 1) {
            if (cap > SIZE_MAX / 2) {
                b->oom = true;
                return;
            }
            cap *= 2;
        }
        char *p = kiln__realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, s, n); /* s may be NULL when n is 0 (an empty GGUF) */
    b->len += n;
    b->p[b->len] = 0;
}

void kiln__buf_printf(kiln__buf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->oom = true;
        return;
    }
    if ((size_t)n < sizeof tmp) {
        kiln__buf_add(b, tmp, (size_t)n);
        return;
    }
    char *big = kiln__malloc((size_t)n + 1);
    if (!big) {
        b->oom = true;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    kiln__buf_add(b, big, (size_t)n);
    free(big);
}

void kiln__json_put_string(kiln__buf *b, const char *s) {
    kiln__buf_add(b, "\"", 1);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': kiln__buf_add(b, "\\\"", 2); break;
        case '\\': kiln__buf_add(b, "\\\\", 2); break;
        case '\n': kiln__buf_add(b, "\\n", 2); break;
        case '\r': kiln__buf_add(b, "\\r", 2); break;
        case '\t': kiln__buf_add(b, "\\t", 2); break;
        case '\b': kiln__buf_add(b, "\\b", 2); break;
        case '\f': kiln__buf_add(b, "\\f", 2); break;
        default:
            if (*c < 0x20) kiln__buf_printf(b, "\\u%04x", *c);
            else kiln__buf_add(b, c, 1);
        }
    }
    kiln__buf_add(b, "\"", 1);
}

void kiln__buf_free(kiln__buf *b) {
    free(b->p);
    *b = (kiln__buf){0};
}
