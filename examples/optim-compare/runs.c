/* runs.c — the two tasks and one training run, in a forked child.
 *
 * The parent loads the data once and then only forks, waits and reads
 * results: it never runs a kiln graph. So each child starts OpenMP and the
 * backend fresh (OpenMP's thread pool does not survive a fork), and
 * wait4() gives each run's own peak RSS. The data pages are shared with
 * the parent, so every peak includes the data once (the table says how
 * much that is).
 */
#include "compare.h"

#include "progress.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Skipped steps in a row that mark a run as diverged: past some step the
 * model makes nothing but NaN or infinities. */
#define MAX_SKIPS_IN_A_ROW 10

#define CNN_VAL 5000 /* training images held out for validation */
static kiln_tensor *copy_rows(kiln_ctx *ctx, kiln_tensor *src, int64_t from, int64_t n) {
    int nd = kiln_tensor_ndim(src);
    int64_t shape[4];
    for (int i = 0; i < nd && i < 4; i++) shape[i] = kiln_tensor_dim(src, i);
    int64_t row = kiln_tensor_numel(src) / shape[0];
    shape[0] = n;
    kiln_tensor *t = kiln_tensor_new(ctx, kiln_tensor_dtype(src), nd, shape);
    if (!t) return NULL;
    size_t es = kiln_tensor_nbytes(src) / (size_t)kiln_tensor_numel(src);
    memcpy(kiln_tensor_data(t), (char *)kiln_tensor_data(src) + (size_t)(from * row) * es, (size_t)(n * row) * es);
    return t;
}

kiln_status task_load(task *t, task_kind kind, bool quick, int64_t steps, int64_t eval, char *err, size_t errn) {
    memset(t, 0, sizeof *t);
    t->kind = kind;
    if (kind == TASK_CNN) {
        t->name = "cnn";
        t->title = "Fashion-MNIST CNN";
        t->cnn = cnn_defaults(); /* 16 -> 32 channels, 128 hidden */
        if (quick) t->cnn.c1 = 8, t->cnn.c2 = 16, t->cnn.hidden = 64;
        t->batch = quick ? 32 : 64;
        t->steps = quick ? 150 : 1500;
        t->eval_batch = 500;
        t->rank = (int)(t->cnn.hidden / 4); /* fc1 is [hidden, c2*7*7] */
        /* read both splits into a scratch context, keep copies of the parts
         * used (training, validation, test), then free the originals */
        kiln_ctx *tmp = kiln_ctx_new();
        if (!tmp || !(t->data_ctx = kiln_ctx_new())) {
            if (tmp) kiln_ctx_free(tmp);
            return snprintf(err, errn, "%s", kiln_last_error()), KILN_ERR_OOM;
        }
        data_images train, test;
        if (data_fashion_load(tmp, NULL, DATA_TRAIN, DATA_NCHW, &train) ||
            data_fashion_load(tmp, NULL, DATA_TEST, DATA_NCHW, &test)) {
            snprintf(err, errn, "%s", data_last_error());
            kiln_ctx_free(tmp);
            return KILN_ERR_IO;
        }
        /* standardize as torchvision's Normalize((0.2860,), (0.3530,)) */
        kiln_tensor *imgs[2] = {train.images, test.images};
        for (int k = 0; k < 2; k++) {
            float *p = kiln_tensor_data(imgs[k]);
            for (int64_t i = 0, n = kiln_tensor_numel(imgs[k]); i < n; i++)
                p[i] = (p[i] - DATA_FASHION_MEAN) / DATA_FASHION_STD;
        }
        int64_t n_train = train.n - CNN_VAL;
        t->val_n = quick ? 2000 : CNN_VAL;
        t->test_n = test.n;
        if (eval > 0 && eval < t->val_n) t->val_n = eval;
        if (eval > 0 && eval < t->test_n) t->test_n = eval;
        t->train_x = copy_rows(t->data_ctx, train.images, 0, n_train);
        t->train_y = copy_rows(t->data_ctx, train.labels, 0, n_train);
        t->val_x = copy_rows(t->data_ctx, train.images, n_train, t->val_n);
        t->val_y = copy_rows(t->data_ctx, train.labels, n_train, t->val_n);
        t->test_x = copy_rows(t->data_ctx, test.images, 0, t->test_n);
        t->test_y = copy_rows(t->data_ctx, test.labels, 0, t->test_n);
        kiln_ctx_free(tmp);
        if (!t->train_x || !t->train_y || !t->val_x || !t->val_y || !t->test_x || !t->test_y)
            return snprintf(err, errn, "%s", kiln_last_error()), KILN_ERR_OOM;
    } else {
        t->name = "gpt";
        t->title = "byte-level GPT on fortunes";
        t->gpt = gpt_defaults();
        t->gpt.layers = 2;
        t->gpt.heads = quick ? 2 : 4;
        t->gpt.width = quick ? 64 : 128;
        t->gpt.context = quick ? 32 : 64;
        t->batch = quick ? 8 : 16;
        t->steps = quick ? 150 : 1000;
        t->eval_batch = 16;
        t->rank = (int)(t->gpt.width / 4); /* the blocks' matrices are [k d, d] */
        if (data_fortunes_load(NULL, &t->corpus)) {
            snprintf(err, errn, "%s", data_last_error());
            return KILN_ERR_IO;
        }
        /* 8 (quick) or 32 evaluation batches spread over the text, or the
         * batches of eval windows */
        int64_t nb = data_text_eval_batches(&t->corpus.val, t->eval_batch, t->gpt.context);
        int64_t want = eval > 0 ? (eval + t->eval_batch - 1) / t->eval_batch : quick ? 8 : 32;
        t->val_every = nb / want;
        if (t->val_every < 1) t->val_every = 1;
    }
    if (steps > 0) t->steps = steps;
    t->sweep_steps = t->steps / 3;
    if (t->sweep_steps < 1) t->sweep_steps = 1;
    return KILN_OK;
}

