/* test_pool.c — core/pool.h: every item runs exactly once whatever the
 * items, grain and threads (more threads than chunks, than cores, one
 * item), over thousands of back-to-back loops (workers late for one loop
 * must not run items of the next), with tids below the thread count and
 * chunks of at least the grain; with two host threads calling at once;
 * nested loops run on their thread; a forked child gets a pool of its
 * own. And the thread counts: $KILN_THREADS and kiln_set_threads clamp or
 * refuse what is not a count, with a message. */
#include "kt.h"
#include "../core/pool.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct counts {
    int *c;
    int64_t n, grain;
    int nt;
    int bad; /* an item outside [0, n), a tid out of range or a short chunk */
} counts;

static void count(void *arg, int64_t i0, int64_t i1, int tid) {
    counts *k = arg;
    if (i0 < 0 || i1 > k->n || i0 >= i1 || tid < 0 || tid >= (k->nt > 1 ? k->nt : 1) ||
        (i1 - i0 < k->grain && i1 != k->n))
        __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED);
    for (int64_t i = i0; i < i1 && i < k->n; i++) __atomic_add_fetch(&k->c[i], 1, __ATOMIC_RELAXED);
}

/* Loops of varying shape; the number of items that ran other than once. */
static int64_t run_loops(int loops, unsigned seed) {
    int64_t wrong = 0;
    int *c = calloc(5000, sizeof *c);
    for (int i = 0; i < loops; i++) {
        seed = seed * 1103515245u + 12345u;
        const int64_t n = 1 + (seed >> 8) % 5000, grain = 1 + (seed >> 3) % 40;
        const int nt = 1 + (int)((seed >> 20) % 4);
        memset(c, 0, (size_t)n * sizeof *c);
        counts k = {c, n, grain, nt, 0};
        kiln__pool_for(n, grain, nt, count, &k);
        for (int64_t u = 0; u < n; u++) wrong += c[u] != 1;
        wrong += k.bad;
    }
    free(c);
    return wrong;
}

KT_TEST(pool_every_item_once) {
    KT_CHECK(run_loops(3000, 7) == 0, "items ran other than once");
    int c[3] = {0};
    counts k = {c, 3, 1, 64, 0};
    kiln__pool_for(3, 1, 64, count, &k); /* more threads than items */
    KT_CHECK(c[0] == 1 && c[1] == 1 && c[2] == 1 && !k.bad, "3 items on 64 threads: %d %d %d", c[0], c[1], c[2]);
    kiln__pool_for(0, 8, 2, count, &k); /* nothing to do */
    KT_CHECK(c[0] == 1 && !k.bad, "an empty loop ran items");
}

static void *caller(void *arg) {
    *(int64_t *)arg = run_loops(1500, 11);
    return NULL;
}

KT_TEST(pool_two_callers) {
    int64_t wrong[2] = {0, 0};
    pthread_t t;
    KT_REQUIRE(pthread_create(&t, NULL, caller, &wrong[0]) == 0, "pthread_create");
    wrong[1] = run_loops(1500, 99);
    pthread_join(t, NULL);
    KT_CHECK(wrong[0] == 0 && wrong[1] == 0, "items ran other than once: %lld, %lld", (long long)wrong[0],
             (long long)wrong[1]);
}

/* A loop inside a loop's fn runs on that thread alone (tid 0), and
 * kiln__pool_inside says so. */
typedef struct nested {
    int inner[64][16];
    int outside, bad;
} nested;

static void inner_fn(void *arg, int64_t i0, int64_t i1, int tid) {
    int *c = arg;
    for (int64_t i = i0; i < i1; i++) c[i] += 1 + tid * 1000; /* no atomics: one thread runs them all */
}

static void outer_fn(void *arg, int64_t i0, int64_t i1, int tid) {
    nested *s = arg;
    (void)tid;
    if (!kiln__pool_inside()) __atomic_store_n(&s->bad, 1, __ATOMIC_RELAXED);
    for (int64_t i = i0; i < i1; i++) kiln__pool_for(16, 1, 4, inner_fn, s->inner[i]);
}

KT_TEST(pool_nested_loops_run_alone) {
    nested s = {.outside = kiln__pool_inside()};
    kiln__pool_for(64, 1, 4, outer_fn, &s);
    int wrong = 0;
    for (int i = 0; i < 64; i++)
        for (int j = 0; j < 16; j++) wrong += s.inner[i][j] != 1;
    KT_CHECK(!wrong, "%d inner items ran other than once on tid 0", wrong);
    KT_CHECK(!s.outside && !s.bad && !kiln__pool_inside(), "kiln__pool_inside: outside %d, inside a loop false %d, "
             "after %d", s.outside, s.bad, kiln__pool_inside());
}

