/* fixture.c — the reader for tests/fixtures/<family>.txt (format in fixture.h).
 * It loads the whole file, walks it token by token and reports the first
 * problem as path:line on stderr. */
#include "fixture.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FX_MAX_VALUES ((int64_t)1 << 28) /* far above any fixture; keeps n * 8 small */

typedef struct lexer {
    const char *path;
    const char *p;
    int line;
    bool bad; /* stopped on a malformed token (already reported) */
    char tok[64];
} lexer;

/* Report a problem at the current line; returns false for the caller to pass on. */
static bool fail(const lexer *lx, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s:%d: ", lx->path, lx->line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    return false;
}

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The next token into lx->tok; false at the end of the input or (with a
 * message, and lx->bad set) on a token too long to be valid. */
static bool next(lexer *lx) {
    for (;;) {
        while (is_space(*lx->p)) lx->line += *lx->p++ == '\n';
        if (*lx->p != '#') break;
        while (*lx->p && *lx->p != '\n') lx->p++;
    }
    size_t len = 0;
    while (lx->p[len] && !is_space(lx->p[len])) len++;
    if (len == 0) return false;
    if (len >= sizeof lx->tok) {
        lx->bad = true;
        return fail(lx, "token '%.20s...' is too long", lx->p);
    }
    memcpy(lx->tok, lx->p, len);
    lx->tok[len] = '\0';
    lx->p += len;
    return true;
}

/* next(), reporting the end of the file as an error naming what was due. */
static bool need(lexer *lx, const char *what) {
    if (next(lx)) return true;
    return lx->bad ? false : fail(lx, "expected %s, found the end of the file", what);
}

static bool expect_name(lexer *lx, char *dst, size_t cap, const char *what) {
    if (!need(lx, what)) return false;
    if (strlen(lx->tok) >= cap) return fail(lx, "%s '%s' is longer than %zu chars", what, lx->tok, cap - 1);
    strcpy(dst, lx->tok);
    return true;
}

static bool expect_num(lexer *lx, double *out, const char *what) {
    if (!need(lx, what)) return false;
    char *end;
    errno = 0;
    *out = strtod(lx->tok, &end);
    /* ERANGE on underflow still gives the nearest double, which is fine */
    if (*end != '\0') return fail(lx, "%s: '%s' is not a number", what, lx->tok);
    return true;
}

static bool expect_int(lexer *lx, int64_t lo, int64_t hi, int64_t *out, const char *what) {
    if (!need(lx, what)) return false;
    char *end;
    errno = 0;
    long long v = strtoll(lx->tok, &end, 10);
    if (*end != '\0' || errno == ERANGE || v < lo || v > hi)
        return fail(lx, "%s: '%s' is not an integer in %lld..%lld", what, lx->tok, (long long)lo, (long long)hi);
    *out = v;
    return true;
}

static char *read_all(const char *path) {
    FILE *fp = fopen(path, "rb");
    if (!fp) {
        fprintf(stderr, "%s: cannot open: %s\n", path, strerror(errno));
        return NULL;
    }
    size_t len = 0, cap = 1 << 16;
    char *buf = malloc(cap);
    while (buf) {
        len += fread(buf + len, 1, cap - len - 1, fp);
        if (len < cap - 1) break;
        char *grown = realloc(buf, cap * 2);
        if (!grown) free(buf);
        buf = grown;
        cap *= 2;
    }
    if (!buf) fprintf(stderr, "%s: out of memory\n", path);
    else if (ferror(fp)) {
        fprintf(stderr, "%s: read error\n", path);
        free(buf);
        buf = NULL;
    } else buf[len] = '\0';
    fclose(fp);
    return buf;
}

