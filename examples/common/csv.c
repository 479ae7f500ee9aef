/* csv.c — see csv.h. */
#include "csv.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

struct csv {
    FILE *f;
    char *path, *tmp;
    bool first; /* no field yet in this row */
};

csv *csv_open(const char *path) {
    csv *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    size_t n = strlen(path) + 8;
    c->path = strdup(path);
    c->tmp = malloc(n);
    if (c->tmp) snprintf(c->tmp, n, "%s.tmp", path);
    c->f = c->path && c->tmp ? fopen(c->tmp, "w") : NULL;
    if (!c->f) {
        free(c->path), free(c->tmp), free(c);
        return NULL;
    }
    c->first = true;
    return c;
}

static void sep(csv *c) {
    if (!c->first) fputc(',', c->f);
    c->first = false;
}

void csv_str(csv *c, const char *s) {
    sep(c);
    if (!s) return;
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, c->f);
        return;
    }
    fputc('"', c->f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', c->f);
        fputc(*s, c->f);
    }
    fputc('"', c->f);
}

void csv_num(csv *c, double v) {
    sep(c);
    if (!isnan(v)) fprintf(c->f, "%.6g", v);
}

void csv_int(csv *c, int64_t v) {
    sep(c);
    fprintf(c->f, "%lld", (long long)v);
}

void csv_row(csv *c) {
    fputc('\n', c->f);
    c->first = true;
}

int csv_close(csv *c) {
    if (!c) return -1;
    /* flushed and synced before the rename: after a crash the old file
     * or the whole new one, never an empty or half one */
    bool ok = fflush(c->f) == 0 && !ferror(c->f) && fsync(fileno(c->f)) == 0;
    ok = fclose(c->f) == 0 && ok;
    ok = ok && rename(c->tmp, c->path) == 0;
    if (!ok) remove(c->tmp);
    free(c->path), free(c->tmp), free(c);
    return ok ? 0 : -1;
}