void task_free(task *t) {
    if (t->data_ctx) kiln_ctx_free(t->data_ctx);
    if (t->kind == TASK_GPT) data_corpus_free(&t->corpus);
    memset(t, 0, sizeof *t);
}

/* ---- the child ------------------------------------------------------------ */

static int fail(run_result *r, run_status s, const char *what) {
    r->status = s;
    snprintf(r->error, sizeof r->error, "%s: %s", what, kiln_last_error());
    return 1;
}

/* Mean loss and accuracy of the CNN over images x, labels y. */
static int eval_cnn(model_graph *g, kiln_tensor *x, kiln_tensor *y, uint64_t seed, double *loss, double *acc) {
    data_loader *dl = data_loader_new(x, y, kiln_tensor_dim(g->input, 0), seed, false, false);
    if (!dl) return -1;
    double sum = 0;
    int64_t n = 0, right = 0, got;
    while ((got = data_loader_next(dl, g->input, g->labels)) > 0) {
        if (kiln_graph_compute(g->graph)) break;
        sum += kiln_tensor_item(g->loss) * (double)got;
        const float *lg = kiln_tensor_data(g->logits);
        const int32_t *lb = kiln_tensor_data(g->labels);
        int64_t c = kiln_tensor_dim(g->logits, 1);
        for (int64_t i = 0; i < got; i++) {
            int64_t best = 0;
            for (int64_t k = 1; k < c; k++)
                if (lg[i * c + k] > lg[i * c + best]) best = k;
            right += best == lb[i];
        }
        n += got;
    }
    data_loader_free(dl);
    if (got != 0 || n == 0) return -1;
    *loss = sum / (double)n;
    *acc = (double)right / (double)n;
    return 0;
}

/* Mean loss of the GPT over every val_every-th evaluation batch. */
static int eval_gpt(const task *t, model_graph *g, double *loss) {
    const data_text *val = &t->corpus.val;
    int64_t nb = data_text_eval_batches(val, t->eval_batch, t->gpt.context), n = 0;
    double sum = 0;
    for (int64_t i = t->val_every / 2; i < nb; i += t->val_every) {
        int64_t got = data_text_eval_batch(val, t->eval_batch, t->gpt.context, i, g->input, g->labels);
        if (got <= 0) return -1;
        if (kiln_graph_compute(g->graph)) return -1;
        sum += kiln_tensor_item(g->loss) * (double)got;
        n += got;
    }
    if (n == 0) return -1;
    *loss = sum / (double)n;
    return 0;
}

