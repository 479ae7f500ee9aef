/* load.c — `kiln_bench --only load`: kiln on a loaded machine. A busy
 * process per core (nice 0, spinning; as a laptop's other work) runs while
 * a CNN training step (the quickstart's shape), a GPT training step and a
 * Q4_0 generation step run at the two thread counts (1 and 2), in
 * alternating blocks. The ratio is the second count's rate over the
 * first's, both under the same load: kiln's threads must never make it
 * slower (it was 0.16x with OpenMP's spinning threads, issue 21). */
#include "bench.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#if defined(__linux__)
#include <sys/prctl.h>
#endif

#define MAX_BUSY 256

/* One spinning child per online CPU; each dies with the bench. */
static int start_busy(pid_t *pids) {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    int n = cpus < 1 ? 1 : cpus > MAX_BUSY ? MAX_BUSY : (int)cpus;
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        bench_check(pids[i] >= 0, "fork");
        if (pids[i]) continue;
#if defined(__linux__)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
#endif
        for (volatile unsigned long x = 0;; x++) {
        }
    }
    return n;
}

static void stop_busy(const pid_t *pids, int n) {
    for (int i = 0; i < n; i++) kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++) waitpid(pids[i], NULL, 0);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* jobs[0] and jobs[1] called in turn, one call each, for about budget_s
 * (at least MIN_PAIRS pairs): the load drifts by the second, so each
 * pair sees the same; the report line of the medians. */
#define MIN_PAIRS 8
#define MAX_PAIRS 200
static void measure(const char *what, const bench_job *jobs, const int *threads, double budget_s, double per_step,
                    const char *unit) {
    static double t[2][MAX_PAIRS];
    int n = 0;
    for (int j = 0; j < 2; j++) jobs[j].fn(jobs[j].arg); /* warm-up */
    const double start = bench_now();
    while (n < MAX_PAIRS && (n < MIN_PAIRS || bench_now() - start < budget_s)) {
        for (int j = 0; j < 2; j++) {
            const double t0 = bench_now();
            jobs[j].fn(jobs[j].arg);
            t[j][n] = bench_now() - t0;
        }
        n++;
    }
    double med[2];
    for (int j = 0; j < 2; j++) {
        qsort(t[j], (size_t)n, sizeof(double), cmp_double);
        med[j] = n % 2 ? t[j][n / 2] : (t[j][n / 2 - 1] + t[j][n / 2]) / 2;
    }
    char name[64], ref[48];
    snprintf(name, sizeof name, "loaded %s %dt", what, threads[1]);
    snprintf(ref, sizeof ref, "%dt, loaded (%.1f)", threads[0], per_step / med[0]);
    bench_report(name, per_step / med[1], unit, per_step / med[0], ref);
}

void bench_load(const bench_opts *o) {
    const int threads[2] = {o->threads[0], o->n_threads > 1 ? o->threads[1] : 2};
    const int saved = kiln_get_threads();
    pid_t pids[MAX_BUSY];
    bench_job gen[2];
    bench_generate_jobs(threads, 2, gen); /* the model made before the load starts */
    const int busy = start_busy(pids);
    printf("# under load: %d busy processes (one per CPU, nice 0); ratio: %d threads over %d, alternating\n", busy,
           threads[1], threads[0]);
    static const char *const models[2] = {"cnn", "gpt"};
    for (int i = 0; i < 2; i++) {
        double per_step = 1, budget_s = 1;
        bench_job jobs[2];
        for (int t = 0; t < 2; t++) jobs[t] = bench_train_job(models[i], threads[t], &per_step, &budget_s);
        char what[32];
        snprintf(what, sizeof what, "train_%s", models[i]);
        measure(what, jobs, threads, 2 * budget_s * o->scale, per_step, i ? "tokens/s" : "steps/s");
        for (int t = 0; t < 2; t++) bench_train_job_free(&jobs[t]);
    }
    measure("generate q4_0", gen, threads, 6.0 * o->scale, 1, "tok/s");
    stop_busy(pids, busy);
    bench_generate_jobs_free(gen, 2);
    kiln_set_threads(saved);
}
