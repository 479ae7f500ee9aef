/* optim.c — optimizer step time (`--only optim`): kiln_optim_step on 10M and
 * 50M f32 parameters, as one matrix and as 100 matrices, for every
 * optimizer, as GB/s of the state + parameter traffic the step must move
 * against a plain threaded triad (a = b + s c, 3 arrays of 256 MiB, above
 * the 480 MiB cache) measured in the same run; and state bytes per param.
 *
 * Bytes counted per parameter (f32 p and grad; each array read or written
 * once, no write-allocate traffic, the same way the triad counts):
 *   SGD-momentum  read p g buf, write p buf           20
 *   Adam, AdamW   read p g m v, write p m v           28
 *   Lion          read p g m, write p m               20
 *   Adam8bit/W    read p g, write p (12) + 2 code bytes read and written (4)
 *                 + 2 absmax per 256 read and written (0.06)   16.06
 *   Lion8bit, SGD8bit  12 + 2 + 0.03                  14.03
 * plus 4 for every optimizer: kiln_optim_step zeroes the gradients after
 * the step (a separate pass writing g). The gradient is refilled from a
 * random copy before each step, untimed, so every step sees fresh data.
 * GaLore and APOLLO are matmul-bound (projections of each matrix): their
 * lines give ms per step against AdamW's ms on the same layout, and state
 * bytes per parameter. GaLore's refresh step (an SVD per matrix) is timed
 * apart: update_gap 3 makes steps 1 and 4 refreshes (1 untimed); the SVD cost is the
 * refresh step minus a plain step, amortized over the default gap (200).
 * GaLore runs on the 100-matrix layout only (one 7072^2 SVD takes most of a
 * minute on 2 cores), and only in BLAS builds.
 *
 * Memory: at 50M parameters p, g, the gradient copy and Adam's moments are
 * 1 GB; one optimizer (and its context) lives at a time. The whole run takes
 * about 2 minutes on 2 idle cores (--quick: 50M as one matrix, fewer repetitions). Threads:
 * the largest count of --threads. On one-matrix layouts the 8-bit steps
 * are also run with the caps limited to scalar code (KILN_SIMD=scalar), the
 * portable loops, against the vector kernels in the same run. The
 * 100-matrix layouts run 200 threaded ops a step (each step op and each
 * gradient zeroing); on a machine loaded by other processes every one waits
 * for a descheduled thread (seen here: ~8 ms per op at load 8 on 2 cores),
 * so read those lines only from an idle machine. */
#include "bench.h"
#include "cpu_features.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TRIAD_MIB 256

typedef enum {
    O_SGD, O_ADAM, O_ADAMW, O_LION, O_ADAM8, O_ADAMW8, O_LION8, O_SGD8, O_GALORE, O_APOLLO, O_APOLLO_MINI, O_COUNT
} opt_kind;

static const struct {
    const char *name;
    double bytes; /* per parameter per step, grad zeroing included; 0: matmul-bound */
} opts[O_COUNT] = {
    [O_SGD] = {"sgd-momentum", 24},      [O_ADAM] = {"adam", 32},
    [O_ADAMW] = {"adamw", 32},           [O_LION] = {"lion", 24},
    [O_ADAM8] = {"adam8bit", 20.0625},   [O_ADAMW8] = {"adamw8bit", 20.0625},
    [O_LION8] = {"lion8bit", 18.03125},  [O_SGD8] = {"sgd8bit", 18.03125},
    [O_GALORE] = {"galore-adamw", 0},    [O_APOLLO] = {"apollo", 0},
    [O_APOLLO_MINI] = {"apollo-mini", 0},
};

