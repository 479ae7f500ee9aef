/* error.c — errors as values: a per-thread status and message. */
#include "internal.h"

#include <stdio.h>

static _Thread_local kiln_status err_status;
static _Thread_local char err_msg[1024];

const char *kiln_last_error(void) { return err_status == KILN_OK ? "" : err_msg; }
kiln_status kiln_last_status(void) { return err_status; }

void kiln_clear_error(void) {
    err_status = KILN_OK;
    err_msg[0] = 0;
}

const char *kiln_status_name(kiln_status s) {
    static const char *names[] = {"ok",          "shape error", "dtype error",     "bad argument",
                                  "out of memory", "I/O error",  "format error",    "invalid state",
                                  "unsupported", "non-finite value"};
    return (unsigned)s < sizeof names / sizeof *names ? names[s] : "unknown status";
}

static void set_error(kiln_status s, const char *fmt, va_list ap) {
    err_status = s;
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
}

void *kiln__err(kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(s, fmt, ap);
    va_end(ap);
    return NULL;
}

kiln_status kiln__errs(kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(s, fmt, ap);
    va_end(ap);
    return s;
}

kiln_status kiln__err_context(const char *fmt, ...) {
    char tail[sizeof err_msg];
    snprintf(tail, sizeof tail, "%s", err_msg[0] ? err_msg : "failed");
    if (err_status == KILN_OK) err_status = KILN_ERR_STATE; /* a failure that said nothing */
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    size_t at = n < 0 ? 0 : (size_t)n < sizeof err_msg - 3 ? (size_t)n : sizeof err_msg - 3;
    size_t k = strlen(tail) < sizeof err_msg - 3 - at ? strlen(tail) : sizeof err_msg - 3 - at;
    memcpy(err_msg + at, ": ", 2);
    memcpy(err_msg + at + 2, tail, k);
    err_msg[at + 2 + k] = 0;
    return err_status;
}

kiln_status kiln_set_error(kiln_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    set_error(s, fmt, ap);
    va_end(ap);
    return s;
}

char *kiln__dims_str(int ndim, const int64_t *shape, char *buf) {
    size_t n = 0;
    buf[n++] = '[';
    for (int i = 0; i < ndim && n < 80; i++)
        n += (size_t)snprintf(buf + n, 96 - n, i ? ", %lld" : "%lld", (long long)shape[i]);
    snprintf(buf + n, 96 - n, "]");
    return buf;
}

char *kiln__shape_str(const kiln_tensor *t, char *buf) {
    if (!t) {
        snprintf(buf, 96, "(null)");
        return buf;
    }
    return kiln__dims_str(t->ndim, t->shape, buf);
}
