/* fashion — train an MLP or a CNN on Fashion-MNIST with any of kiln's
 * optimizers; report the test accuracy after each epoch and the bytes of
 * state the optimizer keeps.
 *
 *     build/examples/fashion --model cnn --optim adamw --epochs 3
 *     build/examples/fashion --model mlp --optim lion8bit --lr 1e-4
 *     build/examples/fashion --optim galore --save run.st --stop 1     (a checkpoint per epoch)
 *     build/examples/fashion --optim galore --resume run.st            (epochs 2 and 3)
 *
 * A checkpoint (kiln_checkpoint_save) holds the parameters and the
 * optimizer's whole state (moments, step count, schedule) in one
 * safetensors file; a run resumed from it continues as if it had never
 * stopped, provided the model, optimizer, batch, seed and epochs match.
 * The learning rate follows a warmup + cosine schedule over all epochs.
 * GaLore needs LAPACK's SVD: in a BLAS=0 build its constructor fails.
 *
 * Built with `make MPI=1`, it trains data-parallel under mpirun (ZeRO-1,
 * include/kiln_dist.h): each of N ranks computes its B/N images of the
 * global batch --batch, the gradients are averaged, each rank steps its
 * share of the optimizer state; rank 0 prints and evaluates.
 *
 *     scripts/mpirun.sh -np 2 build/examples/fashion --model mlp --epochs 1
 */
#include "args.h"
#include "cnn.h"
#include "data.h"
#include "kiln.h"
#include "mlp.h"
#include "optimizers.h"
#include "output.h"
#include "progress.h"
#ifdef KILN_MPI
#include "kiln_dist.h"
#endif

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EVAL_BATCH 500

static int fail(const char *what) {
    fprintf(stderr, "fashion: %s: %s\n", what, kiln_last_error());
    return 1;
}

/* A learning rate that works for each optimizer on these models when
 * --lr is not given (Lion's sign updates want a smaller one; SGD a larger). */
static float default_lr(optimizer_id id) {
    switch (id) {
    case OPT_SGD: return 0.05f;
    case OPT_LION:
    case OPT_LION8: return 3e-4f;
    default: return 3e-3f;
    }
}

#ifdef KILN_MPI
/* Data-parallel training on kiln_dist_size() ranks: the same schedule and
 * epochs as one process at batch `batch`, ZeRO-1 optimizer state. */
