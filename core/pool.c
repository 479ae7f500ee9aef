/* pool.c — the persistent pool of pool.h.
 *
 * One loop at a time: its caller holds `busy`. The caller publishes the
 * loop under a sequence number (odd while the fields are written, a
 * seqlock), so a worker reads a consistent copy or sees that it changed.
 * Each thread's range of chunks has a cursor holding the loop's tag in its
 * high 32 bits and the next chunk in the low ones: a worker claims a chunk
 * by compare-and-swap only while the tag is its loop's, so a worker late
 * for one loop can never claim (or run with the wrong arguments) a chunk
 * of the next. `done` counts the chunks run, added once per thread per
 * loop (a counter written at every chunk would bounce between the cores);
 * the caller returns once it reaches the total, without waiting for
 * workers that took nothing.
 *
 * Waiting, measured on a 2-core machine with other work on both cores:
 *   - no sched_yield: under EEVDF a yield pushes the thread's deadline back
 *     a whole slice (milliseconds), and with it the loop (generation with
 *     a busy process per core: 0.91x of 1 thread with yields, 1.1-1.6x
 *     without);
 *   - a worker spins (pause) up to SPIN_NS for the next loop, a caller up
 *     to two of its own chunks' time (and WAIT_MIN_NS) for the workers'
 *     last chunks; then they sleep (condition variables): the loops of a
 *     training step come back to back, and a wake-up for each took the
 *     2-thread MLP step from 1.6x to 0.8x of 1 thread. */
#include "pool.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__linux__)
#include <unistd.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield")
#else
#define cpu_relax() ((void)0)
#endif

#define CHUNKS_PER_THREAD 8   /* a late thread's share is small, claims are few */
#define SPIN_NS 100000        /* a worker's spin for the next loop */
#define WAIT_MIN_NS 50000     /* a caller's spin beyond two of its chunks */
#define WAIT_MAX_NS 500000

typedef struct job {
    kiln_pool_fn *fn;
    void *arg;
    int64_t n, chunk, chunks;
    int nt;
    uint32_t tag;
} job;

typedef struct range {
    _Alignas(64) uint64_t cur; /* tag << 32 | next chunk */
} range;

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake, finished;
    int n_workers; /* started; written under lock */
    int sleepers, caller_asleep;
    uint64_t seq; /* odd while a loop is being written */
    kiln_pool_fn *fn;
    void *arg;
    int64_t n, chunk, chunks;
    int nt;
    range r[KILN_MAX_THREADS];
    _Alignas(64) int64_t done;
    _Alignas(64) int busy;
} P = {.lock = PTHREAD_MUTEX_INITIALIZER, .wake = PTHREAD_COND_INITIALIZER, .finished = PTHREAD_COND_INITIALIZER};

static _Thread_local bool inside; /* running a loop's chunks (workers: always) */

bool kiln__pool_inside(void) { return inside; }

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

