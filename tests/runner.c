/* runner.c — main() of the test binary: runs each registered test in a
 * child process, prints one line per test and the summary. */
#include "kt.h"

#include <signal.h>
#include <stdarg.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define KT_MAX 1024
#define KT_SKIP_CODE 77

typedef struct { const char *name; kt_fn fn; } kt_entry;
static kt_entry tests[KT_MAX];
static int n_tests, n_fail_here;
static const char *context;

void kt_set_context(const char *what) { context = what; }

/* An illegal instruction names the case it ran in (a kernel above the
 * CPU's level), then kills the test as before. */
static void on_sigill(int sig) {
    if (context) {
        static const char head[] = "    illegal instruction while running: ";
        ssize_t w = write(2, head, sizeof head - 1);
        w += write(2, context, strlen(context));
        w += write(2, "\n", 1);
        (void)w;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void kt_register(const char *name, kt_fn fn) {
    if (n_tests < KT_MAX) tests[n_tests++] = (kt_entry){name, fn};
}

void kt_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "    %s:%d: ", file, line);
    if (context) fprintf(stderr, "[%s] ", context);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    n_fail_here++;
}

_Noreturn void kt_skip(const char *why) {
    fprintf(stderr, "    skipped: %s\n", why);
    fflush(NULL);
    _exit(KT_SKIP_CODE);
}

int kt_failures(void) { return n_fail_here; }

float *kt_randn(int64_t n, uint64_t seed, float std) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = kiln_new_1d(ctx, KILN_F32, n);
    float *x = malloc((size_t)n * sizeof *x);
    kiln_tensor_fill_randn(t, seed, 0.0, std);
    kiln_tensor_get_f32(t, x, n);
    kiln_ctx_free(ctx);
    return x;
}

char *kt_tmp_path(const char *name) {
    static char p[8][256];
    static int k;
    char *s = p[k++ % 8];
    snprintf(s, sizeof p[0], "/tmp/kiln_%d_%s", (int)getpid(), name);
    return s;
}

double kt_rel_err(const double *a, const double *b, int64_t n, double atol, double rtol, int64_t *worst) {
    double w = 0;
    if (worst) *worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs(a[i] - b[i]) / (atol + rtol * fabs(b[i]));
        if (!(e <= w)) { /* also catches NaN */
            w = e == e ? e : INFINITY;
            if (worst) *worst = i;
        }
    }
    return w;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const kt_entry *)a)->name, ((const kt_entry *)b)->name);
}

static bool selected(const char *name, int argc, char **argv) {
    if (argc < 2) return true;
    for (int i = 1; i < argc; i++)
        if (strstr(name, argv[i])) return true;
    return false;
}

/* In a LeakSanitizer build (make SANITIZE=address) each test's process is
 * checked for leaks before it ends: _exit skips LSan's own check at exit. */
int __lsan_do_recoverable_leak_check(void) __attribute__((weak));

int main(int argc, char **argv) {
    qsort(tests, (size_t)n_tests, sizeof tests[0], cmp_name);
    /* Vulkan tests run under the validation layer; tests fail on its messages */
    setenv("KILN_VULKAN_VALIDATE", "1", 0);
    int passed = 0, failed = 0, skipped = 0;
    for (int i = 0; i < n_tests; i++) {
        if (!selected(tests[i].name, argc, argv)) continue;
        fflush(NULL);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        pid_t pid = fork();
        if (pid == 0) {
            alarm(600); /* a hung test fails instead of hanging the run */
            signal(SIGILL, on_sigill);
            tests[i].fn();
            fflush(NULL);
            if (__lsan_do_recoverable_leak_check && __lsan_do_recoverable_leak_check()) {
                fprintf(stderr, "    leaks (LeakSanitizer's report above)\n");
                n_fail_here++;
            }
            _exit(n_fail_here ? 1 : 0);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) < 0) st = 1 << 8;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double secs = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
        if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
            passed++;
            printf("ok    %-44s %7.2fs\n", tests[i].name, secs);
        } else if (WIFEXITED(st) && WEXITSTATUS(st) == KT_SKIP_CODE) {
            skipped++;
            printf("skip  %s\n", tests[i].name);
        } else {
            failed++;
            if (WIFSIGNALED(st)) printf("FAIL  %s (killed by signal %d)\n", tests[i].name, WTERMSIG(st));
            else printf("FAIL  %s\n", tests[i].name);
        }
    }
    printf("%d passed, %d failed", passed, failed);
    if (skipped) printf(", %d skipped", skipped);
    printf("\n");
    return failed ? 1 : 0;
}
