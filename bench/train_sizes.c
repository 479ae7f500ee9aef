/* train_sizes.c — training at the sizes people train, against PyTorch
 * running the same models (bench/torch_ref.py --only sizes):
 *
 *   resnet18 b32, b128   models/resnet's ResNet-18 for 3x32x32 (BatchNorm),
 *                        batch 32 and 128, SGD (lr 0.1, momentum 0.9,
 *                        weight decay 5e-4)
 *   gpt512, gpt768       models/gpt's GPT-2: 6 layers, width 512 (8 heads)
 *                        and 768 (12 heads), context 256, batch 8, vocab
 *                        256, AdamW (lr 3e-4)
 *   gpt512_bf16          gpt512 under kiln_set_matmul_precision's bf16 mode
 *                        (f32 master weights, bf16 products), against
 *                        kiln's f32 gpt512 line of the same run
 *
 * steps/s and peak RSS at each thread count. Each line runs in a process of
 * its own (this program again, with --size-line), so that its peak RSS
 * (wait4's ru_maxrss) is that line's alone: its model, graph, optimizer and
 * the program, nothing another line left behind. A line times one warm-up
 * step and then STEPS steps, and reports the median; the RSS ratio is
 * kiln / PyTorch (below 1: kiln uses less). */
#include "bench.h"
#include "gpt.h"
#include "resnet.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define STEPS 3

typedef struct size_line {
    const char *name; /* also the PyTorch keys' middle: train_<name>_<N>t, rss_<name>_<N>t */
    bool is_gpt;
    int64_t batch, width;
    bool bf16; /* KILN_MATMUL_BF16, compared with the line before it */
} size_line;

static const size_line lines[] = {
    {"resnet18_b32", false, 32, 0, false},
    {"resnet18_b128", false, 128, 0, false},
    {"gpt512", true, 8, 512, false},
    {"gpt512_bf16", true, 8, 512, true},
    {"gpt768", true, 8, 768, false},
};

enum { GPT_LAYERS = 6, GPT_CONTEXT = 256 };

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static void fill_labels(kiln_tensor *t, int classes, uint64_t seed) {
    int64_t n = kiln_tensor_numel(t);
    int32_t *v = malloc((size_t)n * sizeof *v);
    bench_check(v != NULL, "out of memory");
    for (int64_t i = 0; i < n; i++) v[i] = (int32_t)((seed + (uint64_t)i * 2654435761u) % (uint64_t)classes);
    bench_check(kiln_tensor_set_i32(t, v, n) == KILN_OK, "labels");
    free(v);
}

/* The child: build the line's model and graph, run it, print the median
 * seconds of a step. */
static int run_line(const size_line *l, int nt) {
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx != NULL, "context");
    kiln_set_threads(nt);
    if (l->bf16) bench_check(kiln_set_matmul_precision(KILN_MATMUL_BF16) == KILN_OK, "bf16 matmuls");
    model_graph g;
    kiln_optim *opt;
    if (l->is_gpt) {
        gpt_config c = gpt_defaults();
        c.layers = GPT_LAYERS, c.context = GPT_CONTEXT, c.width = l->width, c.heads = l->width / 64;
        gpt *m = gpt_new(ctx, &c, 1);
        bench_check(m && gpt_train_graph(m, l->batch, GPT_CONTEXT, &g) == KILN_OK, l->name);
        fill_labels(g.input, (int)c.vocab, 3);
        fill_labels(g.labels, (int)c.vocab, 4);
        kiln_adam_config ac = kiln_adamw_defaults();
        ac.lr = 3e-4f;
        opt = kiln_adamw_new(ctx, &ac);
    } else {
        resnet *m = resnet_new(ctx, NULL, 1);
        bench_check(m && resnet_train_graph(m, l->batch, &g) == KILN_OK, l->name);
        bench_check(kiln_tensor_fill_uniform(g.input, 7, 0.0, 1.0) == KILN_OK, "input");
        fill_labels(g.labels, 10, 2);
        opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f});
    }
    bench_check(opt != NULL, "optimizer");
    double t[STEPS + 1];
    for (int s = 0; s <= STEPS; s++) {
        double t0 = bench_now();
        bench_check(kiln_graph_compute(g.graph) == KILN_OK && kiln_optim_step(opt) == KILN_OK, l->name);
        t[s] = bench_now() - t0;
    }
    qsort(t + 1, STEPS, sizeof *t, cmp_double); /* t[0]: the warm-up */
    printf("%.9g\n", t[1 + STEPS / 2]);
    kiln_ctx_free(ctx);
    return 0;
}

int bench_size_line(const char *name, const char *threads) {
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        if (!strcmp(lines[i].name, name)) return run_line(&lines[i], atoi(threads) > 0 ? atoi(threads) : 1);
    fprintf(stderr, "bench: no size line %s\n", name);
    return 2;
}

/* One line in a child process: its median step seconds and peak RSS (MiB). */
static bool child_line(const size_line *l, int nt, double *step_s, double *rss_mib) {
    int fd[2];
    char threads[16];
    snprintf(threads, sizeof threads, "%d", nt);
    fflush(stdout);
    if (pipe(fd)) return false;
    pid_t pid = fork();
    if (pid < 0) {
        close(fd[0]);
        close(fd[1]);
        return false;
    }
    if (pid == 0) {
        dup2(fd[1], STDOUT_FILENO);
        close(fd[0]);
        close(fd[1]);
        execl("/proc/self/exe", "kiln_bench", "--size-line", l->name, threads, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    char buf[64] = {0};
    ssize_t got = 0, r;
    while (got < (ssize_t)sizeof buf - 1 && (r = read(fd[0], buf + got, sizeof buf - 1 - (size_t)got)) > 0) got += r;
    close(fd[0]);
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return false;
    *step_s = atof(buf);
    *rss_mib = (double)ru.ru_maxrss / 1024.0; /* KiB on Linux */
    return *step_s > 0;
}

void bench_train_sizes(const bench_opts *o) {
    double f32_rate[sizeof o->threads / sizeof o->threads[0]] = {0}; /* the last f32 line's steps/s at each thread count */
    for (size_t i = 0; i < sizeof lines / sizeof *lines; i++)
        for (int t = 0; t < o->n_threads; t++) {
            int nt = o->threads[t];
            double s, rss;
            char name[64], key[64];
            snprintf(name, sizeof name, "train_%s %dt", lines[i].name, nt);
            if (!child_line(&lines[i], nt, &s, &rss)) {
                if (!lines[i].bf16) f32_rate[t] = 0;
                printf("%-34s failed (its child process said why on stderr)\n", name);
                continue;
            }
            snprintf(key, sizeof key, "train_%s_%dt", lines[i].name, nt);
            if (lines[i].bf16) bench_report(name, 1.0 / s, "steps/s", f32_rate[t], "kiln f32");
            else bench_report(name, 1.0 / s, "steps/s", bench_torch(key), "pytorch");
            if (!lines[i].bf16) f32_rate[t] = 1.0 / s;
            snprintf(name, sizeof name, "rss_%s %dt", lines[i].name, nt);
            snprintf(key, sizeof key, "rss_%s_%dt", lines[i].name, nt);
            bench_report(name, rss, "MiB", bench_torch(key), "pytorch");
        }
}
