/* args.c — see args.h. */
#include "args.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* "--name VALUE" as shown in the help. */
static int opt_label(char *buf, size_t n, const args_opt *o) {
    if (o->type == ARGS_FLAG) return snprintf(buf, n, "--%s", o->name);
    return snprintf(buf, n, "--%s %s", o->name, o->meta ? o->meta : (o->type == ARGS_CHOICE ? o->choices : "VALUE"));
}

static void print_default(FILE *f, const args_opt *o) {
    switch (o->type) {
    case ARGS_FLAG: return; /* a flag's default is off */
    case ARGS_INT: fprintf(f, " (default %d)", *(int *)o->value); return;
    case ARGS_U64: fprintf(f, " (default %" PRIu64 ")", *(uint64_t *)o->value); return;
    case ARGS_FLOAT: fprintf(f, " (default %g)", (double)*(float *)o->value); return;
    case ARGS_DOUBLE: fprintf(f, " (default %g)", *(double *)o->value); return;
    case ARGS_STRING:
    case ARGS_CHOICE: {
        const char *s = *(const char **)o->value;
        if (s) fprintf(f, " (default %s)", s);
        return;
    }
    }
}

void args_usage(FILE *f, const char *prog, const char *summary, const args_opt *opts, int n) {
    fprintf(f, "usage: %s [options]\n", prog);
    if (summary && *summary) fprintf(f, "%s\n", summary);
    fprintf(f, "\noptions:\n");
    char label[256];
    int width = (int)strlen("--help");
    for (int i = 0; i < n; i++) {
        int w = opt_label(label, sizeof label, &opts[i]);
        if (w > width) width = w;
    }
    for (int i = 0; i < n; i++) {
        const args_opt *o = &opts[i];
        opt_label(label, sizeof label, o);
        fprintf(f, "  %-*s  %s", width, label, o->help ? o->help : "");
        if (o->type == ARGS_CHOICE && o->meta) fprintf(f, ": %s", o->choices);
        print_default(f, o);
        fputc('\n', f);
    }
    fprintf(f, "  %-*s  %s\n", width, "--help", "print this help");
}

/* Is s one of the '|'-separated words of choices? */
static bool in_choices(const char *s, const char *choices) {
    size_t len = strlen(s);
    for (const char *p = choices; p && *p;) {
        const char *bar = strchr(p, '|');
        size_t wl = bar ? (size_t)(bar - p) : strlen(p);
        if (wl == len && !strncmp(p, s, len)) return true;
        p = bar ? bar + 1 : NULL;
    }
    return false;
}

/* Store text into o; false if it is not a value of o's type. */
static bool set_value(const args_opt *o, const char *v) {
    char *end = NULL;
    errno = 0;
    switch (o->type) {
    case ARGS_FLAG: return false;
    case ARGS_INT: {
        long x = strtol(v, &end, 10);
        if (*v == '\0' || *end || errno || x < 0 || x > 2147483647L || (o->positive && x == 0)) return false;
        *(int *)o->value = (int)x;
        return true;
    }
    case ARGS_U64: {
        if (*v == '-') return false;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == '\0' || *end || errno || (o->positive && x == 0)) return false;
        *(uint64_t *)o->value = (uint64_t)x;
        return true;
    }
    case ARGS_FLOAT:
    case ARGS_DOUBLE: {
        double x = strtod(v, &end);
        if (*v == '\0' || *end || !isfinite(x) || x < 0 || (o->positive && x == 0)) return false;
        if (o->type == ARGS_FLOAT) *(float *)o->value = (float)x;
        else *(double *)o->value = x;
        return true;
    }
    case ARGS_CHOICE:
        if (!in_choices(v, o->choices)) return false;
        *(const char **)o->value = v;
        return true;
    case ARGS_STRING: *(const char **)o->value = v; return true;
    }
    return false;
}

static int fail(const char *prog, const char *summary, const args_opt *opts, int n, const char *fmt, const char *a,
                const char *b) {
    fprintf(stderr, "%s: ", prog);
    fprintf(stderr, fmt, a, b);
    fputs("\n\n", stderr);
    args_usage(stderr, prog, summary, opts, n);
    return ARGS_ERROR;
}

int args_parse(const char *prog, const char *summary, const args_opt *opts, int n, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            args_usage(stdout, prog, summary, opts, n);
            return ARGS_HELP;
        }
        if (strncmp(a, "--", 2) || !a[2]) return fail(prog, summary, opts, n, "unexpected argument '%s'%s", a, "");
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t len = eq ? (size_t)(eq - name) : strlen(name);
        const args_opt *o = NULL;
        for (int k = 0; k < n && !o; k++)
            if (strlen(opts[k].name) == len && !strncmp(opts[k].name, name, len)) o = &opts[k];
        if (!o) return fail(prog, summary, opts, n, "unknown option '%s'%s", a, "");
        if (o->type == ARGS_FLAG) {
            if (eq) return fail(prog, summary, opts, n, "option '--%s' takes no value%s", o->name, "");
            *(bool *)o->value = true;
            continue;
        }
        const char *v = eq ? eq + 1 : (i + 1 < argc ? argv[++i] : NULL);
        if (!v) return fail(prog, summary, opts, n, "option '--%s' needs a value%s", o->name, "");
        if (!set_value(o, v)) {
            bool integer = o->type == ARGS_INT || o->type == ARGS_U64;
            const char *want = o->type == ARGS_CHOICE ? o->choices
                               : integer          ? (o->positive ? "an integer > 0" : "an integer >= 0")
                                                  : (o->positive ? "a number > 0" : "a number >= 0");
            char what[256];
            snprintf(what, sizeof what, "%s for --%s (expected %s)", v, o->name, want);
            return fail(prog, summary, opts, n, "bad value %s%s", what, "");
        }
    }
    return ARGS_OK;
}

/* o's current value as text */
static void value_text(char *buf, size_t n, const args_opt *o) {
    switch (o->type) {
    case ARGS_FLAG: snprintf(buf, n, "%s", *(bool *)o->value ? "on" : "off"); return;
    case ARGS_INT: snprintf(buf, n, "%d", *(int *)o->value); return;
    case ARGS_U64: snprintf(buf, n, "%" PRIu64, *(uint64_t *)o->value); return;
    case ARGS_FLOAT: snprintf(buf, n, "%g", (double)*(float *)o->value); return;
    case ARGS_DOUBLE: snprintf(buf, n, "%g", *(double *)o->value); return;
    case ARGS_STRING:
    case ARGS_CHOICE: snprintf(buf, n, "'%s'", *(const char **)o->value ? *(const char **)o->value : ""); return;
    }
}

int args_reject(const char *prog, const args_opt *opts, int n, const char *name, const char *fmt, ...) {
    char value[256] = "?";
    for (int k = 0; k < n; k++)
        if (!strcmp(opts[k].name, name)) value_text(value, sizeof value, &opts[k]);
    fprintf(stderr, "%s: bad value %s for --%s (expected ", prog, value, name);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "); %s --help lists the options\n", prog);
    return ARGS_ERROR;
}
