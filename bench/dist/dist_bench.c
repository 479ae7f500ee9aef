/* dist_bench.c — the data-parallel GPT step (kiln_dist.h) on this machine:
 * median wall time of a training step at a fixed global batch, the part of
 * it spent in kiln_dist_step (waiting for the gradient all-reduce, the
 * optimizer step, the ZeRO all-gather), the step's CPU time summed over the
 * ranks (the work done, which a loaded machine does not change much), and
 * this rank's optimizer-state bytes. bench/dist.sh runs it under mpirun -np 1 and -np 2 and prints the
 * scaling line. Rank 0 prints one line:
 *   dist ranks N  step MS  dist_step MS  cpu MS  state_rank0 BYTES  state_all BYTES  params P
 * Usage: kiln_dist_bench [--steps N] [--batch B] [--seq T] [--width D] [--layers L] [--optim NAME] [--plain]
 *                        [--no-overlap] */
#include "gpt.h"
#include "kiln_dist.h"
#include "optimizers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static int die(const char *what) {
    fprintf(stderr, "kiln_dist_bench: %s: %s\n", what, kiln_last_error());
    return 1;
}

int main(int argc, char **argv) {
    int steps = 10, batch = 8, seq = 64, width = 128, layers = 4;
    bool zero = true, overlap = true;
    const char *optim = "adamw";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--plain")) zero = false;
        else if (!strcmp(argv[i], "--no-overlap")) overlap = false;
        else if (i + 1 < argc && !strcmp(argv[i], "--steps")) steps = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch")) batch = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--seq")) seq = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--width")) width = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--layers")) layers = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--optim")) optim = argv[++i];
        else return fprintf(stderr, "kiln_dist_bench: unknown argument %s\n", argv[i]), 2;
    }
    if (kiln_dist_init(&argc, &argv)) return die("MPI");
    int world = kiln_dist_size(), me = kiln_dist_rank();
    int id = optimizer_parse(optim);
    if (id < 0 || steps < 3 || batch % world || width % 4)
        return fprintf(stderr, "kiln_dist_bench: bad --optim, --steps (>= 3), --batch (a multiple of %d) or --width\n",
                       world), 2;
    kiln_ctx *ctx = kiln_ctx_new();
    gpt_config cfg = {.vocab = 256, .context = seq, .layers = layers, .heads = 4, .width = width};
    gpt *m = gpt_new(ctx, &cfg, 1);
    model_graph g;
    if (!m || gpt_train_graph(m, batch / world, seq, &g)) return die("building the GPT");
    kiln_dist *d = kiln_dist_new(ctx, m->params, m->n_params, &(kiln_dist_config){.zero = zero});
    if (!d) return die("kiln_dist_new");
    kiln_tensor **mine;
    int n_mine, first;
    kiln_dist_shard(d, &mine, &n_mine, &first);
    optimizer_settings st = {.lr = 1e-3f, .weight_decay = 0.1f, .rank = 32, .seed = 1};
    kiln_optim *opt = n_mine ? optimizer_new_for(ctx, (optimizer_id)id, mine, n_mine, first, &st) : NULL;
    if ((n_mine && !opt) || kiln_dist_set_optim(d, opt) || kiln_dist_attach(d, overlap ? g.graph : NULL)) return die("the optimizer");
    int32_t *tok = malloc((size_t)(batch / world) * (size_t)seq * sizeof *tok);
    double *t_step = malloc((size_t)steps * sizeof *t_step), *t_dist = malloc((size_t)steps * sizeof *t_dist);
    double *t_cpu = malloc((size_t)steps * sizeof *t_cpu);
    if (!tok || !t_step || !t_dist || !t_cpu) return fprintf(stderr, "kiln_dist_bench: out of memory\n"), 1;
    uint64_t r = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
    for (int s = -2; s < steps; s++) { /* two warm-up steps */
        for (int64_t i = 0; i < (int64_t)(batch / world) * seq; i++) {
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            tok[i] = (int32_t)(r >> 56);
        }
        if (kiln_tensor_set_i32(g.input, tok, (int64_t)(batch / world) * seq) ||
            kiln_tensor_set_i32(g.labels, tok, (int64_t)(batch / world) * seq))
            return die("the batch");
        kiln_dist_barrier(); /* every rank starts the step together */
        double t0 = now(), c0 = cpu();
        if (kiln_graph_compute(g.graph)) return die("compute");
        double t1 = now();
        if (kiln_dist_step(d)) return die("kiln_dist_step");
        double t2 = now(), c2 = cpu();
        /* this step's CPU time over all ranks: the work, whatever the load */
        double c = kiln_dist_sum(c2 - c0);
        if (s >= 0) t_step[s] = t2 - t0, t_dist[s] = t2 - t1, t_cpu[s] = c;
    }
    qsort(t_step, (size_t)steps, sizeof *t_step, cmp);
    qsort(t_dist, (size_t)steps, sizeof *t_dist, cmp);
    qsort(t_cpu, (size_t)steps, sizeof *t_cpu, cmp);
    double mine_bytes = opt ? (double)kiln_optim_state_bytes(opt) : 0, all = kiln_dist_sum(mine_bytes);
    if (me == 0)
        printf("dist ranks %d  step %.2f ms  dist_step %.2f ms  cpu %.2f ms  state_rank0 %.0f  state_all %.0f  params %lld  "
               "(GPT %d layers width %d, global batch %d x %d, %s%s%s, %d thread(s) per rank)\n",
               world, 1e3 * t_step[steps / 2], 1e3 * t_dist[steps / 2], 1e3 * t_cpu[steps / 2], mine_bytes, all,
               (long long)gpt_param_count(m), layers, width, batch, seq, optim, zero ? " ZeRO-1" : "", overlap ? "" : ", all-reduce after backward",
               kiln_get_threads());
    free(tok);
    free(t_step);
    free(t_dist);
    free(t_cpu);
    kiln_dist_free(d);
    gpt_free(m);
    kiln_ctx_free(ctx);
    kiln_dist_finalize();
    return 0;
}
