/* kt.h — kiln's test runner: one binary, tests registered by KT_TEST, each
 * run in its own process (a crash fails that test, not the run). The last
 * line is "N passed, N failed[, N skipped]"; the exit status is non-zero on
 * any failure. `kiln_tests NAME...` runs the tests whose names contain NAME.
 *
 *     KT_TEST(add_broadcasts) {
 *         kiln_ctx *ctx = kiln_ctx_new();
 *         ...
 *         KT_CHECK(fabs(y - 3.0) < 1e-6, "y = %g", y);
 *         kiln_ctx_free(ctx);
 *     }
 */
#ifndef KT_H
#define KT_H

#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*kt_fn)(void);
void kt_register(const char *name, kt_fn fn);
/* Record a failure (the test goes on; it fails at the end). */
void kt_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* End the test as skipped: only for hardware that is absent. */
_Noreturn void kt_skip(const char *why);
int kt_failures(void);
/* What the test is doing now (a loop's case, NULL for none): failures and
 * a SIGILL name it. what must stay valid until the next call. */
void kt_set_context(const char *what);

#define KT_TEST(name)                                                                    \
    static void name(void);                                                              \
    __attribute__((constructor)) static void kt_reg_##name(void) { kt_register(#name, name); } \
    static void name(void)

#define KT_CHECK(cond, ...)                                          \
    do {                                                             \
        if (!(cond)) kt_fail(__FILE__, __LINE__, __VA_ARGS__);       \
    } while (0)
/* Check and leave the test on failure. */
#define KT_REQUIRE(cond, ...)                                        \
    do {                                                             \
        if (!(cond)) {                                               \
            kt_fail(__FILE__, __LINE__, __VA_ARGS__);                \
            return;                                                  \
        }                                                            \
    } while (0)
/* A kiln call that must succeed; prints kiln_last_error() otherwise. */
#define KT_OK(expr)                                                                                  \
    do {                                                                                             \
        kiln_status kt_s_ = (expr);                                                                  \
        if (kt_s_ != KILN_OK) {                                                                      \
            kt_fail(__FILE__, __LINE__, "%s -> %s: %s", #expr, kiln_status_name(kt_s_), kiln_last_error()); \
            return;                                                                                  \
        }                                                                                            \
    } while (0)
#define KT_NOTNULL(expr)                                                                             \
    do {                                                                                             \
        if (!(expr)) {                                                                               \
            kt_fail(__FILE__, __LINE__, "%s is NULL: %s", #expr, kiln_last_error());                 \
            return;                                                                                  \
        }                                                                                            \
    } while (0)
/* A constructor that must fail: NULL, with this status and a message
 * containing text. */
#define KT_EXPECT_ERR(expr, status, text)                                                                           \
    do {                                                                                                            \
        kiln_clear_error();                                                                                         \
        KT_CHECK((expr) == NULL, "%s succeeded", #expr);                                                            \
        KT_CHECK(kiln_last_status() == (status), "%s: status %s", #expr, kiln_status_name(kiln_last_status()));     \
        KT_CHECK(strstr(kiln_last_error(), text) != NULL, "%s: message '%s' lacks '%s'", #expr, kiln_last_error(), \
                 text);                                                                                             \
    } while (0)

/* Largest |a-b| / (atol + rtol*|b|) over n values; <= 1 passes. Reports
 * the worst element through *worst when not NULL. */
double kt_rel_err(const double *a, const double *b, int64_t n, double atol, double rtol, int64_t *worst);

/* n values of N(0, std^2) drawn by kiln's seeded generator, malloc'ed */
float *kt_randn(int64_t n, uint64_t seed, float std);

/* /tmp/kiln_<pid>_<name>: a file of this test's own (each test runs in
 * its own process); the last 8 results stay valid. */
char *kt_tmp_path(const char *name);

#endif
