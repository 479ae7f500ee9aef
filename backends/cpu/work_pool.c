/* work_pool.c — the persistent pool of work_pool.h.
 *
 * One job at a time (a caller holds `busy`). The caller publishes it under
 * a sequence number (odd while the fields are written, a seqlock), so a
 * worker reads a consistent copy or sees that it changed. Each range's
 * cursor holds the job's tag in its high 32 bits and the next unit in the
 * low ones: a worker claims a chunk by compare-and-swap only while the tag
 * is its job's, so a worker late for one job can never claim (or run with
 * the wrong arguments) a unit of the next. `done` counts the units run;
 * the caller returns once it reaches the total, without waiting for
 * workers that took nothing. */
#include "work_pool.h"

#include <pthread.h>
#include <sched.h>
#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define POOL_MAX 64 /* threads, the caller included */

typedef struct job {
    kiln_pool_fn *fn;
    void *arg;
    int64_t n, chunk;
    int nt;
    uint32_t tag;
} job;

typedef struct range {
    _Alignas(64) uint64_t cur; /* tag << 32 | next unit */
} range;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int n_workers; /* started; written under lock */
    int sleepers;
    uint64_t seq; /* odd while a job is being written */
    kiln_pool_fn *fn;
    void *arg;
    int64_t n, chunk;
    int nt;
    long spin_ns;
    range r[POOL_MAX];
    _Alignas(64) int64_t done;
    _Alignas(64) int busy;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER};

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claims and runs the chunks left in range r of job j; the units run. */
static int64_t drain(const job *j, int r) {
    const int64_t end = j->n * (r + 1) / j->nt;
    uint64_t *c = &P.r[r].cur;
    uint64_t v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
    int64_t ran = 0;
    for (;;) {
        const int64_t u0 = (int64_t)(uint32_t)v;
        if ((uint32_t)(v >> 32) != j->tag || u0 >= end) return ran;
        const int64_t u1 = end - u0 > j->chunk ? u0 + j->chunk : end;
        if (!__atomic_compare_exchange_n(c, &v, (v & ~(uint64_t)0xffffffff) | (uint64_t)u1, false, __ATOMIC_ACQ_REL,
                                         __ATOMIC_ACQUIRE))
            continue;
        j->fn(j->arg, u0, u1);
        ran += u1 - u0;
        v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
    }
}

/* Thread `me`'s own range first, then the others' in turn; the units run
 * are counted into `done` once at the end (a shared counter written at
 * every chunk would bounce between the cores). */
static void work(const job *j, int me) {
    int64_t ran = 0;
    for (int k = 0; k < j->nt; k++) ran += drain(j, (me + k) % j->nt);
    if (ran) __atomic_fetch_add(&P.done, ran, __ATOMIC_RELEASE);
}

/* The next even sequence number after `seen`: spinning for spin_ns, then
 * asleep until the caller's broadcast. */
static uint64_t wait_job(uint64_t seen) {
    const int64_t t0 = now_ns();
    for (unsigned i = 1;; i++) {
        const uint64_t s = __atomic_load_n(&P.seq, __ATOMIC_ACQUIRE);
        if (s != seen && !(s & 1)) return s;
        if (!(i & 255) && now_ns() - t0 >= P.spin_ns) break;
        cpu_relax();
    }
    uint64_t s;
    pthread_mutex_lock(&P.lock);
    __atomic_add_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
    while ((s = __atomic_load_n(&P.seq, __ATOMIC_SEQ_CST)) == seen || (s & 1)) pthread_cond_wait(&P.wake, &P.lock);
    __atomic_sub_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_unlock(&P.lock);
    return s;
}

static void *worker(void *p) {
    const int me = (int)(intptr_t)p;
    uint64_t seen = 0;
    for (;;) {
        const uint64_t s = seen = wait_job(seen);
        job j = {__atomic_load_n(&P.fn, __ATOMIC_RELAXED), __atomic_load_n(&P.arg, __ATOMIC_RELAXED),
                 __atomic_load_n(&P.n, __ATOMIC_RELAXED),  __atomic_load_n(&P.chunk, __ATOMIC_RELAXED),
                 __atomic_load_n(&P.nt, __ATOMIC_RELAXED), (uint32_t)(s >> 1)};
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&P.seq, __ATOMIC_RELAXED) != s) continue; /* a newer job came: look again */
        if (me < j.nt) work(&j, me);
    }
    return NULL;
}

