/* optim-compare — ten optimizers, one model, the same data: which trains
 * best, and what does each one's state cost in memory?
 *
 * For each task (the Fashion-MNIST CNN, the byte-level GPT on the fortunes
 * text) and each optimizer (SGD with momentum, Adam, AdamW, AdamW-8bit,
 * Lion, Lion-8bit, GaLore, GaLore-8bit, APOLLO, APOLLO-Mini):
 *
 *   1. sweep: short runs at 3 learning rates around the method's usual one
 *      (x1/3, x1, x3); keep the one with the lowest validation loss;
 *   2. train the full run at that rate, from the same initial weights and
 *      through the same batches as every other optimizer;
 *   3. measure: final training and validation loss, accuracy (CNN) or
 *      bits per byte (GPT), time per step, optimizer state bytes, and the
 *      run's own peak RSS (every run is a forked child of this process).
 *
 * Then AdamW again with other seeds, to measure the run-to-run noise that
 * the 8-bit optimizers' differences from their 32-bit twins are judged by.
 * It prints a table per task and writes CSV files and PNG charts (loss
 * curves; memory vs. quality) to --out.
 *
 *     build/examples/optim-compare --quick          (under a minute on 2 cores)
 *     build/examples/optim-compare --task cnn --out /tmp/cmp
 */
#include "compare.h"

#include "args.h"
#include "output.h"
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This process' resident set now (Linux), in kB; ru_maxrss would be the
 * peak, which a task loaded earlier could have set. */
static double resident_kb(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long size = 0, res = 0;
    if (f) {
        if (fscanf(f, "%ld %ld", &size, &res) != 2) res = 0;
        fclose(f);
    }
    return (double)res * (double)sysconf(_SC_PAGESIZE) / 1024.0;
}

static double load_average(void) {
    double l[1];
    return getloadavg(l, 1) == 1 ? l[0] : NAN;
}

static void print_run(const task *t, optimizer_id id, const char *what, const run_result *r) {
    printf("  %-4s %-12s %-6s lr %-8.3g ", t->name, optimizer_title(id), what, r->lr);
    if (r->status == RUN_UNSUPPORTED) printf("not in this build\n");
    else if (r->status == RUN_FAILED) printf("failed: %s\n", r->error);
    else if (r->status == RUN_DIVERGED) printf("%s (%.1f s)\n", r->error, r->wall_s);
    else printf("train %.4f  val %.4f  %lld skipped  (%.1f s)\n", r->train_loss, r->val_loss, (long long)r->skipped,
                r->wall_s);
    fflush(stdout);
}

/* Sweep, pick, train, measure: one task. */
static void compare_task(const task *t, int n_sweep, int n_seeds, const run_opts *o, task_report *rep) {
    memset(rep, 0, sizeof *rep);
    rep->t = t;
    rep->n_sweep = n_sweep;
    rep->data_rss_kb = resident_kb();
    run_opts sweep = *o;
    sweep.full = false;
    for (int i = 0; i < OPT_COUNT; i++) {
        double centre = optim_center_lr(i, t->kind), best = centre, best_val = INFINITY;
        bool unsupported = false;
        for (int k = 0; k < n_sweep && n_sweep > 1; k++) {
            double lr = centre * pow(3.0, k - (n_sweep - 1) / 2.0);
            run_result r;
            run_forked(t, i, lr, t->sweep_steps, &sweep, &r);
            print_run(t, i, "sweep", &r);
            rep->sweep_lr[i][k] = lr;
            rep->sweep_val[i][k] = r.status == RUN_OK ? r.val_loss : NAN;
            unsupported = r.status == RUN_UNSUPPORTED;
            run_result_free(&r);
            if (unsupported) break;
            if (rep->sweep_val[i][k] < best_val) best_val = rep->sweep_val[i][k], best = lr;
        }
        if (unsupported) {
            rep->full[i].status = RUN_UNSUPPORTED;
            rep->full[i].lr = NAN;
            rep->full[i].steps = t->steps;
            continue;
        }
        run_forked(t, i, best, t->steps, o, &rep->full[i]);
        print_run(t, i, "full", &rep->full[i]);
    }
    /* the noise: AdamW at its chosen lr, other seeds */
    rep->noise_seed[0] = o->seed;
    rep->n_noise = 1;
    for (int k = 1; k < n_seeds && k < 4; k++) {
        run_opts other = *o;
        other.seed = o->seed + (uint64_t)k;
        other.full = false;
        run_forked(t, OPT_ADAMW, rep->full[OPT_ADAMW].lr, t->steps, &other, &rep->noise[k]);
        char what[16];
        snprintf(what, sizeof what, "seed %llu", (unsigned long long)other.seed);
        print_run(t, OPT_ADAMW, what, &rep->noise[k]);
        rep->noise_seed[k] = other.seed;
        rep->n_noise++;
    }
}

static void report_free(task_report *rep) {
    for (int i = 0; i < OPT_COUNT; i++) run_result_free(&rep->full[i]);
    for (int k = 0; k < 4; k++) run_result_free(&rep->noise[k]);
}