/* Claims and runs the chunks left in range r of loop j; the chunks run. */
static int64_t drain(const job *j, int r, int me) {
    const int64_t end = j->chunks * (r + 1) / j->nt;
    uint64_t *c = &P.r[r].cur;
    uint64_t v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
    int64_t ran = 0;
    for (;;) {
        const int64_t k = (int64_t)(uint32_t)v;
        if ((uint32_t)(v >> 32) != j->tag || k >= end) return ran;
        if (!__atomic_compare_exchange_n(c, &v, v + 1, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) continue;
        const int64_t i0 = k * j->chunk, i1 = i0 + j->chunk < j->n ? i0 + j->chunk : j->n;
        j->fn(j->arg, i0, i1, me);
        ran++;
        v = __atomic_load_n(c, __ATOMIC_ACQUIRE);
    }
}

/* Thread me's own range first, then the others' in turn; the chunks run
 * are counted into done once, and the caller woken if it sleeps on the
 * last of them. */
static int64_t work(const job *j, int me) {
    int64_t ran = 0;
    for (int k = 0; k < j->nt; k++) ran += drain(j, (me + k) % j->nt, me);
    if (ran && __atomic_add_fetch(&P.done, ran, __ATOMIC_SEQ_CST) == j->chunks && me &&
        __atomic_load_n(&P.caller_asleep, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_signal(&P.finished);
        pthread_mutex_unlock(&P.lock);
    }
    return ran;
}

/* Spins (pausing) until ready() or spin_ns; whether ready() came true. */
static bool spin(bool (*ready)(uint64_t), uint64_t arg, int64_t spin_ns) {
    const int64_t t0 = now_ns();
    for (unsigned i = 1;; i++) {
        if (ready(arg)) return true;
        cpu_relax();
        if (!(i & 31) && now_ns() - t0 >= spin_ns) return ready(arg);
    }
}

static bool new_job(uint64_t seen) {
    const uint64_t s = __atomic_load_n(&P.seq, __ATOMIC_ACQUIRE);
    return s != seen && !(s & 1);
}

/* The next complete loop's sequence number after `seen`. */
static uint64_t wait_job(uint64_t seen) {
    if (!spin(new_job, seen, SPIN_NS)) {
        pthread_mutex_lock(&P.lock);
        __atomic_add_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
        while (!new_job(seen)) pthread_cond_wait(&P.wake, &P.lock);
        __atomic_sub_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&P.lock);
    }
    return __atomic_load_n(&P.seq, __ATOMIC_ACQUIRE);
}

static void *worker(void *p) {
    const int me = (int)(intptr_t)p;
    inside = true;
    uint64_t seen = 0;
    for (;;) {
        const uint64_t s = seen = wait_job(seen);
        job j = {__atomic_load_n(&P.fn, __ATOMIC_RELAXED),     __atomic_load_n(&P.arg, __ATOMIC_RELAXED),
                 __atomic_load_n(&P.n, __ATOMIC_RELAXED),      __atomic_load_n(&P.chunk, __ATOMIC_RELAXED),
                 __atomic_load_n(&P.chunks, __ATOMIC_RELAXED), __atomic_load_n(&P.nt, __ATOMIC_RELAXED),
                 (uint32_t)(s >> 1)};
        __atomic_thread_fence(__ATOMIC_ACQUIRE);
        if (__atomic_load_n(&P.seq, __ATOMIC_RELAXED) != s) continue; /* a newer loop came: look again */
        if (me < j.nt) work(&j, me);
    }
    return NULL;
}

/* A child of fork() has none of the parent's workers: it starts afresh
 * (lock, conditions and counts reset, in case a worker held them at the
 * fork). */
static void after_fork_child(void) {
    pthread_mutex_init(&P.lock, NULL);
    pthread_cond_init(&P.wake, NULL);
    pthread_cond_init(&P.finished, NULL);
    P.n_workers = P.sleepers = P.caller_asleep = P.busy = 0;
}

/* At least k workers running (fewer where threads cannot be made). */
static int ensure_workers(int k) {
    if (__atomic_load_n(&P.n_workers, __ATOMIC_ACQUIRE) >= k) return k;
    pthread_mutex_lock(&P.lock);
    static bool atfork;
    if (!atfork) atfork = !pthread_atfork(NULL, NULL, after_fork_child);
    /* workers block every signal (they inherit the mask): the
     * application's handlers run on its own threads */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
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
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    const int have = P.n_workers;
    pthread_mutex_unlock(&P.lock);
    return have < k ? have : k;
}

static bool all_done(uint64_t chunks) { return __atomic_load_n(&P.done, __ATOMIC_ACQUIRE) >= (int64_t)chunks; }

void kiln__pool_for(int64_t n, int64_t grain, int n_threads, kiln_pool_fn *fn, void *arg) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    int nt = n_threads < KILN_MAX_THREADS ? n_threads : KILN_MAX_THREADS;
    if (nt > 1 && (n - 1) / grain + 1 < nt) nt = (int)((n - 1) / grain + 1);
    if (nt <= 1 || inside || __atomic_exchange_n(&P.busy, 1, __ATOMIC_ACQUIRE)) {
        fn(arg, 0, n, 0);
        return;
    }
    nt = ensure_workers(nt - 1) + 1;
    if (nt <= 1) {
        __atomic_store_n(&P.busy, 0, __ATOMIC_RELEASE);
        fn(arg, 0, n, 0);
        return;
    }
    int64_t chunk = (n - 1) / ((int64_t)nt * CHUNKS_PER_THREAD) + 1;
    if (chunk < grain) chunk = grain;
    const int64_t chunks = (n - 1) / chunk + 1;
    const uint64_t s = P.seq + 2; /* only the holder of busy writes seq */
    const job j = {fn, arg, n, chunk, chunks, nt, (uint32_t)(s >> 1)};
    __atomic_store_n(&P.seq, s - 1, __ATOMIC_RELAXED);
    __atomic_thread_fence(__ATOMIC_RELEASE);
    __atomic_store_n(&P.fn, fn, __ATOMIC_RELAXED);
    __atomic_store_n(&P.arg, arg, __ATOMIC_RELAXED);
    __atomic_store_n(&P.n, n, __ATOMIC_RELAXED);
    __atomic_store_n(&P.chunk, chunk, __ATOMIC_RELAXED);
    __atomic_store_n(&P.chunks, chunks, __ATOMIC_RELAXED);
    __atomic_store_n(&P.nt, nt, __ATOMIC_RELAXED);
    __atomic_store_n(&P.done, 0, __ATOMIC_RELAXED);
    for (int r = 0; r < nt; r++)
        __atomic_store_n(&P.r[r].cur, (uint64_t)j.tag << 32 | (uint64_t)(chunks * r / nt), __ATOMIC_RELAXED);
    __atomic_store_n(&P.seq, s, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&P.sleepers, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&P.lock);
        pthread_cond_broadcast(&P.wake);
        pthread_mutex_unlock(&P.lock);
    }
    inside = true;
    const int64_t t0 = now_ns(), ran = work(&j, 0);
    inside = false;
    /* chunks that workers claimed and still run: as long as two of the
     * caller's own chunks took, then asleep */
    int64_t wait_ns = ran ? 2 * (now_ns() - t0) / ran + WAIT_MIN_NS : WAIT_MIN_NS;
    if (wait_ns > WAIT_MAX_NS) wait_ns = WAIT_MAX_NS;
    if (!spin(all_done, (uint64_t)chunks, wait_ns)) {
        pthread_mutex_lock(&P.lock);
        __atomic_store_n(&P.caller_asleep, 1, __ATOMIC_SEQ_CST);
        while (!all_done((uint64_t)chunks)) pthread_cond_wait(&P.finished, &P.lock);
        __atomic_store_n(&P.caller_asleep, 0, __ATOMIC_SEQ_CST);
        pthread_mutex_unlock(&P.lock);
    }
    __atomic_store_n(&P.busy, 0, __ATOMIC_RELEASE);
}