/* A child of fork() has none of the parent's workers: it starts afresh
 * (lock and sleepers reset, in case a worker held them at the fork). */
static void after_fork_child(void) {
    pthread_mutex_init(&P.lock, NULL);
    pthread_cond_init(&P.wake, NULL);
    P.n_workers = P.sleepers = P.busy = 0;
}

/* At least k workers running (fewer where threads cannot be made). */
static int ensure_workers(int k) {
    if (__atomic_load_n(&P.n_workers, __ATOMIC_ACQUIRE) >= k) return k;
    pthread_mutex_lock(&P.lock);
    if (!P.n_workers) {
        const char *e = getenv("KILN_POOL_SPIN_US"), *w = getenv("OMP_WAIT_POLICY");
        long us = e ? atol(e) : w && (w[0] == 'p' || w[0] == 'P') ? 0 : 200;
        P.spin_ns = us > 0 ? us * 1000 : 0;
        static bool atfork;
        if (!atfork) atfork = !pthread_atfork(NULL, NULL, after_fork_child);
    }
    while (P.n_workers < k) {
        pthread_t t;
        pthread_attr_t a;
        if (pthread_attr_init(&a)) break;
        pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
        const int rc = pthread_create(&t, &a, worker, (void *)(intptr_t)(P.n_workers + 1));
        pthread_attr_destroy(&a);
        if (rc) break;
        __atomic_store_n(&P.n_workers, P.n_workers + 1, __ATOMIC_RELEASE);
    }
    const int have = P.n_workers;
    pthread_mutex_unlock(&P.lock);
    return have < k ? have : k;
}

void kiln__pool_for(int64_t n_units, int64_t chunk, int n_threads, kiln_pool_fn *fn, void *arg) {
    if (n_units <= 0) return;
    if (chunk < 1) chunk = 1;
    int nt = n_threads < POOL_MAX ? n_threads : POOL_MAX;
    if (nt > (n_units + chunk - 1) / chunk) nt = (int)((n_units + chunk - 1) / chunk);
    if (nt <= 1 || n_units > INT32_MAX || __atomic_exchange_n(&P.busy, 1, __ATOMIC_ACQUIRE)) {
        fn(arg, 0, n_units);
        return;
    }
    nt = ensure_workers(nt - 1) + 1;
    if (nt <= 1) {
        __atomic_store_n(&P.busy, 0, __ATOMIC_RELEASE);
        fn(arg, 0, n_units);
        return;
    }
    const uint64_t s = P.seq + 2; /* only the holder of busy writes seq */
    const job j = {fn, arg, n_units, chunk, nt, (uint32_t)(s >> 1)};
    __atomic_store_n(&P.seq, s - 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&P.fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&P.arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&P.n, n_units, __ATOMIC_RELAXED);
    __atomic_store_n(&P.chunk, chunk, __ATOMIC_RELAXED);
    __atomic_store_n(&P.nt, nt, __ATOMIC_RELAXED);
    __atomic_store_n(&P.done, 0, __ATOMIC_RELAXED);
    for (int r = 0; r < nt; r++)
        __atomic_store_n(&P.r[r].cur, (uint64_t)j.tag << 32 | (uint64_t)(n_units * r / nt), __ATOMIC_RELAXED);
    __atomic_store_n(&P.seq, s, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&P.sleepers, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.lock);
    }
    work(&j, 0);
    /* chunks a worker claimed and is still running (it may have lost its
     * core: yield now and then so that it gets one back) */
    for (unsigned i = 1; __atomic_load_n(&P.done, __ATOMIC_ACQUIRE) < n_units; i++) {
        if (!(i & 1023)) sched_yield();
        cpu_relax();
    }
    __atomic_store_n(&P.busy, 0, __ATOMIC_RELEASE);
}