int main(int argc, char **argv) {
    const char *which = "both", *backend = "cpu", *out = "optim-compare-out";
    bool quick = false;
    int steps = 0, threads = 0, n_sweep = 3, n_seeds = 3, eval = 0;
    uint64_t seed = 1;
    args_opt opts[] = {
        {"task", ARGS_CHOICE, &which, "T", "the Fashion-MNIST CNN, the fortunes GPT, or both", .choices = "cnn|gpt|both"},
        {"quick", ARGS_FLAG, &quick, NULL, "small models and short runs, one thread each unless --threads or "
                                           "$KILN_THREADS says otherwise (under a minute on 2 cores)", NULL, false},
        {"steps", ARGS_INT, &steps, "N", "steps of each full run; the sweep's runs take a third "
                                        "(0: 1500 cnn, 1000 gpt; --quick 150)", .positive = false},
        {"sweep", ARGS_INT, &n_sweep, "N", "learning rates tried per optimizer, spaced x3 around the usual one "
                                          "(1: no sweep)", .positive = true},
        {"seeds", ARGS_INT, &n_seeds, "N", "AdamW runs with seeds seed, seed+1, ... for the run-to-run noise (1..4)",
         .positive = true},
        {"eval", ARGS_INT, &eval, "N", "evaluate on at most N validation/test images (cnn) or ~N text "
                                      "windows (gpt) (0: 5000/10000 images, 512 windows; --quick 2000/10000, 128)", NULL, false},
        {"seed", ARGS_U64, &seed, "N", "initial weights and data order, the same for every optimizer", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", .choices = "cpu|vulkan|cuda"},
        {"out", ARGS_STRING, &out, "DIR", "where the CSV files and PNG charts go", NULL, false},
    };
    int nopts = (int)(sizeof opts / sizeof *opts);
    int r = args_parse("optim-compare", "Compare ten optimizers on the Fashion-MNIST CNN and the byte-level GPT.",
                       opts, nopts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (n_sweep > 3) return args_reject("optim-compare", opts, nopts, "sweep", "1, 2 or 3"), 2;
    if (n_seeds > 4) return args_reject("optim-compare", opts, nopts, "seeds", "1 to 4"), 2;
    /* the tables' files go there at the end of each task: checked now */
    if (!output_dir("optim-compare", "--out", out)) return 2;
    /* --quick's models are too small to gain from a second thread: on 2
     * cores at load 4 one thread ran it in 19 s, two in 25-27 s (and
     * OpenMP's spinning threads, before kiln's pool, in 3 to 17 minutes) */
    if (quick && !threads && !getenv("KILN_THREADS")) threads = 1;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "optim-compare: --threads: %s\n", kiln_last_error()), 2;
    run_opts o = {seed, threads, backend, true};
    bool tasks[2] = {strcmp(which, "gpt") != 0, strcmp(which, "cnn") != 0};
    printf("kiln %s optim-compare%s: seed %llu, %d thread(s), %s backend, load average %.1f\n", KILN_VERSION,
           quick ? " --quick" : "", (unsigned long long)seed, kiln_get_threads(), backend, load_average());
    double t0 = progress_now();
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        if (!tasks[k]) continue;
        task t;
        char err[512] = "";
        if (task_load(&t, (task_kind)k, quick, steps, eval, err, sizeof err)) {
            fprintf(stderr, "optim-compare: loading the %s data: %s\n", k == TASK_CNN ? "cnn" : "gpt", err);
            task_free(&t);
            return 1;
        }
        if (k == TASK_CNN)
            printf("%s: CNN 1->%lld->%lld channels, %lld hidden; %lld training / %lld validation images\n", t.title,
                   (long long)t.cnn.c1, (long long)t.cnn.c2, (long long)t.cnn.hidden,
                   (long long)kiln_tensor_dim(t.train_x, 0), (long long)t.val_n);
        else
            printf("%s: GPT %lld layers, %lld heads, width %lld, context %lld; %lld training / %lld validation bytes\n",
                   t.title, (long long)t.gpt.layers, (long long)t.gpt.heads, (long long)t.gpt.width,
                   (long long)t.gpt.context, (long long)t.corpus.train.n, (long long)t.corpus.val.n);
        task_report *rep = malloc(sizeof *rep);
        if (!rep) return fprintf(stderr, "optim-compare: out of memory\n"), 1;
        compare_task(&t, n_sweep, n_seeds, &o, rep);
        report_table(stdout, rep);
        report_targets(stdout, rep);
        if (report_write(rep, out)) rc = 1;
        for (int i = 0; i < OPT_COUNT; i++)
            if (rep->full[i].status == RUN_FAILED) rc = 1;
        report_free(rep);
        free(rep);
        task_free(&t);
    }
    printf("\ntotal %.0f s, load average %.1f; CSV files and charts in %s/\n", progress_now() - t0, load_average(), out);
    return rc;
}