/* A forked child (the test runner forks per test) has no workers of its
 * parent's: its loops still run every item, on threads of its own. Not in
 * an ASan build: its allocator's lock is not reset at fork, so a child
 * whose parent had a thread inside malloc waits on it for ever (seen: the
 * child's first pthread_create, in calloc, on a fresh clone's make test). */
#if !defined(__SANITIZE_ADDRESS__)
static void *nothing(void *arg) { return arg; }

/* Whether a forked child of this (threaded) process can start a thread:
 * qemu-user aborts there, whatever the program. */
static bool child_threads_work(void) {
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return false;
    if (!pid) {
        /* qemu's abort message would read as a failure in the log */
        const int null = open("/dev/null", O_WRONLY);
        if (null >= 0) dup2(null, 1), dup2(null, 2);
        pthread_t t;
        _exit(pthread_create(&t, NULL, nothing, NULL) || pthread_join(t, NULL) ? 1 : 0);
    }
    int st = 0;
    return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

KT_TEST(pool_after_fork) {
    KT_CHECK(run_loops(200, 3) == 0, "parent: items ran other than once");
    if (!child_threads_work()) kt_skip("a forked child of a threaded process cannot start threads here (qemu-user)");
    fflush(NULL);
    const pid_t pid = fork();
    KT_REQUIRE(pid >= 0, "fork");
    if (!pid) _exit(run_loops(500, 5) == 0 ? 0 : 1);
    int st = 0;
    KT_REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    KT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: items ran other than once (status %d)", st);
}
#endif

/* kiln_get_threads() in a fresh child with $KILN_THREADS = env (NULL:
 * unset); what it wrote to stderr in msg. */
static int threads_with_env(const char *env, char *msg, size_t cap) {
    int out[2], err[2];
    if (pipe(out) || pipe(err)) return -1;
    fflush(NULL);
    const pid_t pid = fork();
    if (pid < 0) return -1;
    if (!pid) {
        if (env) setenv("KILN_THREADS", env, 1);
        else unsetenv("KILN_THREADS");
        dup2(err[1], 2);
        const int n = kiln_get_threads();
        if (write(out[1], &n, sizeof n) != (ssize_t)sizeof n) _exit(1);
        _exit(0);
    }
    close(out[1]), close(err[1]);
    int n = -1;
    if (read(out[0], &n, sizeof n) != (ssize_t)sizeof n) n = -1;
    const ssize_t got = read(err[0], msg, cap - 1);
    msg[got > 0 ? got : 0] = 0;
    close(out[0]), close(err[0]);
    waitpid(pid, NULL, 0);
    return n;
}

KT_TEST(threads_env_is_checked) {
    char msg[512];
    const int cores = threads_with_env(NULL, msg, sizeof msg);
    KT_CHECK(cores >= 1 && cores <= KILN_MAX_THREADS && !msg[0], "default: %d threads, message '%s'", cores, msg);
    KT_CHECK(threads_with_env("3", msg, sizeof msg) == 3 && !msg[0], "KILN_THREADS=3: message '%s'", msg);
    KT_CHECK(threads_with_env("0", msg, sizeof msg) == cores && !msg[0], "KILN_THREADS=0: message '%s'", msg);
    static const char *const bad[] = {"abc", "-3", "2x", "99999999999999999999"};
    for (int i = 0; i < 4; i++) {
        const int n = threads_with_env(bad[i], msg, sizeof msg);
        KT_CHECK(n == cores && strstr(msg, "KILN_THREADS") && strstr(msg, bad[i]) && strstr(msg, "not a thread count"),
                 "KILN_THREADS=%s: %d threads (cores %d), message '%s'", bad[i], n, cores, msg);
    }
    /* too many: the most, said */
    const int n = threads_with_env("100000", msg, sizeof msg);
    KT_CHECK(n == KILN_MAX_THREADS && strstr(msg, "100000") && strstr(msg, "more than"),
             "KILN_THREADS=100000: %d threads, message '%s'", n, msg);
}

KT_TEST(set_threads_refuses_bad_counts) {
    KT_OK(kiln_set_threads(2));
    static const int bad[] = {-3, KILN_MAX_THREADS + 1, 100000, 2147483647};
    for (int i = 0; i < 4; i++) {
        KT_CHECK(kiln_set_threads(bad[i]) == KILN_ERR_ARG && strstr(kiln_last_error(), "kiln_set_threads"),
                 "kiln_set_threads(%d): %s", bad[i], kiln_last_error());
        KT_CHECK(kiln_get_threads() == 2, "kiln_set_threads(%d) changed the count to %d", bad[i], kiln_get_threads());
    }
    KT_OK(kiln_set_threads(KILN_MAX_THREADS));
    KT_CHECK(kiln_get_threads() == KILN_MAX_THREADS, "the most: %d", kiln_get_threads());
    KT_OK(kiln_set_threads(0));
    KT_CHECK(kiln_get_threads() >= 1, "the default: %d", kiln_get_threads());
}