static int child_run(const task *t, optimizer_id id, double lr, int64_t steps, const run_opts *o, run_result *r) {
    if (o->threads) kiln_set_threads(o->threads);
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return fail(r, RUN_FAILED, "kiln_ctx_new");
    kiln_backend *be = kiln_backend_get(o->backend);
    if (!be || kiln_ctx_set_backend(ctx, be)) return fail(r, RUN_FAILED, "choosing the backend");

    model_graph train, eval;
    cnn *c = NULL;
    gpt *m = NULL;
    if (t->kind == TASK_CNN) {
        if (!(c = cnn_new(ctx, &t->cnn, o->seed)) || cnn_train_graph(c, t->batch, &train) ||
            cnn_eval_graph(c, t->eval_batch, &eval))
            return fail(r, RUN_FAILED, "building the CNN");
    } else {
        if (!(m = gpt_new(ctx, &t->gpt, o->seed)) || gpt_train_graph(m, t->batch, t->gpt.context, &train) ||
            gpt_eval_graph(m, t->eval_batch, t->gpt.context, &eval))
            return fail(r, RUN_FAILED, "building the GPT");
    }
    kiln_optim *opt = optim_make(ctx, id, lr, t, steps);
    if (!opt)
        return fail(r, kiln_last_status() == KILN_ERR_UNSUPPORTED ? RUN_UNSUPPORTED : RUN_FAILED,
                    "making the optimizer");
    /* 5% warmup, then cosine decay to a tenth: the same for every optimizer */
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, steps / 20, steps, 0.1f};
    if (kiln_optim_set_schedule(opt, &sched)) return fail(r, RUN_FAILED, "setting the schedule");
    /* the GPT clips gradients as GPT-2 and nanoGPT do */
    if (t->kind == TASK_GPT && kiln_optim_set_clip_grad_norm(opt, 1.0f)) return fail(r, RUN_FAILED, "clipping");
    /* a NaN or infinite loss or gradient skips its step, counted */
    if (optimizer_guard(opt, train.loss)) return fail(r, RUN_FAILED, "the non-finite guard");
    r->state_bytes = kiln_optim_state_bytes(opt);

    /* the same batches in the same order for every optimizer */
    data_loader *dl = NULL;
    data_text_sampler *ts = NULL;
    if (t->kind == TASK_CNN) dl = data_loader_new(t->train_x, t->train_y, t->batch, o->seed, true, true);
    else ts = data_text_sampler_new(&t->corpus.train, t->batch, t->gpt.context, o->seed);
    if (!dl && !ts) return fail(r, RUN_FAILED, "the batch iterator");

    progress p;
    bool show = o->full && isatty(fileno(stdout));
    if (show) {
        char label[64];
        snprintf(label, sizeof label, "  %s %s", t->name, optimizer_title(id));
        progress_start(&p, stdout, label, steps, t->kind == TASK_CNN ? "img" : "tok");
    }
    double units = (double)t->batch * (t->kind == TASK_CNN ? 1.0 : (double)t->gpt.context);
    double t0 = progress_now();
    int64_t run_of_skips = 0;
    for (int64_t s = 0; s < steps; s++) {
        if (dl) {
            int64_t got = data_loader_next(dl, train.input, train.labels);
            if (got == 0) got = data_loader_next(dl, train.input, train.labels); /* next epoch */
            if (got <= 0) return fail(r, RUN_FAILED, data_last_error());
        } else if (data_text_sampler_next(ts, train.input, train.labels)) {
            return fail(r, RUN_FAILED, data_last_error());
        }
        if (kiln_graph_compute(train.graph)) return fail(r, RUN_FAILED, "training step");
        kiln_status st = kiln_optim_step(opt);
        double loss = kiln_tensor_item(train.loss);
        /* a skipped step keeps the curve at the last loss; a run that
         * keeps producing non-finite values (the guard skips everything
         * from some step on) has diverged */
        if (st == KILN_ERR_NUMERIC) {
            r->skipped++;
            run_of_skips++;
            loss = s ? r->curve[s - 1] : NAN;
        } else run_of_skips = 0;
        r->curve[s] = (float)loss;
        if (run_of_skips >= MAX_SKIPS_IN_A_ROW || (st != KILN_ERR_NUMERIC && !isfinite(loss))) {
            for (int64_t k = s + 1; k < steps; k++) r->curve[k] = NAN;
            if (show) progress_finish(&p);
            r->status = RUN_DIVERGED;
            snprintf(r->error, sizeof r->error, "diverged at step %lld", (long long)s + 1);
            r->train_loss = r->val_loss = r->metric = INFINITY;
            r->sec_per_step = (progress_now() - t0) / (double)(s + 1);
            return 0;
        }
        if (st && st != KILN_ERR_NUMERIC) return fail(r, RUN_FAILED, "optimizer step");
        if (show && isfinite(loss)) progress_update(&p, s + 1, loss, units);
    }
    r->sec_per_step = (progress_now() - t0) / (double)steps;
    if (show) progress_finish(&p);
    data_loader_free(dl);
    data_text_sampler_free(ts);

    int64_t tail = steps / 10 < 1 ? 1 : steps / 10;
    double sum = 0;
    for (int64_t s = steps - tail; s < steps; s++) sum += r->curve[s];
    r->train_loss = sum / (double)tail;
    if (t->kind == TASK_CNN) {
        if (eval_cnn(&eval, t->val_x, t->val_y, o->seed, &r->val_loss, &r->metric))
            return fail(r, RUN_FAILED, "evaluating");
        double test_loss;
        if (o->full && eval_cnn(&eval, t->test_x, t->test_y, o->seed, &test_loss, &r->test_acc))
            return fail(r, RUN_FAILED, "testing");
    } else {
        if (eval_gpt(t, &eval, &r->val_loss)) return fail(r, RUN_FAILED, "evaluating");
        r->metric = r->val_loss / log(2.0); /* nats per byte -> bits per byte */
    }
    if (!isfinite(r->val_loss)) {
        r->status = RUN_DIVERGED;
        snprintf(r->error, sizeof r->error, "validation loss not finite");
        r->val_loss = r->metric = INFINITY;
    }
    if (c) cnn_free(c);
    if (m) gpt_free(m);
    kiln_ctx_free(ctx);
    return 0;
}