static kiln_optim *make_opt(kiln_ctx *ctx, opt_kind k) {
    kiln_sgd_config sgd = {.lr = 1e-3f, .momentum = 0.9f};
    kiln_adam_config adam = kiln_adam_defaults(), adamw = kiln_adamw_defaults();
    kiln_lion_config lion = kiln_lion_defaults();
    switch (k) {
    case O_SGD: return kiln_sgd_new(ctx, &sgd);
    case O_ADAM: return kiln_adam_new(ctx, &adam);
    case O_ADAMW: return kiln_adamw_new(ctx, &adamw);
    case O_LION: return kiln_lion_new(ctx, &lion);
    case O_ADAM8: return kiln_adam8bit_new(ctx, &adam);
    case O_ADAMW8: return kiln_adamw8bit_new(ctx, &adamw);
    case O_LION8: return kiln_lion8bit_new(ctx, &lion);
    case O_SGD8: return kiln_sgd8bit_new(ctx, &sgd);
    case O_GALORE: {
        kiln_galore_config c = kiln_galore_defaults();
        c.update_gap = 3;
        return kiln_galore_adamw_new(ctx, &c);
    }
    case O_APOLLO: {
        kiln_apollo_config c = kiln_apollo_defaults();
        return kiln_apollo_new(ctx, &c);
    }
    case O_APOLLO_MINI: {
        kiln_apollo_config c = kiln_apollo_mini_defaults();
        return kiln_apollo_new(ctx, &c);
    }
    case O_COUNT: break;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* uniform [-1, 1) from a xorshift: the parameters and gradient copy */
static void fill_random(float *x, int64_t n, uint64_t seed) {
    uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        x[i] = (float)(int32_t)(s >> 32) * (1.0f / 2147483648.0f);
    }
}

/* The triad's GB/s (3 arrays), median of reps, with nt threads. */
static double triad_gbs(int nt, int reps) {
    bench_triad tr = bench_triad_new((int64_t)TRIAD_MIB << 18);
    tr.nt = nt;
    double t[16];
    for (int r = 0; r <= reps; r++) {
        double t0 = bench_now();
        bench_triad_run(&tr);
        if (r > 0) t[r - 1] = bench_now() - t0; /* the first is a warm-up */
    }
    double gbs = bench_triad_gbs(&tr, median(t, reps));
    bench_triad_free(&tr);
    struct timespec settle = {0, 150000000}; /* the OpenMP team stops spinning before the steps */
    nanosleep(&settle, NULL);
    return gbs;
}

typedef struct layout {
    const char *name;
    int count;          /* matrices */
    int64_t rows, cols; /* each */
} layout;

typedef struct result {
    double step_s;    /* median plain step */
    double refresh_s; /* GaLore: median refresh step (SVD included) */
    double state_bpp; /* state bytes per parameter */
} result;

/* One optimizer on one layout: its own context, freed before the next. */
static bool run_one(opt_kind k, const layout *L, const float *gsrc, int reps, result *res) {
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx != NULL, "kiln_ctx_new");
    int64_t per = L->rows * L->cols, n = per * L->count;
    kiln_tensor **g = malloc((size_t)L->count * sizeof *g);
    bench_check(g != NULL, "out of memory");
    for (int i = 0; i < L->count; i++) {
        char name[32];
        snprintf(name, sizeof name, "w%d", i);
        kiln_tensor *p = kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){L->rows, L->cols});
        bench_check(p != NULL, "kiln_param");
        memcpy(kiln_tensor_data(p), gsrc + (int64_t)i * per, (size_t)per * 4); /* any values */
        g[i] = kiln_tensor_grad(p);
    }
    kiln_optim *opt = make_opt(ctx, k);
    if (!opt) { /* e.g. GaLore without LAPACK */
        kiln_ctx_free(ctx);
        free(g);
        return false;
    }
    /* galore: steps 1, 4, 7, ... refresh (update_gap 3); others: step 1 warms up */
    bool galore = k == O_GALORE;
    int total = galore ? 5 : reps + 1;
    double plain[32], refresh[8];
    int np = 0, nr = 0;
    for (int s = 1; s <= total; s++) {
        for (int i = 0; i < L->count; i++) memcpy(kiln_tensor_data(g[i]), gsrc + (int64_t)i * per, (size_t)per * 4);
        double t0 = bench_now();
        bench_check(kiln_optim_step(opt) == KILN_OK, "kiln_optim_step");
        double dt = bench_now() - t0;
        if (s == 1) continue;
        if (galore && (s - 1) % 3 == 0)
            refresh[nr++] = dt;
        else
            plain[np++] = dt;
    }
    res->step_s = median(plain, np);
    res->refresh_s = nr ? median(refresh, nr) : 0;
    res->state_bpp = (double)kiln_optim_state_bytes(opt) / (double)n;
    kiln_ctx_free(ctx);
    free(g);
    return true;
}