static bool parse_tensor(lexer *lx, fx_tensor *t) {
    int64_t ndim = 0;
    if (!expect_name(lx, t->name, sizeof t->name, "tensor name")) return false;
    if (!expect_int(lx, 1, 6, &ndim, "ndim")) return false;
    t->ndim = (int)ndim;
    t->n = 1;
    for (int i = 0; i < t->ndim; i++) {
        if (!expect_int(lx, 0, FX_MAX_VALUES, &t->shape[i], "dim")) return false;
        if (t->shape[i] && t->n > FX_MAX_VALUES / t->shape[i]) return fail(lx, "tensor %s is too large", t->name);
        t->n *= t->shape[i];
    }
    t->v = malloc((size_t)(t->n ? t->n : 1) * sizeof *t->v); /* a dim of 0: no values */
    if (!t->v) return fail(lx, "out of memory for tensor %s", t->name);
    char what[64];
    snprintf(what, sizeof what, "one of the %lld values of tensor %s", (long long)t->n, t->name);
    for (int64_t i = 0; i < t->n; i++)
        if (!expect_num(lx, &t->v[i], what)) return false;
    return true;
}

static bool parse_case(lexer *lx, const fx_file *f, fx_case *c) {
    if (!expect_name(lx, c->name, sizeof c->name, "case name")) return false;
    for (int i = 0; i < f->ncase - 1; i++)
        if (!strcmp(f->cases[i].name, c->name)) return fail(lx, "case %s appears twice", c->name);
    for (;;) {
        if (!need(lx, "param, tensor or end")) return false;
        if (!strcmp(lx->tok, "end")) return true;
        if (!strcmp(lx->tok, "param")) {
            if (c->nparam == 16) return fail(lx, "case %s has more than 16 params", c->name);
            int i = c->nparam++;
            if (!expect_name(lx, c->pkey[i], sizeof c->pkey[i], "param key")) return false;
            if (!expect_num(lx, &c->pval[i], "param value")) return false;
        } else if (!strcmp(lx->tok, "tensor")) {
            if (c->ntensor == 8) return fail(lx, "case %s has more than 8 tensors", c->name);
            /* counted before parsing so fx_free releases a half-read tensor */
            fx_tensor *t = &c->t[c->ntensor++];
            if (!parse_tensor(lx, t)) return false;
            if (fx_tensor_get(c, t->name) != t) return fail(lx, "tensor %s appears twice", t->name);
        } else {
            return fail(lx, "expected param, tensor or end in case %s, found '%s'", c->name, lx->tok);
        }
    }
}

fx_file *fx_load(const char *path) {
    char *text = read_all(path);
    if (!text) return NULL;
    fx_file *f = calloc(1, sizeof *f);
    lexer lx = {.path = path, .p = text, .line = 1};
    int cap = 0;
    if (!f) goto oom;
    while (next(&lx)) {
        if (strcmp(lx.tok, "case")) {
            fail(&lx, "expected 'case', found '%s'", lx.tok);
            goto fail;
        }
        if (f->ncase == cap) {
            cap = cap ? 2 * cap : 16;
            fx_case *grown = realloc(f->cases, (size_t)cap * sizeof *grown);
            if (!grown) goto oom;
            f->cases = grown;
        }
        fx_case *c = &f->cases[f->ncase++];
        memset(c, 0, sizeof *c);
        if (!parse_case(&lx, f, c)) goto fail;
    }
    if (lx.bad) goto fail;
    if (f->ncase == 0) {
        fail(&lx, "no cases");
        goto fail;
    }
    free(text);
    return f;
oom:
    fprintf(stderr, "%s: out of memory\n", path);
fail:
    free(text);
    fx_free(f);
    return NULL;
}

void fx_free(fx_file *f) {
    if (!f) return;
    for (int i = 0; i < f->ncase; i++)
        for (int j = 0; j < f->cases[i].ntensor; j++) free(f->cases[i].t[j].v);
    free(f->cases);
    free(f);
}

const fx_case *fx_find(const fx_file *f, const char *case_name) {
    for (int i = 0; f && i < f->ncase; i++)
        if (!strcmp(f->cases[i].name, case_name)) return &f->cases[i];
    return NULL;
}

const fx_tensor *fx_tensor_get(const fx_case *c, const char *name) {
    for (int i = 0; c && i < c->ntensor; i++)
        if (!strcmp(c->t[i].name, name)) return &c->t[i];
    return NULL;
}

double fx_param(const fx_case *c, const char *key, double dflt) {
    for (int i = 0; c && i < c->nparam; i++)
        if (!strcmp(c->pkey[i], key)) return c->pval[i];
    return dflt;
}