static int train_distributed(kiln_ctx *ctx, model_graph *tg, model_graph *eg, const data_images *train,
                             const data_images *test, optimizer_id id, const optimizer_settings *st, int epochs,
                             int batch, uint64_t seed, int limit, float warmup, int64_t n_params, const char *name) {
    int world = kiln_dist_size(), me = kiln_dist_rank();
    kiln_dist *d = kiln_dist_new(ctx, NULL, 0, &(kiln_dist_config){.zero = true});
    if (!d) return fail("starting data parallelism");
    kiln_tensor **mine;
    int n_mine, first;
    kiln_dist_shard(d, &mine, &n_mine, &first);
    kiln_optim *opt = n_mine ? optimizer_new_for(ctx, id, mine, n_mine, first, st) : NULL;
    if ((n_mine && !opt) || kiln_dist_set_optim(d, opt) || kiln_dist_attach(d, tg->graph))
        return fail("making the optimizer");
    /* each rank guards its shard of the averaged gradients: a NaN anywhere
       reaches every rank through the all-reduce, so all skip together */
    if (opt && optimizer_guard(opt, tg->loss)) return fail("the non-finite guard");
    int64_t n_items = kiln_tensor_dim(train->images, 0), row = kiln_tensor_numel(train->images) / n_items;
    kiln_dist_sampler *smp = kiln_dist_sampler_new(n_items, batch, seed, true);
    if (!smp) return fail("the sampler");
    int64_t steps = kiln_dist_sampler_batches(smp), local = kiln_dist_sampler_local_batch(smp);
    if (limit && limit < steps) steps = limit;
    int64_t total = steps * epochs;
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, (int64_t)(warmup * (double)total), total, 0.0f};
    if (opt && kiln_optim_set_schedule(opt, &sched)) return fail("setting the schedule");
    printf("data parallel: %d ranks, %lld images each per step of %d; ZeRO-1 over %d tensors (rank 0 steps %d)\n",
           world, (long long)local, batch, kiln_ctx_params(ctx, NULL, 0), n_mine);
    const float *images = kiln_tensor_data(train->images);
    const int32_t *labels = kiln_tensor_data(train->labels);
    float *x = malloc((size_t)(local * row) * sizeof *x);
    int32_t *y = malloc((size_t)local * sizeof *y);
    int64_t *idx = malloc((size_t)local * sizeof *idx);
    if (!x || !y || !idx || !images || !labels) return fprintf(stderr, "fashion: out of memory\n"), 1;
    double t0 = progress_now(), acc = -1;
    for (int e = 0; e < epochs; e++) {
        char label[32];
        snprintf(label, sizeof label, "epoch %d/%d", e + 1, epochs);
        progress bar;
        progress_start(&bar, stdout, label, steps, "img");
        double loss_sum = 0;
        for (int64_t s = 0; s < steps; s++) {
            if (kiln_dist_sampler_batch(smp, e, s, idx)) return fail("sampling");
            for (int64_t i = 0; i < local; i++) {
                memcpy(x + i * row, images + idx[i] * row, (size_t)row * sizeof *x);
                y[i] = labels[idx[i]];
            }
            if (kiln_tensor_set_f32(tg->input, x, local * row) || kiln_tensor_set_i32(tg->labels, y, local))
                return fail("filling the batch");
            if (kiln_graph_compute(tg->graph)) return fail("training step");
            kiln_status rc = kiln_dist_step(d);
            if (rc == KILN_ERR_NUMERIC) fprintf(stderr, "\n%s\n", kiln_last_error());
            else if (rc) return fail("optimizer step");
            loss_sum += kiln_dist_sum(kiln_tensor_item(tg->loss)) / world; /* the global batch's mean */
            progress_update(&bar, s + 1, loss_sum / (double)(s + 1), (double)batch);
        }
        progress_finish(&bar);
        if (me == 0 && (acc = model_accuracy(eg, test->images, test->labels, limit)) < 0) return fail("evaluating");
        printf("epoch %d: train loss %.4f  test accuracy %.2f%%\n", e + 1, loss_sum / (double)steps, 100 * acc);
    }
    double mine_bytes = opt ? (double)kiln_optim_state_bytes(opt) : 0, all = kiln_dist_sum(mine_bytes);
    printf("%s %s: test accuracy %.2f%%, optimizer state %.0f bytes on rank 0, %.0f on all %d ranks (%.2f per "
           "parameter), %.1f s\n",
           name, optimizer_name(id), 100 * acc, mine_bytes, all, world, all / (double)n_params, progress_now() - t0);
    free(x);
    free(y);
    free(idx);
    kiln_dist_sampler_free(smp);
    kiln_dist_free(d);
    return 0;
}
#endif

