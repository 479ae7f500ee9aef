/* compare.h — what the parts of optim-compare share: the tasks, the
 * optimizers, one training run and its result.
 *
 *   main.c        options, the learning-rate sweeps, the noise check
 *   optimizers.c  the comparison's settings of the ten optimizers (lr, decay, rank)
 *   runs.c        the two tasks' data and models; one run in a forked child
 *   report.c      the table, the CSV files and the PNG charts
 *
 * Every run starts from the same seed: the same initial weights and the
 * same batches in the same order, whatever the optimizer.
 */
#ifndef COMPARE_H
#define COMPARE_H

#include "kiln.h"

#include "cnn.h"
#include "data.h"
#include "gpt.h"
#include "optimizers.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum task_kind { TASK_CNN = 0, TASK_GPT } task_kind;

/* One task: a model, its data (loaded once, in the parent, before any
 * child is forked) and how long its runs are. */
typedef struct task {
    task_kind kind;
    const char *name;  /* "cnn", "gpt" */
    const char *title; /* for the charts */
    int64_t batch, steps, sweep_steps, eval_batch;
    cnn_config cnn;
    gpt_config gpt;
    /* cnn: the training images less a held-out validation part */
    kiln_ctx *data_ctx;
    kiln_tensor *train_x, *train_y, *val_x, *val_y, *test_x, *test_y;
    int64_t val_n, test_n;
    /* gpt: the fortunes corpus; every val_every-th evaluation batch */
    data_corpus corpus;
    int64_t val_every;
    int rank, galore_gap; /* GaLore/APOLLO rank; gap set per run length */
} task;

/* The ten optimizers (optimizer_id, their names and twins) are
 * examples/common/optimizers.h's, in its order. */
/* The usual learning rate of the method on this task: the sweep's centre. */
double optim_center_lr(optimizer_id id, task_kind kind);
/* Make the optimizer over every parameter of ctx. steps: the run's length
 * (GaLore/APOLLO refresh their projections every update_gap(steps)). NULL
 * with kiln's error set on failure (KILN_ERR_UNSUPPORTED: not in this build). */
kiln_optim *optim_make(kiln_ctx *ctx, optimizer_id id, double lr, const task *t, int64_t steps);
int optim_update_gap(int64_t steps);

typedef enum run_status { RUN_OK = 0, RUN_UNSUPPORTED, RUN_DIVERGED, RUN_FAILED } run_status;

typedef struct run_result {
    run_status status;
    char error[200];
    double lr;
    double train_loss; /* mean training loss over the last tenth of the steps */
    double val_loss;   /* mean cross-entropy on the validation data */
    double metric;     /* cnn: validation accuracy; gpt: bits per byte */
    double test_acc;   /* cnn full runs: accuracy on the 10,000 test images; else NaN */
    double sec_per_step;
    size_t state_bytes;
    long peak_rss_kb;  /* the child's own peak (ru_maxrss from wait4) */
    double wall_s;
    int64_t steps;
    int64_t skipped;   /* steps the non-finite guard skipped */
    float *curve;      /* training loss per step (steps values; malloc'd) */
} run_result;

typedef struct run_opts {
    uint64_t seed;
    int threads;
    const char *backend;
    bool full;     /* a full run: test accuracy too, progress on a terminal */
} run_opts;

/* Load a task's data into t (the parent, once). quick: the small models;
 * steps > 0: the full runs' length; eval > 0: at most that many validation
 * and test images (cnn) or windows of validation text (gpt). */
kiln_status task_load(task *t, task_kind kind, bool quick, int64_t steps, int64_t eval, char *err, size_t errn);
void task_free(task *t);

/* Train the optimizer at lr for steps in a forked child and collect its
 * result (the parent never runs a kiln graph, so each child's OpenMP and
 * backend start fresh and its peak RSS is its own). */
void run_forked(const task *t, optimizer_id id, double lr, int64_t steps, const run_opts *o, run_result *r);
void run_result_free(run_result *r);

/* Everything measured for one task, for the report. */
typedef struct task_report {
    const task *t;
    double sweep_lr[OPT_COUNT][3];
    double sweep_val[OPT_COUNT][3];
    int n_sweep;
    run_result full[OPT_COUNT];
    /* AdamW at its chosen lr with other seeds: the run-to-run noise */
    run_result noise[4];
    uint64_t noise_seed[4];
    int n_noise;
    double data_rss_kb; /* the parent's RSS with the data loaded */
} task_report;

void report_table(FILE *f, const task_report *r);
void report_targets(FILE *f, const task_report *r);
/* CSV files and PNG charts under dir; 0, or -1 with a message on stderr. */
int report_write(const task_report *r, const char *dir);

#endif