void bench_optim(const bench_opts *o) {
    int nt = o->threads[o->n_threads - 1];
    bool quick = o->scale < 1.0;
    int reps = quick ? 3 : 5;
    kiln_set_threads(nt);
    const layout layouts[2][2] = {
        {{"1x[3200,3125]", 1, 3200, 3125}, {"100x[320,312]", 100, 320, 312}},
        {{"1x[7072,7072]", 1, 7072, 7072}, {"100x[708,706]", 100, 708, 706}},
    };
    int64_t most = 0; /* the random values every layout copies from */
    for (int si = 0; si < 2; si++)
        for (int li = 0; li < 2; li++) {
            const layout *L = &layouts[si][li];
            if (L->rows * L->cols * L->count > most) most = L->rows * L->cols * L->count;
        }
    float *gsrc = malloc((size_t)most * 4);
    bench_check(gsrc != NULL, "out of memory");
    fill_random(gsrc, most, 7);
    for (int si = quick ? 1 : 0; si < 2; si++)
        for (int li = 0; li < (quick ? 1 : 2); li++) {
            const layout *L = &layouts[si][li];
            int64_t n = L->rows * L->cols * L->count;
            double triad = triad_gbs(nt, 5), adamw_s = 0;
            printf("# optimizer step: %.1fM f32 params as %s, %d threads; triad %.1f GB/s (3 x %d MiB)%s\n",
                   (double)n * 1e-6, L->name, nt, triad, TRIAD_MIB,
                   si == 0 ? "; cache-bound (working set < 480 MiB LLC)" : "");
            for (int k = 0; k < O_COUNT; k++) {
                if (k == O_GALORE && L->count == 1) continue; /* one huge SVD: see the top comment */
                result r;
                char name[64];
                if (!run_one((opt_kind)k, L, gsrc, reps, &r)) {
                    printf("%-34s      -  (%s)\n", opts[k].name, kiln_last_error());
                    continue;
                }
                if (k == O_ADAMW) adamw_s = r.step_s;
                snprintf(name, sizeof name, "%s %s", opts[k].name, si ? "50M" : "10M");
                if (opts[k].bytes > 0)
                    bench_report(name, opts[k].bytes * (double)n / r.step_s * 1e-9, "GB/s", triad, "triad");
                else
                    bench_report(name, r.step_s * 1e3, "ms/step", adamw_s * 1e3, "adamw ms/step");
                snprintf(name, sizeof name, "%s %s step", opts[k].name, si ? "50M" : "10M");
                if (opts[k].bytes > 0) bench_report(name, r.step_s * 1e3, "ms", 0, "median");
                /* bench_report's one decimal would show APOLLO-Mini's state as 0.0 */
                snprintf(name, sizeof name, "%s state", opts[k].name);
                printf("%-34s kiln %9.4f %-9s      -  (%s)\n", name, r.state_bpp, "B/param",
                       k == O_ADAM8 || k == O_ADAMW8 ? "goal <= 2.1"
                       : k == O_APOLLO_MINI         ? "goal <= 0.01 on large matrices"
                                                    : "state bytes / param");
                if (k >= O_ADAM8 && k <= O_SGD8 && L->count == 1 && kiln__cpu_caps()->level > KILN_SIMD_SCALAR) {
                    kiln_cpu_caps saved = *kiln__cpu_caps(), c = saved;
                    kiln__cpu_caps_limit(&c, KILN_SIMD_SCALAR);
                    kiln__cpu_caps_set(&c);
                    result rs;
                    bool ok = run_one((opt_kind)k, L, gsrc, reps, &rs);
                    kiln__cpu_caps_set(&saved);
                    snprintf(name, sizeof name, "%s %s scalar step", opts[k].name, si ? "50M" : "10M");
                    if (ok) bench_report(name, rs.step_s * 1e3, "ms", r.step_s * 1e3, "vector ms");
                }
                if (k == O_GALORE) {
                    double svd = r.refresh_s - r.step_s;
                    bench_report("galore refresh step (SVD)", r.refresh_s * 1e3, "ms", r.step_s * 1e3, "plain step");
                    bench_report("galore SVD amortized /200", svd / 200 * 1e3, "ms/step", r.step_s * 1e3,
                                 "plain step");
                }
            }
        }
    free(gsrc);
}
