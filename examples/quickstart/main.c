/* quickstart — kiln in five minutes: train a small convolutional net on
 * Fashion-MNIST with AdamW, measure its test accuracy, save it as a
 * safetensors file, and load it back into a fresh model.
 *
 *     make demo                         (installs what is missing, builds, runs this)
 *     build/examples/quickstart --help
 *
 * The steps, each a numbered section of main() below:
 *   1. a context, which owns every tensor, graph and optimizer made in it;
 *   2. the data (models/data.h), standardized on the host;
 *   3. the model (models/cnn.h) and its training and evaluation graphs,
 *      built once and run many times;
 *   4. the optimizer, AdamW, with a warmup + cosine learning-rate schedule;
 *   5. the training loop: copy a batch in, compute, step;
 *   6. the test accuracy;
 *   7. a checkpoint: save the weights, load them into a second model made
 *      from another seed, and check it scores the same;
 *   8. quantization: the linear layers in Q8_0, Q4_0 and NF4, with the
 *      accuracy and size of each.
 *
 * With the defaults (3 epochs, batch 128, lr 3e-3) it reaches about 91%
 * test accuracy; see README.md for the time it takes.
 */
#include "args.h"
#include "cnn.h"
#include "data.h"
#include "kiln.h"
#include "output.h"
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define EVAL_BATCH 500

/* Every kiln call reports failure by value; kiln_last_error() says why. */
static int fail(const char *what) {
    fprintf(stderr, "quickstart: %s: %s\n", what, kiln_last_error());
    return 1;
}

