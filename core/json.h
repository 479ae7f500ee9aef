/* json.h — a small bounds-checked JSON reader and string writer; not
 * installed. Used for safetensors headers (core/safetensors.c) and meant
 * for config.json / tokenizer.json too, so nothing here knows about them.
 *
 * kiln__json_parse() turns a buffer into a tree in one malloc'd document:
 * objects and arrays hold their children as a list (first child, next
 * sibling), an object member is its value node with the key on it.
 * Strings are decoded (escapes, \uXXXX and surrogate pairs to UTF-8) and
 * NUL-terminated; raw bytes must be valid UTF-8. Numbers keep the double
 * and, when written as an integer that fits, the exact int64. Every error
 * is KILN_ERR_FORMAT with the byte offset: "<who>: JSON: <what> at byte N".
 */
#ifndef KILN_JSON_H
#define KILN_JSON_H

#include "internal.h"

typedef enum kiln__json_type {
    KILN_JSON_NULL = 0,
    KILN_JSON_FALSE,
    KILN_JSON_TRUE,
    KILN_JSON_NUMBER,
    KILN_JSON_STRING,
    KILN_JSON_ARRAY,
    KILN_JSON_OBJECT
} kiln__json_type;

typedef struct kiln__json {
    kiln__json_type type;
    bool is_int;         /* NUMBER written without fraction/exponent and within int64 */
    size_t offset;       /* byte offset of the value in the source */
    double num;          /* NUMBER */
    int64_t i64;         /* NUMBER when is_int */
    const char *str;     /* STRING: decoded, NUL-terminated */
    size_t len;          /* STRING: bytes (a \u0000 may sit inside); ARRAY/OBJECT: children */
    const char *key;     /* member of an OBJECT: its key (decoded), else NULL */
    size_t key_len;
    struct kiln__json *child, *next; /* ARRAY/OBJECT children; next sibling */
} kiln__json;

typedef struct kiln__json_doc kiln__json_doc;

/* Parse len bytes (no NUL needed). max_depth bounds nesting (arrays and
 * objects; <= 0 means 64). NULL with the error set on failure. */
kiln__json_doc *kiln__json_parse(const char *buf, size_t len, int max_depth, const char *who);
/* The same with at most max_values values (a file format's bound, so a
 * hostile input cannot make a node per two bytes; <= 0: no bound). */
kiln__json_doc *kiln__json_parse_bounded(const char *buf, size_t len, int max_depth, int64_t max_values,
                                         const char *who);
const kiln__json *kiln__json_root(const kiln__json_doc *d);
void kiln__json_free(kiln__json_doc *d);
/* The first member of object o called key (NULL if none or o not an object). */
const kiln__json *kiln__json_get(const kiln__json *o, const char *key);

/* A growable byte buffer for writers; any allocation failure sticks in oom. */
typedef struct kiln__buf {
    char *p;
    size_t len, cap;
    bool oom;
} kiln__buf;
void kiln__buf_add(kiln__buf *b, const void *s, size_t n);
void kiln__buf_printf(kiln__buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* s (NUL-terminated) as a JSON string literal with quotes and escapes. */
void kiln__json_put_string(kiln__buf *b, const char *s);
void kiln__buf_free(kiln__buf *b);

/* Read a regular file of at most max bytes whole (NUL added); NULL with
 * the error set. */
char *kiln__read_file(const char *path, size_t max, size_t *len, const char *who);

#endif
