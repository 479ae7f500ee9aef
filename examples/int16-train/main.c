/* int16-train — the Fashion-MNIST CNN (models/cnn.h) trained twice from
 * the same initial weights, the same data order and the same
 * hyperparameters: once in f32, once with its linear and convolution
 * products in INT16 dynamic fixed point (cfg.dfp; Das et al. 2018: int16
 * operands with a shared exponent, products summed in INT32, master
 * weights, ReLU, pooling, the loss and AdamW in f32). Prints both test
 * accuracy curves side by side, one row per epoch, the training images/s
 * of each, and draws the curves into one PNG.
 *
 *     build/examples/int16-train                        # 3 epochs, all 4 layers in DFP
 *     build/examples/int16-train --epochs 1 --subset 10000 --threads 1
 *     build/examples/int16-train --layers 6 --plot /tmp/acc.png   # conv2 and fc1 only
 *
 * The two runs alternate epoch by epoch (FP32 epoch 1, DFP epoch 1, FP32
 * epoch 2, ...) so that a machine busy with something else slows both
 * alike; images/s counts training steps only (forward, backward and the
 * optimizer), not the evaluation.
 */
#include "args.h"
#include "cnn.h"
#include "data.h"
#include "kiln.h"
#include "output.h"
#include "plot.h"
#include "progress.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 500