/* ---- the default thread count ---- */

#if defined(__linux__)
/* Distinct cores among the CPUs of this process's affinity mask: SMT
 * siblings share a core's units, and for kiln's kernels (vector FMAs,
 * memory streams) a second thread on a core adds little and costs a
 * thread to wait for. 0 where the topology cannot be read. */
static int cores_in_mask(const cpu_set_t *set) {
    enum { MAX_CPU = CPU_SETSIZE };
    unsigned char seen[MAX_CPU];
    int cores = 0;
    memset(seen, 0, sizeof seen);
    for (int c = 0; c < MAX_CPU; c++) {
        if (!CPU_ISSET(c, set) || seen[c]) continue;
        char path[96], list[256];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/thread_siblings_list", c);
        FILE *f = fopen(path, "r");
        if (!f) return 0;
        const bool ok = fgets(list, sizeof list, f) != NULL;
        fclose(f);
        if (!ok) return 0;
        /* "0,4" or "0-1": mark every sibling so that the core counts once */
        for (char *p = list; *p && *p != '\n';) {
            char *e;
            long a = strtol(p, &e, 10), b = a;
            if (e == p) return 0;
            if (*e == '-') b = strtol(e + 1, &e, 10);
            for (long x = a; x <= b && x < MAX_CPU; x++)
                if (x >= 0) seen[x] = 1;
            p = *e == ',' ? e + 1 : e;
        }
        cores++;
    }
    return cores;
}
#endif

int kiln__pool_default_threads(void) {
    int n = 0;
#if defined(__linux__)
    cpu_set_t set;
    if (!sched_getaffinity(0, sizeof set, &set)) {
        n = cores_in_mask(&set);
        if (n <= 0) n = CPU_COUNT(&set);
    }
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
#endif
    if (n < 1) n = 1;
    return n < KILN_MAX_THREADS ? n : KILN_MAX_THREADS;
}
