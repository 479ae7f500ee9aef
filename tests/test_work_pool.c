/* test_work_pool.c — backends/cpu/work_pool.h: every unit runs exactly
 * once whatever the units, chunk and threads (more threads than chunks,
 * than cores, one unit), over thousands of back-to-back jobs (workers late
 * for one job must not run units of the next), and with two host threads
 * calling at once (one of them runs its loop alone). */
#include "kt.h"
#include "../backends/cpu/work_pool.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct counts {
    int *c;
    int64_t n;
    int bad; /* a unit outside [0, n) */
} counts;

static void count(void *arg, int64_t u0, int64_t u1) {
    counts *k = arg;
    if (u0 < 0 || u1 > k->n || u0 >= u1) __atomic_store_n(&k->bad, 1, __ATOMIC_RELAXED);
    for (int64_t u = u0; u < u1 && u < k->n; u++) __atomic_add_fetch(&k->c[u], 1, __ATOMIC_RELAXED);
}

/* Jobs of varying shape; the number of units that ran other than once. */
static int64_t run_jobs(int jobs, unsigned seed) {
    int64_t wrong = 0;
    int *c = calloc(5000, sizeof *c);
    for (int i = 0; i < jobs; i++) {
        seed = seed * 1103515245u + 12345u;
        const int64_t n = 1 + (seed >> 8) % 5000, chunk = 1 + (seed >> 3) % 40;
        const int nt = 1 + (int)((seed >> 20) % 4);
        memset(c, 0, (size_t)n * sizeof *c);
        counts k = {c, n, 0};
        kiln__pool_for(n, chunk, nt, count, &k);
        for (int64_t u = 0; u < n; u++) wrong += c[u] != 1;
        wrong += k.bad;
    }
    free(c);
    return wrong;
}

KT_TEST(work_pool_every_unit_once) {
    KT_CHECK(run_jobs(3000, 7) == 0, "units ran other than once");
    int c[3] = {0};
    counts k = {c, 3, 0};
    kiln__pool_for(3, 1, 64, count, &k); /* more threads than units */
    KT_CHECK(c[0] == 1 && c[1] == 1 && c[2] == 1 && !k.bad, "3 units on 64 threads: %d %d %d", c[0], c[1], c[2]);
    kiln__pool_for(0, 8, 2, count, &k); /* nothing to do */
    KT_CHECK(c[0] == 1 && !k.bad, "an empty job ran units");
}

static void *caller(void *arg) {
    *(int64_t *)arg = run_jobs(1500, (unsigned)(intptr_t)arg);
    return NULL;
}

KT_TEST(work_pool_two_callers) {
    int64_t wrong[2] = {0, 0};
    pthread_t t;
    KT_REQUIRE(pthread_create(&t, NULL, caller, &wrong[0]) == 0, "pthread_create");
    wrong[1] = run_jobs(1500, 99);
    pthread_join(t, NULL);
    KT_CHECK(wrong[0] == 0 && wrong[1] == 0, "units ran other than once: %lld, %lld", (long long)wrong[0],
             (long long)wrong[1]);
}

/* A forked child (the test runner forks per test) has no workers of its
 * parent's: its jobs still run every unit, on threads of its own. */
KT_TEST(work_pool_after_fork) {
    KT_CHECK(run_jobs(200, 3) == 0, "parent: units ran other than once");
    fflush(NULL);
    const pid_t pid = fork();
    KT_REQUIRE(pid >= 0, "fork");
    if (!pid) _exit(run_jobs(500, 5) == 0 ? 0 : 1);
    int st = 0;
    KT_REQUIRE(waitpid(pid, &st, 0) == pid, "waitpid");
    KT_CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child: units ran other than once (status %d)", st);
}
