/* json_file.c — the small public JSON reader of include/kiln.h, for code
 * outside the library's core (models/ reads config.json with it). A file
 * read whole (at most 256 MiB), parsed by core/json.c with bounded depth and
 * value count; lookups go one or two object levels down. */
#include "json.h"

#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#define MAX_FILE (256u << 20)

struct kiln_json_file {
    kiln__json_doc *doc;
    char *text;
};

/* Read path whole into a malloc'd buffer (bounded); NULL with the error set. */
char *kiln__read_file(const char *path, size_t max, size_t *len, const char *who) {
    FILE *f = fopen(path, "rb");
    if (!f) return kiln__err(KILN_ERR_IO, "%s: cannot open %s: %s", who, path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        fclose(f);
        return kiln__err(KILN_ERR_IO, "%s: %s is not a regular file of at most %zu bytes", who, path, max);
    }
    size_t n = (size_t)sb.st_size;
    char *b = kiln__malloc(n + 1);
    if (!b) {
        fclose(f);
        return kiln__err(KILN_ERR_OOM, "%s: out of memory for %s", who, path);
    }
    if (fread(b, 1, n, f) != n) {
        fclose(f);
        free(b);
        return kiln__err(KILN_ERR_IO, "%s: reading %s failed", who, path);
    }
    fclose(f);
    b[n] = 0;
    *len = n;
    return b;
}

kiln_json_file *kiln_json_file_open(const char *path) {
    const char *who = "kiln_json_file_open";
    if (!path) return kiln__err(KILN_ERR_ARG, "%s: path is NULL", who);
    kiln_json_file *j = kiln__calloc(1, sizeof *j);
    if (!j) return kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
    size_t n;
    char msg[320];
    snprintf(msg, sizeof msg, "%s: %s", who, path);
    if (!(j->text = kiln__read_file(path, MAX_FILE, &n, who)) ||
        !(j->doc = kiln__json_parse_bounded(j->text, n, 64, (int64_t)n / 2 + 16, msg))) {
        kiln_json_file_close(j);
        return NULL;
    }
    return j;
}

void kiln_json_file_close(kiln_json_file *j) {
    if (!j) return;
    kiln__json_free(j->doc);
    free(j->text);
    free(j);
}

static const kiln__json *at(const kiln_json_file *j, const char *obj, const char *key) {
    if (!j || !key) return NULL;
    const kiln__json *o = kiln__json_root(j->doc);
    if (obj) o = kiln__json_get(o, obj);
    return kiln__json_get(o, key);
}

bool kiln_json_file_has(const kiln_json_file *j, const char *obj, const char *key) {
    const kiln__json *v = at(j, obj, key);
    return v && v->type != KILN_JSON_NULL;
}

kiln_status kiln_json_file_number(const kiln_json_file *j, const char *obj, const char *key, double *out) {
    const kiln__json *v = at(j, obj, key);
    if (!v || !out || (v->type != KILN_JSON_NUMBER && v->type != KILN_JSON_TRUE && v->type != KILN_JSON_FALSE))
        return kiln__errs(KILN_ERR_FORMAT, "kiln_json_file_number: '%s%s%s' is %s", obj ? obj : "", obj ? "." : "",
                          key ? key : "?", v ? "not a number or bool" : "missing");
    *out = v->type == KILN_JSON_NUMBER ? v->num : v->type == KILN_JSON_TRUE;
    return KILN_OK;
}

const char *kiln_json_file_string(const kiln_json_file *j, const char *obj, const char *key) {
    const kiln__json *v = at(j, obj, key);
    return v && v->type == KILN_JSON_STRING ? v->str : NULL;
}