int main(int argc, char **argv) {
    /* Options: each variable's value here is the default --help shows. */
    int epochs = 3, batch = 128, hidden = 128, threads = 0, limit = 0;
    float lr = 3e-3f, warmup = 0.05f;
    uint64_t seed = 1;
    const char *backend = "cpu", *data_dir = DATA_FASHION_DIR, *save = "quickstart-cnn.safetensors";
    args_opt opts[] = {
        {"epochs", ARGS_INT, &epochs, "N", "passes over the 60,000 training images", .positive = true},
        {"batch", ARGS_INT, &batch, "N", "images per step", .positive = true},
        {"lr", ARGS_FLOAT, &lr, "X", "AdamW's peak learning rate", .positive = true},
        {"warmup", ARGS_FLOAT, &warmup, "F", "fraction of the steps spent warming the lr up (then cosine to 0)", NULL, false},
        {"hidden", ARGS_INT, &hidden, "N", "units of the CNN's hidden linear layer", .positive = true},
        {"seed", ARGS_U64, &seed, "N", "seed of the initial weights and the shuffling", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", .choices = "cpu|vulkan|cuda"},
        {"data", ARGS_STRING, &data_dir, "DIR", "Fashion-MNIST's IDX files", NULL, false},
        {"save", ARGS_STRING, &save, "PATH", "where the trained weights go (safetensors)", NULL, false},
        {"limit", ARGS_INT, &limit, "N", "at most N training and N test batches per epoch (0: all; quick checks)", NULL, false},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    int r = args_parse("quickstart", "Train a CNN on Fashion-MNIST with AdamW, save and reload it.", opts, nopts, argc,
                       argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (warmup >= 1) return args_reject("quickstart", opts, nopts, "warmup", "a fraction in [0, 1)"), 2;
    /* where the weights go is checked now, not after the training */
    if (!output_file("quickstart", "--save", save)) return 2;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "quickstart: --threads: %s\n", kiln_last_error()), 2;

    /* 1. A context owns everything made in it; kiln_ctx_free() frees it
     * all. Its graphs (the optimizer's step too) run on its backend. */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_backend *be = kiln_backend_get(backend);
    if (!ctx || !be || kiln_ctx_set_backend(ctx, be)) return fail("choosing the backend");

    /* 2. The data: images as f32 [N, 1, 28, 28] in [0, 1], labels i32 [N]. */
    data_images train, test;
    if (data_fashion_load(ctx, data_dir, DATA_TRAIN, DATA_NCHW, &train) ||
        data_fashion_load(ctx, data_dir, DATA_TEST, DATA_NCHW, &test)) {
        fprintf(stderr, "quickstart: %s\n", data_last_error());
        return 1;
    }
    data_fashion_standardize(&train);
    data_fashion_standardize(&test);

    /* 3. The model: its parameters are kiln_param leaves of ctx, named as
     * PyTorch's state_dict keys ("conv1.weight", ...). A graph records the
     * ops once for a fixed batch; its input and labels are leaves we
     * overwrite before each compute. The training graph holds the forward
     * pass, the loss and the backward pass; the evaluation graph only the
     * forward pass, without gradients (like torch.no_grad). */
    cnn_config cfg = cnn_defaults();
    cfg.hidden = hidden;
    cnn *model = cnn_new(ctx, &cfg, seed);
    model_graph tg, eg;
    if (!model || cnn_train_graph(model, batch, &tg) || cnn_eval_graph(model, EVAL_BATCH, &eg))
        return fail("building the model");

    /* 4. The optimizer finds every parameter of ctx. AdamW with torch's
     * defaults (betas 0.9/0.999, weight decay 0.01) and our lr; the
     * schedule raises the lr linearly over the first steps (warmup), then
     * lowers it along a half cosine to 0 at the last step. The data
     * loader walks the training set in batches, in a new order each epoch
     * drawn from the seed; it tells us how many steps an epoch has. */
    data_loader *dl = data_loader_new(train.images, train.labels, batch, seed, true, true);
    if (!dl) return fprintf(stderr, "quickstart: %s\n", data_last_error()), 1;
    int64_t steps = data_loader_batches_per_epoch(dl);
    if (limit && limit < steps) steps = limit;
    kiln_adam_config ac = kiln_adamw_defaults();
    ac.lr = lr;
    kiln_optim *opt = kiln_adamw_new(ctx, &ac);
    int64_t total = steps * epochs;
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, (int64_t)(warmup * (double)total), total, 0.0f};
    if (!opt || kiln_optim_set_schedule(opt, &sched)) return fail("making the optimizer");
    /* A step whose loss or gradients hold a NaN or an infinity is skipped
     * and counted rather than poisoning the weights (GradScaler's skip). */
    if (kiln_optim_set_skip_nonfinite(opt, true, tg.loss)) return fail("the non-finite guard");

    printf("kiln %s: CNN 1x28x28 -> %lld -> %lld channels -> %lld -> 10, %lld parameters\n", KILN_VERSION,
           (long long)cfg.c1, (long long)cfg.c2, (long long)cfg.hidden, (long long)cnn_param_count(model));
    printf("AdamW lr %g (warmup %lld steps, cosine to 0), batch %d, %d epoch(s) of %lld steps, %d thread(s), %s: %s\n",
           (double)lr, (long long)sched.warmup_steps, batch, epochs, (long long)steps, kiln_get_threads(),
           kiln_backend_name(be), kiln_backend_device(be));

    /* 5. Train. data_loader_next() copies a shuffled batch into the graph's
     * input leaves; kiln_graph_compute() runs forward and backward, adding
     * into every parameter's gradient; kiln_optim_step() updates the
     * parameters, zeroes the gradients and advances the schedule. */
    double t0 = progress_now(), acc = 0;
    for (int e = 0; e < epochs; e++) {
        char label[32];
        snprintf(label, sizeof label, "epoch %d/%d", e + 1, epochs);
        progress bar;
        progress_start(&bar, stdout, label, steps, "img");
        double loss_sum = 0;
        for (int64_t s = 0; s < steps; s++) {
            if (data_loader_next(dl, tg.input, tg.labels) <= 0) return fprintf(stderr, "quickstart: %s\n", data_last_error()), 1;
            if (kiln_graph_compute(tg.graph)) return fail("training step");
            kiln_status st = kiln_optim_step(opt);
            if (st == KILN_ERR_NUMERIC) fprintf(stderr, "\n%s\n", kiln_last_error()); /* skipped: go on */
            else if (st) return fail("optimizer step");
            double loss = kiln_tensor_item(tg.loss);
            if (isfinite(loss)) loss_sum += loss;
            /* the bar shows the mean loss of the epoch so far */
            progress_update(&bar, s + 1, loss_sum / (double)(s + 1), (double)batch);
        }
        progress_finish(&bar);
        /* the loader would return 0 once at the end of an epoch; with
         * --limit it is not at the end: either way, on to the next one */
        if (data_loader_seek(dl, e + 1, 0)) return fprintf(stderr, "quickstart: %s\n", data_last_error()), 1;
        /* 6. Test accuracy after each epoch. */
        acc = model_accuracy(&eg, test.images, test.labels, limit);
        if (acc < 0) return fail("evaluating");
        printf("epoch %d: test accuracy %.2f%%\n", e + 1, 100 * acc);
    }
    double train_s = progress_now() - t0;
    printf("test accuracy %.2f%% after %d epoch(s), %.1f s; %lld step(s) skipped (non-finite)\n", 100 * acc, epochs,
           train_s, (long long)kiln_optim_skipped_steps(opt));

    /* 7. Save the weights: every parameter of ctx by name, in a
     * safetensors file (PyTorch's safetensors.torch.load_file reads it). */
    if (kiln_save_params(ctx, save)) return fail("saving");
    struct stat st;
    printf("saved %s (%lld bytes)\n", save, stat(save, &st) ? -1LL : (long long)st.st_size);

    /* ...and load them into a fresh model: a new context, a model made from
     * another seed (so different weights), then kiln_load_params() replaces
     * every parameter by the file's. It scores the same on the test set. */
    kiln_ctx *ctx2 = kiln_ctx_new();
    if (!ctx2 || kiln_ctx_set_backend(ctx2, be)) return fail("a second context");
    cnn *fresh = cnn_new(ctx2, &cfg, seed + 1000);
    model_graph eg2;
    if (!fresh || cnn_eval_graph(fresh, EVAL_BATCH, &eg2)) return fail("building the fresh model");
    double before = model_accuracy(&eg2, test.images, test.labels, limit);
    if (kiln_load_params(ctx2, save)) return fail("loading");
    double after = model_accuracy(&eg2, test.images, test.labels, limit);
    if (before < 0 || after < 0) return fail("evaluating the fresh model");
    printf("fresh model: %.2f%% before loading, %.2f%% after: %s\n", 100 * before, 100 * after,
           after == acc ? "the same as the trained one" : "DIFFERENT from the trained one");

    /* 8. Quantize: the linear layers' weights (fc1 and fc2, 97% of the
     * parameters) become a quantized dtype with kiln_quantize(), and an
     * evaluation graph built on them runs kiln_linear on the quantized
     * weights directly. The convolutions stay f32. A layer whose row length
     * is not a multiple of the format's block stays f32 too. */
    kiln_tensor *linear_w[2] = {fresh->hidden_w, fresh->fc_w};
    const kiln_dtype formats[] = {KILN_Q8_0, KILN_Q4_0, KILN_NF4};
    size_t f32_bytes = 0;
    for (int i = 0; i < fresh->n_params; i++) f32_bytes += kiln_tensor_nbytes(fresh->params[i]);
    printf("%-8s %10s %9s  %s\n", "weights", "bytes", "accuracy", "quantized");
    printf("%-8s %10zu %8.2f%%  -\n", "f32", f32_bytes, 100 * after);
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        size_t bytes = f32_bytes;
        char which[32] = "";
        for (int k = 0; k < 2; k++) {
            kiln_tensor *w = linear_w[k];
            if (!w || kiln_tensor_dim(w, 1) % kiln_dtype_block(formats[f])) continue; /* stays f32 */
            strcat(which, k ? " fc2" : " fc1");
            kiln_tensor *q = kiln_quantize(ctx2, w, formats[f]);
            if (!q) return fail("quantizing");
            bytes += kiln_tensor_nbytes(q) - kiln_tensor_nbytes(w);
            *(k ? &fresh->fc_w : &fresh->hidden_w) = q;
        }
        model_graph qg;
        if (cnn_eval_graph(fresh, EVAL_BATCH, &qg)) return fail("building the quantized model");
        double qacc = model_accuracy(&qg, test.images, test.labels, limit);
        if (qacc < 0) return fail("evaluating the quantized model");
        printf("%-8s %10zu %8.2f%% %s\n", kiln_dtype_name(formats[f]), bytes, 100 * qacc, which);
        fresh->hidden_w = linear_w[0], fresh->fc_w = linear_w[1];
    }

    cnn_free(fresh);
    kiln_ctx_free(ctx2);
    data_loader_free(dl);
    cnn_free(model);
    kiln_ctx_free(ctx);
    return after == acc ? 0 : 1;
}