static int fail(const char *what) {
    fprintf(stderr, "int16-train: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* One training run: its own context, model, optimizer and data loader. */
typedef struct run {
    const char *name;
    kiln_ctx *ctx;
    cnn *model;
    model_graph train, eval;
    kiln_optim *opt;
    data_loader *dl;
    double seconds;  /* in training steps, all epochs so far */
    int64_t images;  /* trained on so far */
    double *acc;     /* test accuracy after each epoch */
    double *loss;    /* mean training loss of each epoch */
} run;

typedef struct setup {
    int epochs, batch, limit;
    int64_t subset;
    float lr, wd, warmup;
    uint64_t seed;
    const char *data_dir;
} setup;

/* The first n images and labels of a split, as new leaves of ctx. */
static kiln_status take_subset(kiln_ctx *ctx, data_images *d, int64_t n) {
    if (n <= 0 || n >= d->n) return KILN_OK;
    kiln_tensor *x = kiln_new_4d(ctx, KILN_F32, n, 1, DATA_FASHION_SIDE, DATA_FASHION_SIDE);
    kiln_tensor *y = kiln_new_1d(ctx, KILN_I32, n);
    if (!x || !y) return KILN_ERR_OOM;
    memcpy(kiln_tensor_data(x), kiln_tensor_data(d->images), (size_t)n * DATA_FASHION_SIDE * DATA_FASHION_SIDE * 4);
    memcpy(kiln_tensor_data(y), kiln_tensor_data(d->labels), (size_t)n * 4);
    d->images = x, d->labels = y, d->n = n;
    return KILN_OK;
}

static data_images g_train, g_test;

static int run_init(run *r, const char *name, unsigned dfp, const setup *s, int64_t steps) {
    memset(r, 0, sizeof *r);
    r->name = name;
    r->ctx = kiln_ctx_new();
    if (!r->ctx) return fail("making a context");
    cnn_config c = cnn_defaults();
    c.dfp = dfp;
    /* same seed: the DFP model starts from exactly the FP32 model's weights */
    r->model = cnn_new(r->ctx, &c, s->seed);
    if (!r->model || cnn_train_graph(r->model, s->batch, &r->train) || cnn_eval_graph(r->model, EVAL_BATCH, &r->eval))
        return fail("building the CNN");
    kiln_adam_config ac = kiln_adamw_defaults();
    ac.lr = s->lr, ac.weight_decay = s->wd;
    r->opt = kiln_adamw_new(r->ctx, &ac);
    if (!r->opt) return fail("making the optimizer");
    int64_t total = steps * s->epochs;
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, (int64_t)(s->warmup * (double)total), total, 0.0f};
    if (kiln_optim_set_schedule(r->opt, &sched)) return fail("setting the schedule");
    r->dl = data_loader_new(g_train.images, g_train.labels, s->batch, s->seed, true, true);
    if (!r->dl) return fprintf(stderr, "int16-train: %s\n", data_last_error()), 1;
    r->acc = calloc((size_t)s->epochs, sizeof *r->acc);
    r->loss = calloc((size_t)s->epochs, sizeof *r->loss);
    if (!r->acc || !r->loss) return fprintf(stderr, "int16-train: out of memory\n"), 1;
    return 0;
}

static void run_free(run *r) {
    data_loader_free(r->dl);
    if (r->model) cnn_free(r->model);
    kiln_ctx_free(r->ctx);
    free(r->acc);
    free(r->loss);
}

/* Epoch e of run r: steps training steps, then the test accuracy. */
static int run_epoch(run *r, int e, const setup *s, int64_t steps) {
    char label[48];
    snprintf(label, sizeof label, "%s epoch %d/%d", r->name, e + 1, s->epochs);
    progress bar;
    progress_start(&bar, stdout, label, steps, "img");
    double loss_sum = 0, t0 = progress_now();
    for (int64_t i = 0; i < steps; i++) {
        if (data_loader_next(r->dl, r->train.input, r->train.labels) <= 0)
            return fprintf(stderr, "int16-train: %s\n", data_last_error()), 1;
        if (kiln_graph_compute(r->train.graph)) return fail("training step");
        if (kiln_optim_step(r->opt)) return fail("optimizer step");
        loss_sum += kiln_tensor_item(r->train.loss);
        progress_update(&bar, i + 1, loss_sum / (double)(i + 1), (double)s->batch);
    }
    r->seconds += progress_now() - t0;
    r->images += steps * s->batch;
    progress_finish(&bar);
    if (data_loader_seek(r->dl, e + 1, 0)) return fprintf(stderr, "int16-train: %s\n", data_last_error()), 1;
    r->loss[e] = loss_sum / (double)steps;
    r->acc[e] = model_accuracy(&r->eval, g_test.images, g_test.labels, s->limit);
    if (r->acc[e] < 0) return fail("evaluating");
    return 0;
}

static int draw(const run *fp, const run *dfp, int epochs, const char *path) {
    double *x = malloc((size_t)epochs * sizeof *x), *a = malloc((size_t)epochs * sizeof *a),
           *b = malloc((size_t)epochs * sizeof *b);
    plot *p = plot_new("Fashion-MNIST CNN: FP32 vs INT16 dynamic fixed point", "epoch", "test accuracy (%)");
    int rc = 1;
    if (x && a && b && p) {
        for (int e = 0; e < epochs; e++) x[e] = e + 1, a[e] = 100 * fp->acc[e], b[e] = 100 * dfp->acc[e];
        int s = plot_add_line(p, "FP32", x, a, epochs), t = plot_add_line(p, "INT16 DFP", x, b, epochs);
        if (s >= 0 && t >= 0) {
            plot_set_style(p, t, 1, true);
            rc = plot_write_png(p, path);
            if (rc) fprintf(stderr, "int16-train: %s: %s\n", path, plot_error(p));
        }
    }
    if (rc && !(x && a && b && p)) fprintf(stderr, "int16-train: out of memory drawing the plot\n");
    plot_free(p);
    free(x), free(a), free(b);
    return rc;
}

int main(int argc, char **argv) {
    setup s = {.epochs = 3, .batch = 64, .limit = 0, .subset = 0, .lr = 2e-3f, .wd = 0.01f, .warmup = 0.05f,
               .seed = 1, .data_dir = DATA_FASHION_DIR};
    const char *plot_path = "int16-train.png";
    int threads = 0, layers = (int)CNN_DFP_ALL, subset = 0;
    args_opt opts[] = {
        {"epochs", ARGS_INT, &s.epochs, "N", "passes over the training set (each run)", .positive = true},
        {"batch", ARGS_INT, &s.batch, "N", "images per step", .positive = true},
        {"lr", ARGS_FLOAT, &s.lr, "X", "AdamW's peak learning rate", .positive = true},
        {"wd", ARGS_FLOAT, &s.wd, "X", "AdamW's weight decay", NULL, false},
        {"warmup", ARGS_FLOAT, &s.warmup, "F", "fraction of the steps warming the lr up, then cosine to 0", NULL, false},
        {"seed", ARGS_U64, &s.seed, "N", "seed of the weights and the data order (both runs)", NULL, false},
        {"layers", ARGS_INT, &layers, "MASK",
         "the DFP run's layers in INT16: bit 0 conv1, 1 conv2, 2 fc1, 3 the head", .positive = true},
        {"subset", ARGS_INT, &subset, "N", "train on the first N training images only (0: all 60000)", NULL, false},
        {"limit", ARGS_INT, &s.limit, "N", "at most N training and N test batches per epoch (0: all; quick checks)", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"data", ARGS_STRING, &s.data_dir, "DIR", "Fashion-MNIST's IDX files", NULL, false},
        {"plot", ARGS_STRING, &plot_path, "PATH", "the PNG of both accuracy curves (\"\": none)", NULL, false},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    int r = args_parse("int16-train", "Train the Fashion-MNIST CNN in FP32 and in INT16 dynamic fixed point; compare.",
                       opts, nopts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (layers > (int)CNN_DFP_ALL)
        return args_reject("int16-train", opts, nopts, "layers", "a mask in 1..%d", (int)CNN_DFP_ALL), 2;
    if (s.warmup >= 1) return args_reject("int16-train", opts, nopts, "warmup", "a fraction in [0, 1)"), 2;
    if (plot_path[0] && !output_file("int16-train", "--plot", plot_path)) return 2;
    s.subset = subset;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "int16-train: --threads: %s\n", kiln_last_error()), 2;

    kiln_ctx *data_ctx = kiln_ctx_new();
    if (!data_ctx) return fail("making a context");
    if (data_fashion_load(data_ctx, s.data_dir, DATA_TRAIN, DATA_NCHW, &g_train) ||
        data_fashion_load(data_ctx, s.data_dir, DATA_TEST, DATA_NCHW, &g_test)) {
        fprintf(stderr, "int16-train: %s\n", data_last_error());
        return 1;
    }
    if (take_subset(data_ctx, &g_train, s.subset)) return fail("taking the subset");
    if (g_train.n < s.batch)
        return args_reject("int16-train", opts, nopts, "batch", "at most the %lld training images",
                           (long long)g_train.n), 2;
    data_fashion_standardize(&g_train);
    data_fashion_standardize(&g_test);

    int64_t steps = g_train.n / s.batch;
    if (s.limit && s.limit < steps) steps = s.limit;
    run fp, dfp;
    int rc = run_init(&fp, "FP32", 0, &s, steps);
    if (!rc) rc = run_init(&dfp, "DFP", (unsigned)layers, &s, steps);
    if (rc) return rc;
    printf("kiln %s: Fashion-MNIST CNN, %lld parameters; AdamW lr %g wd %g, batch %d, %d epoch(s) of %lld steps "
           "(%lld training images), %d thread(s); DFP layers mask %d\n",
           KILN_VERSION, (long long)cnn_param_count(fp.model), (double)s.lr, (double)s.wd, s.batch, s.epochs,
           (long long)steps, (long long)g_train.n, kiln_get_threads(), layers);

    for (int e = 0; e < s.epochs && !rc; e++) {
        rc = run_epoch(&fp, e, &s, steps);
        if (!rc) rc = run_epoch(&dfp, e, &s, steps);
    }
    if (!rc) {
        printf("\nepoch   FP32 loss  FP32 acc   DFP loss   DFP acc    gap\n");
        for (int e = 0; e < s.epochs; e++)
            printf("%5d   %9.4f  %7.2f%%  %9.4f  %7.2f%%  %+5.2f\n", e + 1, fp.loss[e], 100 * fp.acc[e], dfp.loss[e],
                   100 * dfp.acc[e], 100 * (dfp.acc[e] - fp.acc[e]));
        double ips_fp = (double)fp.images / fp.seconds, ips_dfp = (double)dfp.images / dfp.seconds;
        printf("images/s: FP32 %.0f, DFP %.0f (%.2fx)\n", ips_fp, ips_dfp, ips_dfp / ips_fp);
        printf("final test accuracy: FP32 %.2f%%, DFP %.2f%% (%+.2f points)\n", 100 * fp.acc[s.epochs - 1],
               100 * dfp.acc[s.epochs - 1], 100 * (dfp.acc[s.epochs - 1] - fp.acc[s.epochs - 1]));
        if (plot_path[0]) {
            rc = draw(&fp, &dfp, s.epochs, plot_path);
            if (!rc) printf("plot: %s\n", plot_path);
        }
    }
    run_free(&fp);
    run_free(&dfp);
    kiln_ctx_free(data_ctx);
    return rc;
}