static int write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return -1;
        p += w, n -= (size_t)w;
    }
    return 0;
}

static size_t read_all(int fd, void *buf, size_t n) {
    char *p = buf;
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, p + got, n - got);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        got += (size_t)k;
    }
    return got;
}

void run_forked(const task *t, optimizer_id id, double lr, int64_t steps, const run_opts *o, run_result *r) {
    memset(r, 0, sizeof *r);
    r->lr = lr;
    r->steps = steps;
    r->test_acc = NAN;
    r->curve = calloc((size_t)steps, sizeof *r->curve);
    int fd[2];
    if (!r->curve || pipe(fd)) {
        r->status = RUN_FAILED;
        snprintf(r->error, sizeof r->error, "out of memory or pipes");
        return;
    }
    fflush(NULL);
    double t0 = progress_now();
    pid_t pid = fork();
    if (pid == 0) { /* the child: train, send the result, leave */
        close(fd[0]);
        child_run(t, id, lr, steps, o, r);
        int rc = write_all(fd[1], r, sizeof *r) || write_all(fd[1], r->curve, (size_t)steps * sizeof *r->curve);
        fflush(NULL);
        _exit(rc ? 1 : 0);
    }
    close(fd[1]);
    if (pid < 0) {
        close(fd[0]);
        r->status = RUN_FAILED;
        snprintf(r->error, sizeof r->error, "fork: %s", strerror(errno));
        return;
    }
    run_result got;
    float *curve = r->curve;
    size_t n = read_all(fd[0], &got, sizeof got);
    size_t nc = n == sizeof got ? read_all(fd[0], curve, (size_t)steps * sizeof *curve) : 0;
    close(fd[0]);
    int wstatus = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &wstatus, 0, &ru) < 0 && errno == EINTR) {}
    if (n == sizeof got && nc == (size_t)steps * sizeof *curve) {
        *r = got;
        r->curve = curve;
    } else {
        r->status = RUN_FAILED;
        if (WIFSIGNALED(wstatus))
            snprintf(r->error, sizeof r->error, "the run died of signal %d", WTERMSIG(wstatus));
        else
            snprintf(r->error, sizeof r->error, "the run exited with status %d", WEXITSTATUS(wstatus));
    }
    r->peak_rss_kb = ru.ru_maxrss;
    r->wall_s = progress_now() - t0;
}

void run_result_free(run_result *r) {
    free(r->curve);
    r->curve = NULL;
}