int main(int argc, char **argv) {
    int world = 1;
#ifdef KILN_MPI
    if (kiln_dist_launched() && kiln_dist_init(&argc, &argv)) return fail("starting MPI");
    world = kiln_dist_size();
    if (kiln_dist_rank() && !freopen("/dev/null", "w", stdout)) return fail("silencing the other ranks");
#endif
    const char *model_name = "cnn", *optim = "adamw", *backend = "cpu", *data_dir = DATA_FASHION_DIR;
    const char *save = NULL, *resume = NULL;
    int epochs = 3, stop = 0, batch = 128, threads = 0, limit = 0, rank = 32, hidden = 0;
    float lr = 0, wd = 0.01f, warmup = 0.05f;
    uint64_t seed = 1;
    args_opt opts[] = {
        {"model", ARGS_CHOICE, &model_name, "M", "the network", .choices = "mlp|cnn"},
        {"optim", ARGS_CHOICE, &optim, "O", "the optimizer",
         .choices = optimizer_choices()},
        {"lr", ARGS_FLOAT, &lr, "X", "peak learning rate (0: sgd 0.05, lion* 3e-4, the others 3e-3)", NULL, false},
        {"wd", ARGS_FLOAT, &wd, "X", "weight decay (decoupled; not used by sgd and adam)", NULL, false},
        {"warmup", ARGS_FLOAT, &warmup, "F", "fraction of the steps warming the lr up, then cosine to 0", NULL, false},
        {"rank", ARGS_INT, &rank, "N", "projection rank of galore* and apollo", .positive = true},
        {"epochs", ARGS_INT, &epochs, "N", "passes over the training set", .positive = true},
        {"batch", ARGS_INT, &batch, "N", "images per step", .positive = true},
        {"hidden", ARGS_INT, &hidden, "N", "hidden units (0: the model's default, mlp 256, cnn 128)", NULL, false},
        {"seed", ARGS_U64, &seed, "N", "seed of the weights and the data order", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", .choices = "cpu|vulkan|cuda"},
        {"data", ARGS_STRING, &data_dir, "DIR", "Fashion-MNIST's IDX files", NULL, false},
        {"save", ARGS_STRING, &save, "PATH", "write a checkpoint (weights + optimizer state) after each epoch", NULL, false},
        {"stop", ARGS_INT, &stop, "N", "stop after epoch N, to --resume later (0: run all)", NULL, false},
        {"resume", ARGS_STRING, &resume, "PATH", "continue from a checkpoint of the same configuration", NULL, false},
        {"limit", ARGS_INT, &limit, "N", "at most N training and N test batches per epoch (0: all; quick checks)", NULL, false},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    int r = args_parse("fashion", "Train an MLP or a CNN on Fashion-MNIST with any kiln optimizer.", opts, nopts, argc,
                       argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (warmup >= 1) return args_reject("fashion", opts, nopts, "warmup", "a fraction in [0, 1)"), 2;
    if (save && !output_file("fashion", "--save", save)) return 2;
    if (world > 1 && (save || resume || stop || batch % world))
        return fprintf(stderr, "fashion: on %d ranks --batch must be a multiple of %d, and --save, --resume and --stop "
                               "are not available\n", world, world), 2;
    optimizer_id optim_id = (optimizer_id)optimizer_parse(optim);
    if (lr == 0) lr = default_lr(optim_id);
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "fashion: --threads: %s\n", kiln_last_error()), 2;

    kiln_ctx *ctx = kiln_ctx_new();
    kiln_backend *be = kiln_backend_get(backend);
    if (!ctx || !be || kiln_ctx_set_backend(ctx, be)) return fail("choosing the backend");

    bool is_cnn = !strcmp(model_name, "cnn");
    data_layout layout = is_cnn ? DATA_NCHW : DATA_FLAT;
    data_images train, test;
    if (data_fashion_load(ctx, data_dir, DATA_TRAIN, layout, &train) ||
        data_fashion_load(ctx, data_dir, DATA_TEST, layout, &test)) {
        fprintf(stderr, "fashion: %s\n", data_last_error());
        return 1;
    }
    data_fashion_standardize(&train);
    data_fashion_standardize(&test);

    /* The model and its graphs: both models share model_graph. */
    model_graph tg, eg;
    int64_t n_params;
    void *model;
    if (is_cnn) {
        cnn_config c = cnn_defaults();
        if (hidden) c.hidden = hidden;
        cnn *m = cnn_new(ctx, &c, seed);
        if (!m || cnn_train_graph(m, batch / world, &tg) || cnn_eval_graph(m, EVAL_BATCH, &eg))
            return fail("building the CNN");
        n_params = cnn_param_count(m);
        model = m;
    } else {
        mlp_config c = mlp_defaults();
        if (hidden) c.hidden = hidden;
        mlp *m = mlp_new(ctx, &c, seed);
        if (!m || mlp_train_graph(m, batch / world, &tg) || mlp_eval_graph(m, EVAL_BATCH, &eg))
            return fail("building the MLP");
        n_params = mlp_param_count(m);
        model = m;
    }

#ifdef KILN_MPI
    if (world > 1) {
        int rc = train_distributed(ctx, &tg, &eg, &train, &test, optim_id,
                                   &(optimizer_settings){.lr = lr, .weight_decay = wd, .rank = rank, .seed = seed},
                                   epochs, batch, seed, limit, warmup, n_params, is_cnn ? "cnn" : "mlp");
        if (is_cnn) cnn_free(model);
        else mlp_free(model);
        kiln_ctx_free(ctx);
        kiln_dist_finalize();
        return rc;
    }
#endif
    data_loader *dl = data_loader_new(train.images, train.labels, batch, seed, true, true);
    if (!dl) return fprintf(stderr, "fashion: %s\n", data_last_error()), 1;
    int64_t steps = data_loader_batches_per_epoch(dl);
    if (limit && limit < steps) steps = limit;
    int64_t total = steps * epochs;

    /* Weight decay decoupled, none for sgd and adam; rank: GaLore's and
     * APOLLO's (APOLLO-Mini keeps its rank 1). GaLore in a build without
     * LAPACK fails here with KILN_ERR_UNSUPPORTED. */
    kiln_optim *opt = optimizer_new(ctx, optim_id,
                                    &(optimizer_settings){.lr = lr, .weight_decay = wd, .rank = rank, .seed = seed});
    if (!opt) return fail("making the optimizer");
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, (int64_t)(warmup * (double)total), total, 0.0f};
    if (kiln_optim_set_schedule(opt, &sched)) return fail("setting the schedule");
    /* a NaN or infinite loss or gradient skips its step (counted) */
    if (optimizer_guard(opt, tg.loss)) return fail("the non-finite guard");

    /* Resuming: the checkpoint restores the weights and the optimizer's
     * state, step count included; the data loader goes to that step. */
    int first_epoch = 0;
    if (resume) {
        if (kiln_checkpoint_load(opt, resume)) return fail("resuming");
        /* the checkpoint brings back the schedule it was saved with; ours
         * is the same unless --epochs changed, then the cosine stretches */
        if (kiln_optim_set_schedule(opt, &sched)) return fail("setting the schedule");
        int64_t done = kiln_optim_steps(opt) + kiln_optim_skipped_steps(opt); /* a skipped step used its batch */
        first_epoch = (int)(done / steps);
        if (data_loader_seek(dl, first_epoch, done % steps)) return fprintf(stderr, "fashion: %s\n", data_last_error()), 1;
        printf("resumed from %s at step %lld (epoch %d)\n", resume, (long long)done, first_epoch + 1);
    }

    printf("kiln %s: %s, %lld parameters; %s lr %g wd %g, batch %d, %d epoch(s) of %lld steps, %d thread(s), %s: %s\n",
           KILN_VERSION, is_cnn ? "CNN" : "MLP", (long long)n_params, optim, (double)lr, (double)wd, batch, epochs,
           (long long)steps, kiln_get_threads(), kiln_backend_name(be), kiln_backend_device(be));

    double t0 = progress_now(), acc = -1;
    int last = stop && stop < epochs ? stop : epochs;
    for (int e = first_epoch; e < last; e++) {
        char label[32];
        snprintf(label, sizeof label, "epoch %d/%d", e + 1, epochs);
        int64_t s0 = kiln_optim_steps(opt) + kiln_optim_skipped_steps(opt) - (int64_t)e * steps; /* > 0 only in a resumed epoch */
        if (s0 < 0) s0 = 0;
        progress bar;
        progress_start(&bar, stdout, label, steps, "img");
        double loss_sum = 0;
        for (int64_t s = s0; s < steps; s++) {
            if (data_loader_next(dl, tg.input, tg.labels) <= 0) return fprintf(stderr, "fashion: %s\n", data_last_error()), 1;
            if (kiln_graph_compute(tg.graph)) return fail("training step");
            if (optimizer_step(opt)) return fail("optimizer step");
            double loss = kiln_tensor_item(tg.loss);
            if (isfinite(loss)) loss_sum += loss;
            progress_update(&bar, s + 1, loss_sum / (double)(s + 1 - s0), (double)batch);
        }
        progress_finish(&bar);
        if (data_loader_seek(dl, e + 1, 0)) /* the next epoch, also after a --limit */
            return fprintf(stderr, "fashion: %s\n", data_last_error()), 1;
        acc = model_accuracy(&eg, test.images, test.labels, limit);
        if (acc < 0) return fail("evaluating");
        printf("epoch %d: train loss %.4f  test accuracy %.2f%%\n", e + 1, loss_sum / (double)(steps - s0), 100 * acc);
        if (save && kiln_checkpoint_save(opt, save)) return fail("saving the checkpoint");
    }
    if (acc < 0) acc = model_accuracy(&eg, test.images, test.labels, limit); /* resumed at the end: nothing left to train */
    printf("%s %s: test accuracy %.2f%%, optimizer state %zu bytes (%.2f per parameter), %.1f s\n",
           is_cnn ? "cnn" : "mlp", optim, 100 * acc, kiln_optim_state_bytes(opt),
           (double)kiln_optim_state_bytes(opt) / (double)n_params, progress_now() - t0);
    optimizer_print_skips(opt);
    if (save) printf("checkpoint: %s\n", save);

    data_loader_free(dl);
    if (is_cnn) cnn_free(model);
    else mlp_free(model);
    kiln_ctx_free(ctx);
#ifdef KILN_MPI
    kiln_dist_finalize();
#endif
    return 0;
}
