/* output.c — see output.h. */
#include "output.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static bool cannot(const char *prog, const char *option, const char *path, const char *why) {
    fprintf(stderr, "%s: %s %s: cannot write there: %s\n", prog, option, path, why);
    return false;
}

/* Create and remove a file in dir: what a save there will do first. */
static bool probe(const char *prog, const char *option, const char *path, const char *dir) {
    char name[4096];
    if (snprintf(name, sizeof name, "%s/.kiln-probe-XXXXXX", dir) >= (int)sizeof name)
        return cannot(prog, option, path, "the path is too long");
    int fd = mkstemp(name);
    if (fd < 0) return cannot(prog, option, path, strerror(errno));
    close(fd);
    unlink(name);
    return true;
}

bool output_file(const char *prog, const char *option, const char *path) {
    if (!path || !*path) return cannot(prog, option, "''", "an empty path");
    struct stat st;
    if (stat(path, &st) == 0) {
        if (S_ISDIR(st.st_mode)) return cannot(prog, option, path, "it is a directory");
        if (access(path, W_OK)) return cannot(prog, option, path, strerror(errno));
    }
    char dir[4096];
    if (snprintf(dir, sizeof dir, "%s", path) >= (int)sizeof dir)
        return cannot(prog, option, path, "the path is too long");
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0'; /* "/name" */
    else *slash = '\0';
    return probe(prog, option, path, dir);
}

bool output_dir(const char *prog, const char *option, const char *dir) {
    if (!dir || !*dir) return cannot(prog, option, "''", "an empty path");
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf)
        return cannot(prog, option, dir, "the path is too long");
    for (char *p = buf + 1; *p; p++) /* mkdir -p */
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0777) && errno != EEXIST) return cannot(prog, option, dir, strerror(errno));
            *p = '/';
        }
    if (mkdir(buf, 0777) && errno != EEXIST) return cannot(prog, option, dir, strerror(errno));
    return probe(prog, option, dir, dir);
}

/* ---- generated text ---- */

static void escape(FILE *f, const unsigned char *b, int n) {
    for (int i = 0; i < n; i++) fprintf(f, "\\x%02x", b[i]);
}

/* Bytes a sequence led by b takes (0: b cannot lead one). */
static int seq_len(unsigned char b) {
    return b >= 0xc2 && b <= 0xdf ? 2 : b >= 0xe0 && b <= 0xef ? 3 : b >= 0xf0 && b <= 0xf4 ? 4 : 0;
}

/* Is b a valid byte at position t->n of the sequence held? (The second
 * byte's range excludes overlong forms, surrogates and code points past
 * U+10FFFF.) */
static bool fits(const text_stream *t, unsigned char b) {
    if ((b & 0xc0) != 0x80) return false;
    if (t->n > 1) return true;
    switch (t->held[0]) {
    case 0xe0: return b >= 0xa0;
    case 0xed: return b <= 0x9f;
    case 0xf0: return b >= 0x90;
    case 0xf4: return b <= 0x8f;
    default: return true;
    }
}

void text_put(text_stream *t, FILE *f, unsigned char b) {
    if (t->n) {
        if (!fits(t, b)) { /* a broken sequence: its bytes escaped, b on its own */
            text_end(t, f);
            text_put(t, f, b);
            return;
        }
        t->held[t->n++] = b;
        if (t->n < t->want) return;
        bool c1 = t->held[0] == 0xc2 && t->held[1] <= 0x9f; /* U+0080..U+009F: C1 controls */
        if (c1) escape(f, t->held, t->n);
        else fwrite(t->held, 1, (size_t)t->n, f);
        t->n = 0;
        return;
    }
    if (b == '\n' || b == '\t' || (b >= 0x20 && b < 0x7f)) {
        fputc(b, f);
    } else if ((t->want = seq_len(b))) {
        t->held[t->n++] = b;
    } else {
        escape(f, &b, 1);
    }
}

void text_end(text_stream *t, FILE *f) {
    escape(f, t->held, t->n);
    t->n = 0;
}

void text_write(FILE *f, const char *s, size_t n) {
    text_stream t = {0};
    for (size_t i = 0; i < n; i++) text_put(&t, f, (unsigned char)s[i]);
    text_end(&t, f);
}
