/* bench.c — timing (medians over alternating blocks of each job), report lines and the PyTorch
 * reference table of `make bench` (see bench.h). */
#include "bench.h"
#include "pool.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

double bench_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

#define ROUNDS 3
#define SETTLE_S 0.15 /* OpenBLAS's idle pool spins about 0.1 s after a call */
#define WARM_S 0.02   /* then untimed calls: a vCPU idle since the settle can take ms to wake */

static void settle(void) {
    struct timespec ts = {0, (long)(SETTLE_S * 1e9)};
    nanosleep(&ts, NULL);
}

void bench_measure(const bench_job *jobs, int n_jobs, int min_reps, int max_reps, double budget_s, double *med) {
    double *t = malloc((size_t)n_jobs * (size_t)max_reps * sizeof *t);
    int *n = calloc((size_t)n_jobs, sizeof *n);
    bench_check(t && n, "out of memory");
    double start = bench_now();
    for (int j = 0; j < n_jobs; j++) jobs[j].fn(jobs[j].arg);
    /* a warm-up round longer than twice the budget: one timed call each */
    bool one = bench_now() - start > 2 * budget_s;
    int per_block = one ? 1 : (max_reps + ROUNDS - 1) / ROUNDS, min_block = one ? 1 : (min_reps + ROUNDS - 1) / ROUNDS;
    double block_s = budget_s / (ROUNDS * n_jobs);
    for (int r = 0; r < (one ? 1 : ROUNDS); r++)
        for (int j = 0; j < n_jobs; j++) {
            if (n_jobs > 1) { /* the other job's threads go idle, then untimed calls */
                settle();
                for (double w0 = bench_now(); !one;) {
                    jobs[j].fn(jobs[j].arg);
                    if (bench_now() - w0 > WARM_S) break;
                }
            }
            double b0 = bench_now();
            for (int k = 0; k < per_block && n[j] < max_reps && (k < min_block || bench_now() - b0 < block_s); k++) {
                double t0 = bench_now();
                jobs[j].fn(jobs[j].arg);
                t[j * max_reps + n[j]++] = bench_now() - t0;
            }
        }
    for (int j = 0; j < n_jobs; j++) med[j] = median(t + j * max_reps, n[j]);
    free(t);
    free(n);
}

void bench_report(const char *name, double value, const char *unit, double ref_value, const char *ref_name) {
    int digits = value < 10 ? 3 : 1; /* a slow training step's steps/s */
    if (ref_value > 0)
        printf("%-34s kiln %9.*f %-9s %6.2fx %s\n", name, digits, value, unit, value / ref_value, ref_name);
    else
        printf("%-34s kiln %9.*f %-9s      -  (%s)\n", name, digits, value, unit, ref_name);
    fflush(stdout);
}

void bench_check(bool ok, const char *what) {
    if (ok) return;
    fprintf(stderr, "bench: %s: %s\n", what, kiln_last_error());
    exit(1);
}

bench_triad bench_triad_new(int64_t n) {
    bench_triad t = {aligned_alloc(64, (size_t)n * 4), aligned_alloc(64, (size_t)n * 4),
                     aligned_alloc(64, (size_t)n * 4), n, 1};
    bench_check(t.a && t.b && t.c, "out of memory for the triad");
    for (int64_t i = 0; i < n; i++) t.a[i] = t.b[i] = t.c[i] = 1.0f;
    return t;
}

/* elements [i0, i1) of the triad, on kiln's pool as the kernels run */
static void triad_range(void *p, int64_t i0, int64_t i1, int tid) {
    bench_triad *t = p;
    float *restrict a = t->a;
    const float *restrict b = t->b, *restrict c = t->c;
    (void)tid;
#pragma omp simd
    for (int64_t i = i0; i < i1; i++) a[i] = b[i] + 0.5f * c[i];
}

void bench_triad_run(void *p) {
    bench_triad *t = p;
    kiln__pool_for(t->n, 1 << 16, t->nt, triad_range, t);
}

double bench_triad_gbs(const bench_triad *t, double s) { return 3.0 * (double)t->n * 4 / s * 1e-9; }

void bench_triad_free(bench_triad *t) {
    free(t->a);
    free(t->b);
    free(t->c);
}

/* ---- PyTorch's figures ---- */

#define MAX_REFS 64
static struct {
    char key[64];
    double value;
} refs[MAX_REFS];
static int n_refs;
static char note[256] = "no PyTorch figures (run through bench/run.sh)";

bool bench_torch_load(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        snprintf(note, sizeof note, "no PyTorch figures: cannot read %.200s", path);
        return false;
    }
    char line[512];
    while (fgets(line, sizeof line, f)) {
        char key[64];
        double v;
        if (strncmp(line, "note ", 5) == 0) {
            line[strcspn(line, "\n")] = 0;
            snprintf(note, sizeof note, "%.200s", line + 5);
        } else if (sscanf(line, "ref %63s %lf", key, &v) == 2 && n_refs < MAX_REFS) {
            snprintf(refs[n_refs].key, sizeof refs[n_refs].key, "%s", key);
            refs[n_refs++].value = v;
        }
    }
    fclose(f);
    if (n_refs > 0) snprintf(note, sizeof note, "PyTorch figures from %.200s", path);
    return n_refs > 0;
}

double bench_torch(const char *key) {
    for (int i = 0; i < n_refs; i++)
        if (strcmp(refs[i].key, key) == 0) return refs[i].value;
    return 0;
}

const char *bench_torch_note(void) { return note; }
