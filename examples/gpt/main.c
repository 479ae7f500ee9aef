/* gpt — train a byte-level GPT on the fortunes text, measure it in bits per
 * byte, and sample text from it.
 *
 * The model is models/gpt.h's GPT-2 (learned positions, pre-LayerNorm,
 * GELU MLP, tied embeddings) over a vocabulary of the 256 byte values; the
 * text is the `fortunes` package (models/data.h), of which every tenth
 * fortune is held out as validation text. The run, step by step:
 *
 *   1. load the corpus, make the model and its training graph once;
 *   2. AdamW (decay on matrices only, as nanoGPT), gradients clipped to
 *      norm 1, the learning rate warming up linearly and then falling on a
 *      cosine to 10% over the run (kiln_optim_set_schedule);
 *   3. each step trains on random windows of the training text: step s
 *      draws its windows from a generator seeded by (seed, s), so a run
 *      resumed at step s sees exactly the batches it would have seen;
 *   4. every --eval-every steps, the loss on a fixed subset of the
 *      validation text; at the end on all of it, in bits per byte (mean
 *      cross-entropy in nats / ln 2: a byte costs 8 bits uncompressed);
 *   5. a checkpoint (parameters + optimizer state, kiln_checkpoint_save)
 *      every --save-every steps and at the end; --resume continues one bit
 *      for bit, to the step count and schedule stored in it;
 *   6. text sampled from the trained model: a prompt, then --sample bytes
 *      drawn one at a time (temperature, top-k), each from a forward pass
 *      over the last --seq bytes (no KV cache: the window slides).
 *
 *     build/examples/gpt                   # the 10-minute run (README: its figures)
 *     build/examples/gpt --minutes 1       # a quick look
 *     build/examples/gpt --save gpt.safetensors --stop-at 500
 *     build/examples/gpt --resume gpt.safetensors --save gpt.safetensors
 *     build/examples/gpt --help
 *
 * With --minutes (and no --steps) the budget bounds the whole run: loading,
 * training, the estimates, the final evaluation and the sample. The number
 * of steps is set from the speed of the first ten steps and of the first
 * evaluation, keeping back the time of the final evaluation (every k-th
 * batch of the validation text when a full pass would take more than a
 * quarter of the budget) and of the sample; training stops early if the
 * machine slows down, an evaluation or the sample that reaches the
 * deadline stops there, and the output says each of these. The step count
 * is then fixed for the run (and stored in its checkpoints).
 *
 * Built with `make MPI=1`, it trains data-parallel under mpirun
 * (include/kiln_dist.h): each of N ranks draws its own --batch / N windows
 * per step (from a generator seeded by seed, step and rank), the gradients
 * are averaged over the ranks (all-reduce started during backward), the
 * norm clipped over all of them, and each rank keeps and steps the
 * optimizer state of its 1/N of the parameters (ZeRO-1). Rank 0 prints,
 * evaluates and samples. Such a run needs --steps (no time-sized run, no
 * checkpoints):
 *
 *     scripts/mpirun.sh -np 2 build/examples/gpt --steps 200
 */
#include "args.h"
#include "data.h"
#include "gpt.h"
#include "kiln.h"
#include "lm_eval.h"
#include "optimizers.h"
#include "output.h"
#include "progress.h"
#ifdef KILN_MPI
#include "kiln_dist.h"
#endif

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define CALIBRATION_STEPS 10 /* steps timed to size a --minutes run */
#define EVAL_BATCH 16        /* windows per evaluation batch */

/* Every kiln call reports failure by value; kiln_last_error() says why. */
static void die(const char *what) {
    fprintf(stderr, "gpt: %s: %s\n", what, kiln_last_error());
    exit(1);
}

/* splitmix64's finalizer: a well-mixed 64-bit hash, for seeds and draws. */
static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Print a line without tearing the progress bar drawn in place on a terminal. */
static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...) {
    if (isatty(fileno(stdout))) fputs("\r\033[K", stdout);
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

/* ---- evaluation: mean cross-entropy over validation windows (lm_eval.h) ---- */

/* A forward-only graph over EVAL_BATCH windows of seq bytes. */
static void evaluator_init(lm_eval *e, kiln_ctx *ctx, gpt *m, const data_text *text, int64_t seq) {
    kiln_ctx_set_grad_enabled(ctx, false); /* like torch.no_grad: no backward nodes */
    kiln_tensor *x = kiln_new_2d(ctx, KILN_I32, EVAL_BATCH, seq);
    if (lm_eval_init(e, ctx, x, gpt_forward(m, x), text)) die("building the evaluation graph");
    kiln_ctx_set_grad_enabled(ctx, true);
}

/* Mean loss over every stride-th batch, those that start before deadline
 * (INFINITY: all); *done (may be NULL) counts them. */
static double evaluate(lm_eval *e, int64_t stride, double deadline, int64_t *done) {
    double loss = lm_eval_loss_until(e, stride, deadline, done);
    if (loss < 0) {
        fprintf(stderr, "gpt: evaluating: %s %s\n", kiln_last_error(), data_last_error());
        exit(1);
    }
    return loss;
}

/* ---- sampling ---- */

/* Draw one byte from logits z: temperature 0 is greedy; top_k > 0 keeps
 * only the k most likely bytes. u is uniform in [0, 1). */
static int draw(const float *z, double temperature, int top_k, double u) {
    int best = 0;
    for (int v = 1; v < DATA_TEXT_VOCAB; v++) best = z[v] > z[best] ? v : best;
    if (temperature <= 0) return best;
    /* the k-th largest logit is the threshold (ties may keep a few more) */
    float cut = -INFINITY;
    if (top_k > 0 && top_k < DATA_TEXT_VOCAB) {
        float sorted[DATA_TEXT_VOCAB];
        memcpy(sorted, z, sizeof sorted);
        for (int i = 0; i < top_k; i++) /* partial selection sort: top_k is small */
            for (int j = i + 1; j < DATA_TEXT_VOCAB; j++)
                if (sorted[j] > sorted[i]) {
                    float t = sorted[i];
                    sorted[i] = sorted[j];
                    sorted[j] = t;
                }
        cut = sorted[top_k - 1];
    }
    double p[DATA_TEXT_VOCAB], total = 0;
    for (int v = 0; v < DATA_TEXT_VOCAB; v++) {
        p[v] = z[v] >= cut ? exp((double)(z[v] - z[best]) / temperature) : 0;
        total += p[v];
    }
    double r = u * total;
    for (int v = 0; v < DATA_TEXT_VOCAB; v++)
        if ((r -= p[v]) < 0) return v;
    return best;
}

/* Print the prompt and n sampled bytes after it, or those drawn before
 * deadline; returns how many. Each byte is predicted from the last seq
 * bytes: a causal model's logits at position w - 1 do not depend on what
 * follows, so the window is padded with zeros. Control bytes are written
 * as \xNN (output.h): the model may draw any byte. */
static int sample(kiln_ctx *ctx, gpt *m, int64_t seq, const char *prompt, int n, double temperature, int top_k,
                  uint64_t seed, double deadline) {
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_I32, 1, seq);
    kiln_tensor *logits = gpt_forward(m, x);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!logits || !g || kiln_graph_add(g, logits)) die("building the sampling graph");
    kiln_ctx_set_grad_enabled(ctx, true);
    size_t plen = strlen(prompt);
    /* an empty prompt starts a fresh fortune: the text before one ends "%\n" */
    const char *start = plen ? prompt : "%\n";
    size_t slen = strlen(start), cap = slen + (size_t)n;
    uint8_t *text = malloc(cap);
    int32_t *win = calloc((size_t)seq, sizeof *win);
    float *z = malloc((size_t)(seq * DATA_TEXT_VOCAB) * sizeof *z);
    if (!text || !win || !z) die("out of memory");
    memcpy(text, start, slen);
    text_stream out = {0};
    for (size_t i = 0; i < plen; i++) text_put(&out, stdout, (unsigned char)prompt[i]);
    uint64_t rng = mix(seed ^ 0x73616d706c65ull); /* "sample" */
    size_t len = slen;
    for (; len < cap && progress_now() < deadline; len++) {
        int64_t w = (int64_t)len < seq ? (int64_t)len : seq;
        for (int64_t t = 0; t < seq; t++) win[t] = t < w ? text[len - (size_t)w + (size_t)t] : 0;
        if (kiln_tensor_set_i32(x, win, seq) || kiln_graph_compute(g) ||
            kiln_tensor_get_f32(logits, z, seq * DATA_TEXT_VOCAB))
            die("sampling");
        double u = (double)((rng = mix(rng)) >> 11) * 0x1.0p-53;
        text[len] = (uint8_t)draw(z + (w - 1) * DATA_TEXT_VOCAB, temperature, top_k, u);
        text_put(&out, stdout, text[len]);
        fflush(stdout);
    }
    text_end(&out, stdout);
    putchar('\n');
    free(text);
    free(win);
    free(z);
    return (int)(len - slen);
}

/* ---- the optimizer ---- */

/* name: one of the --optim choices. nanoGPT's betas (0.9, 0.99) for the
 * Adam family and Lion (Adam's eps 1e-8); decoupled weight decay for AdamW
 * and Lion, none for Adam and SGD (momentum 0.9). */
static kiln_optim *make_optimizer(kiln_ctx *ctx, kiln_tensor *const *params, int n_params, int first,
                                  const char *name, float lr, float wd, bool clip) {
    kiln_optim *opt = optimizer_new_for(ctx, (optimizer_id)optimizer_parse(name), params, n_params, first,
                                        &(optimizer_settings){.lr = lr, .weight_decay = wd, .beta1 = 0.9f,
                                                              .beta2 = 0.99f, .eps = 1e-8f});
    if (!opt) die("making the optimizer");
    /* as nanoGPT: the matrices (embeddings included) decay, the 1-D
     * tensors (biases, LayerNorm gains and shifts) do not */
    kiln_tensor *flat[1024];
    int n = 0;
    for (int i = 0; i < n_params && n < 1024; i++)
        if (kiln_tensor_ndim(params[i]) < 2) flat[n++] = params[i];
    if (n && kiln_optim_set_group(opt, flat, n, 1.0f, 0.0f)) die("setting the parameter groups");
    if (clip && kiln_optim_set_clip_grad_norm(opt, 1.0f)) die("setting gradient clipping");
    return opt;
}

/* The step count stored in a checkpoint's schedule ("kind warmup total r"). */
static int64_t checkpoint_total_steps(const char *path) {
    kiln_safetensors *st = kiln_safetensors_open(path);
    if (!st) die("opening the checkpoint");
    const char *v = kiln_safetensors_metadata(st, "kiln.schedule");
    int kind;
    long long warmup, total = -1;
    if (!v || sscanf(v, "%d %lld %lld", &kind, &warmup, &total) != 3) total = -1;
    kiln_safetensors_close(st);
    if (total < 1) {
        fprintf(stderr, "gpt: %s: no step count in the checkpoint's schedule\n", path);
        exit(1);
    }
    return total;
}

/* ---- the time budget of a --minutes run ---- */

/* What a --minutes run has measured so far and what it plans. The final
 * evaluation takes at most a quarter of the budget (every k-th batch when
 * a full pass would take longer), the sample at most a twentieth, and a
 * margin of 2% (and 0.1 s) is kept for saving and printing; training
 * fills the rest. */
typedef struct budget {
    double seconds, deadline;  /* the whole run's; deadline on progress_now()'s clock */
    double train_s;            /* time of the training steps timed so far */
    int64_t train_steps;
    double eval_batch_s;       /* one evaluation batch (0: not measured yet) */
    int64_t eval_batches;      /* in a full pass over the validation text */
    int batch;                 /* windows of a training step */
    int sample_n;              /* bytes the sample asks for */
    int64_t final_stride;      /* the final evaluation's plan: every final_stride-th batch */
} budget;

static double per_step(const budget *b) { return b->train_steps ? b->train_s / (double)b->train_steps : 0; }

/* One evaluation batch: as measured, else from the training speed (forward
 * only: about a third of a step's work per window). */
static double eval_batch_s(const budget *b) {
    return b->eval_batch_s > 0 ? b->eval_batch_s : per_step(b) * EVAL_BATCH / (3.0 * b->batch);
}

static int64_t batches_at(const budget *b, int64_t stride) { return (b->eval_batches + stride - 1) / stride; }

static double margin_s(const budget *b) { return 0.02 * b->seconds + 0.1; }

/* The sample's share: a byte is a forward pass over one window (twice a
 * batch's per-window cost: one window keeps the cores less busy). */
static double sample_s(const budget *b) {
    double want = b->sample_n * 2 * eval_batch_s(b) / EVAL_BATCH;
    return want < 0.05 * b->seconds ? want : 0.05 * b->seconds;
}

/* Plan the final evaluation (every `stride`-th batch asked for; more apart
 * to fit a quarter of the budget) and return the seconds the end of the
 * run needs: that evaluation, the sample and the margin. */
static double end_reserve(budget *b, int64_t stride) {
    double per = eval_batch_s(b), cap = 0.25 * b->seconds;
    b->final_stride = stride;
    if (per > 0 && (double)batches_at(b, stride) * per > cap) {
        int64_t fit = (int64_t)(cap / per);
        b->final_stride = b->eval_batches / (fit > 1 ? fit : 1) + 1;
        if (b->final_stride < stride) b->final_stride = stride;
    }
    return (double)batches_at(b, b->final_stride) * per + sample_s(b) + margin_s(b);
}

int main(int argc, char **argv) {
    /* The defaults are the 10-minute run on 2 cores (README: its figures). */
    int steps = 0, batch = 16, seq = 128, layers = 4, width = 96, heads = 4, threads = 0;
    int warmup = 50, eval_every = 200, eval_subset = 16, save_every = 0, stop_at = 0, sample_n = 300, top_k = 40;
    float lr = 4e-3f, wd = 0.1f;
    double temperature = 0.8, minutes = 10;
    uint64_t seed = 1;
    bool final_subset = false, checkpoint = false;
    const char *optim = "adamw", *backend = "cpu", *data_dir = DATA_FORTUNES_DIR, *save = NULL, *resume = NULL,
               *prompt = "";
    args_opt opts[] = {
        {"steps", ARGS_INT, &steps, "N", "training steps (0: as many as fit in --minutes)", NULL, false},
        {"minutes", ARGS_DOUBLE, &minutes, "M", "time budget of the whole run, evaluation and sample included, when "
                                                "--steps is 0", NULL, true},
        {"batch", ARGS_INT, &batch, "N", "windows per step", NULL, true},
        {"seq", ARGS_INT, &seq, "T", "bytes per window (the model's context)", NULL, true},
        {"layers", ARGS_INT, &layers, "N", "transformer blocks", NULL, true},
        {"width", ARGS_INT, &width, "D", "model width (d_model)", NULL, true},
        {"heads", ARGS_INT, &heads, "N", "attention heads (must divide --width)", NULL, true},
        {"lr", ARGS_FLOAT, &lr, "X", "peak learning rate", NULL, true},
        {"wd", ARGS_FLOAT, &wd, "X", "decoupled weight decay of the matrices", NULL, false},
        {"warmup", ARGS_INT, &warmup, "N", "steps of linear warmup before the cosine", NULL, false},
        {"checkpoint", ARGS_FLAG, &checkpoint, NULL, "gradient checkpointing: recompute each block's activations in "
         "the backward pass instead of keeping them (less memory, the same gradients)", NULL, false},
        {"optim", ARGS_CHOICE, &optim, "NAME", "optimizer", "adamw|adamw8bit|adam|lion|lion8bit|sgd", false},
        {"seed", ARGS_U64, &seed, "N", "seed of the weights, the batches and the sampling", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", "cpu|vulkan|cuda", false},
        {"eval-every", ARGS_INT, &eval_every, "N", "steps between validation estimates (0: none)", NULL, false},
        {"eval-subset", ARGS_INT, &eval_subset, "N", "batches of 16 windows in those estimates", NULL, true},
        {"final-subset", ARGS_FLAG, &final_subset, NULL, "evaluate the end on that subset too, not all the text", NULL,
         false},
        {"save", ARGS_STRING, &save, "PATH", "checkpoint file, written at the end (and every --save-every)", NULL, false},
        {"save-every", ARGS_INT, &save_every, "N", "steps between checkpoints (0: only at the end)", NULL, false},
        {"resume", ARGS_STRING, &resume, "PATH", "continue the run saved in this checkpoint", NULL, false},
        {"stop-at", ARGS_INT, &stop_at, "N", "stop after step N (to --resume later); 0: at the end", NULL, false},
        {"sample", ARGS_INT, &sample_n, "N", "bytes of text to sample at the end", NULL, false},
        {"prompt", ARGS_STRING, &prompt, "TEXT", "text the sample continues", NULL, false},
        {"temperature", ARGS_DOUBLE, &temperature, "X", "sampling temperature (0: greedy)", NULL, false},
        {"top-k", ARGS_INT, &top_k, "K", "sample among the K likeliest bytes (0: all)", NULL, false},
        {"data", ARGS_STRING, &data_dir, "DIR", "the fortunes files", NULL, false},
    };
    const int nopts = (int)(sizeof opts / sizeof *opts);
    int r = args_parse("gpt", "Train a byte-level GPT on the fortunes text; report bits per byte; sample text.", opts,
                       nopts, argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (width % heads) return args_reject("gpt", opts, nopts, "heads", "a divisor of --width %d", width), 2;
    if (steps && warmup > steps) return args_reject("gpt", opts, nopts, "warmup", "at most --steps %d", steps), 2;
    if (save && !output_file("gpt", "--save", save)) return 2;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "gpt: --threads: %s\n", kiln_last_error()), 2;
    double t_start = progress_now();
    int world = 1, me = 0;
#ifdef KILN_MPI
    if (kiln_dist_launched() && kiln_dist_init(&argc, &argv)) die("starting MPI");
    world = kiln_dist_size();
    me = kiln_dist_rank();
    if (me && !freopen("/dev/null", "w", stdout)) die("silencing the other ranks");
#endif
    if (world > 1 && (!steps || save || resume || batch % world))
        return fprintf(stderr, "gpt: on %d ranks give --steps and a --batch that is a multiple of %d; --save and "
                               "--resume are not available\n", world, world), 2;

    /* 1. The corpus: training and validation bytes (models/data.h). */
    data_corpus corpus;
    if (data_fortunes_load(data_dir, &corpus)) {
        fprintf(stderr, "gpt: %s\n", data_last_error());
        return 1;
    }

    /* 2. The model, its training graph (forward, loss, backward) and the
     * optimizer, all in one context on the chosen backend. */
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_backend *be = kiln_backend_get(backend);
    if (!ctx || !be || kiln_ctx_set_backend(ctx, be)) die("choosing the backend");
    gpt_config cfg = {.vocab = DATA_TEXT_VOCAB, .context = seq, .layers = layers, .heads = heads, .width = width};
    gpt *m = gpt_new(ctx, &cfg, seed);
    model_graph train;
    if (m) m->checkpoint = checkpoint;
    if (!m || gpt_train_graph(m, batch / world, seq, &train)) die("building the model");
    kiln_optim *opt = NULL;
#ifdef KILN_MPI
    kiln_dist *dist = NULL;
    if (world > 1) {
        /* rank 0's weights everywhere; this rank's share of the optimizer */
        dist = kiln_dist_new(ctx, m->params, m->n_params, &(kiln_dist_config){.zero = true});
        kiln_tensor **mine;
        int n_mine, first_index;
        if (!dist) die("starting data parallelism");
        kiln_dist_shard(dist, &mine, &n_mine, &first_index);
        if (n_mine) opt = make_optimizer(ctx, mine, n_mine, first_index, optim, lr, wd, false);
        if (kiln_dist_set_optim(dist, opt) || kiln_dist_attach(dist, train.graph) ||
            kiln_dist_set_clip_grad_norm(dist, 1.0f))
            die("starting data parallelism");
        printf("data parallel: %d ranks, %d windows each per step of %d; ZeRO-1, rank 0 steps %d of %d tensors\n",
               world, batch / world, batch, n_mine, m->n_params);
    }
#endif
    if (world == 1) opt = make_optimizer(ctx, m->params, m->n_params, 0, optim, lr, wd, true);
    /* a NaN or infinite loss or gradient skips its step (counted, printed);
       under ZeRO-1 each rank guards its own shard of the averaged gradients */
    if (opt && optimizer_guard(opt, train.loss)) die("the non-finite guard");
    lm_eval ev;
    evaluator_init(&ev, ctx, m, &corpus.val, seq);

    /* 3. The schedule: warmup, then a cosine down to 10% of the peak at the
     * last step. A resumed run takes its step, step count and schedule from
     * the checkpoint. */
    bool sized_by_time = !steps && !resume;
    int64_t total = sized_by_time ? INT64_MAX / 2 : steps, step = 0; /* a --minutes run is sized after 10 steps */
    kiln_schedule sched = {KILN_SCHEDULE_COSINE, warmup, total, 0.1f};
    if (resume) {
        total = checkpoint_total_steps(resume);
        if (kiln_checkpoint_load(opt, resume)) die("loading the checkpoint");
        /* a skipped step (a non-finite gradient) still used its batch */
        step = kiln_optim_steps(opt) + kiln_optim_skipped_steps(opt);
    } else if (opt && kiln_optim_set_schedule(opt, &sched)) {
        die("setting the schedule");
    }
    int64_t last = stop_at && stop_at < total ? stop_at : total;

    printf("kiln %s: GPT %d layers, width %d, %d heads, context %d: %.2fM parameters; %s, lr %g, batch %d x %d bytes;"
           " %d thread(s), %s backend\n",
           KILN_VERSION, layers, width, heads, seq, (double)gpt_param_count(m) / 1e6, optim, (double)lr, batch, seq,
           kiln_get_threads(), kiln_backend_name(be));
    printf("training graph: %.1f MB of activations planned%s\n", (double)kiln_graph_planned_bytes(train.graph) / 1e6,
           checkpoint ? " (gradient checkpointing)" : "");
    printf("fortunes: %d files, %lld bytes: %lld training, %lld validation\n", corpus.files,
           (long long)corpus.total_bytes, (long long)corpus.train.n, (long long)corpus.val.n);
    if (resume) printf("resuming %s at step %lld of %lld\n", resume, (long long)step, (long long)total);

    /* A --minutes run ends by its deadline; other runs have none. */
    budget bud = {.seconds = 60 * minutes, .deadline = sized_by_time ? t_start + 60 * minutes : INFINITY,
                  .eval_batches = lm_eval_batches(&ev), .batch = batch, .sample_n = sample_n};
    /* The periodic estimates use every stride-th batch of the full pass: a
     * fixed subset spread over every file of the validation text. The first
     * one, at step 0, takes at most a quarter of a budget; if it stops
     * short, the later ones take as many batches. */
    int64_t stride = bud.eval_batches / eval_subset;
    stride = stride < 1 ? 1 : stride;
    if (eval_every && !resume && me == 0) {
        int64_t done;
        double t0 = progress_now(), loss = evaluate(&ev, stride, t_start + 0.25 * bud.seconds, &done);
        bud.eval_batch_s = done ? (progress_now() - t0) / (double)done : 0;
        printf("step 0: validation %.3f bits/byte (subset", loss / log(2));
        if (done < batches_at(&bud, stride)) {
            stride = bud.eval_batches / done + 1;
            printf(" of %lld batches: the time budget", (long long)done);
        }
        printf(")\n");
    }
    double t_subset = (double)batches_at(&bud, stride) * eval_batch_s(&bud); /* one periodic estimate */

    /* 4. Train. */
    /* the bar counts the steps of this session (a resumed run starts past 0) */
    progress pr;
    int64_t first = step;
    char label[64];
    snprintf(label, sizeof label, first ? "train from step %lld" : "train", (long long)first);
    progress_start(&pr, stdout, label, sized_by_time ? CALIBRATION_STEPS : last - first, "tok");
    data_text_sampler *sampler = NULL;
    double t_train0 = progress_now(), reserve = 0;
    bool sized = !sized_by_time;
    while (step < last) {
        double t_step = progress_now();
        /* step s's windows come from a generator seeded by (seed, s) */
        uint64_t draw = mix(seed * 0x100000001b3ull + (uint64_t)step) ^ (world > 1 ? mix((uint64_t)me + 1) : 0);
        sampler = data_text_sampler_new(&corpus.train, batch / world, seq, draw);
        if (!sampler || data_text_sampler_next(sampler, train.input, train.labels)) {
            fprintf(stderr, "gpt: %s\n", data_last_error());
            return 1;
        }
        data_text_sampler_free(sampler);
        if (kiln_graph_compute(train.graph)) die("training step");
        kiln_status s;
        double loss = kiln_tensor_item(train.loss);
#ifdef KILN_MPI
        if (dist) {
            s = kiln_dist_step(dist);
            loss = kiln_dist_sum(loss) / world; /* the whole batch's mean */
        } else
#endif
            s = kiln_optim_step(opt);
        if (s == KILN_ERR_NUMERIC) say("step %lld skipped: %s\n", (long long)step + 1, kiln_last_error());
        else if (s) die("optimizer step");
        step++;
        if (step > first + 1) { /* the first step also plans and allocates: 5x the others */
            bud.train_s += progress_now() - t_step;
            bud.train_steps++;
        }
        if (sized_by_time) reserve = end_reserve(&bud, final_subset ? stride : 1);
        bool out_of_time = step < last && progress_now() + per_step(&bud) + reserve > bud.deadline;

        if (!sized && (step == CALIBRATION_STEPS || progress_now() - t_train0 > 0.1 * bud.seconds || out_of_time)) {
            /* Size the run: what is left before the deadline, less the end's
             * reserve, at this speed per step plus the periodic estimates. */
            double left = bud.deadline - progress_now() - reserve;
            double per = per_step(&bud) + (eval_every ? t_subset / eval_every : 0);
            total = step + (left > 0 ? (int64_t)(left / per) : 0);
            if (total < sched.warmup_steps) {
                sched.warmup_steps = total / 10;
                say("warmup cut to %lld steps: the budget fits %lld\n", (long long)sched.warmup_steps,
                    (long long)total);
            }
            last = stop_at && stop_at < total ? stop_at : total;
            sched.total_steps = total;
            if (kiln_optim_set_schedule(opt, &sched)) die("setting the schedule");
            int64_t fb = batches_at(&bud, bud.final_stride);
            say("%.2f s per step: %lld steps fit in %g minutes, with the final evaluation (%lld batches, ~%.0f s) and "
                "the sample\n",
                per_step(&bud), (long long)total, minutes, (long long)fb, (double)fb * eval_batch_s(&bud));
            /* the bar again, now with its length, counting from the start */
            progress_start(&pr, stdout, label, last, "tok");
            pr.t0 = t_train0;
            pr.units = (double)(step - 1) * batch * seq;
            sized = true;
        }
        progress_update(&pr, step - first, loss, (double)batch * seq);

        if (eval_every && step % eval_every == 0 && step < last && me == 0) {
            int64_t done;
            double v = evaluate(&ev, stride, bud.deadline - reserve, &done);
            say("step %lld: validation %.3f bits/byte (subset%s), lr %.2e\n", (long long)step, v / log(2),
                done < batches_at(&bud, stride) ? ", cut short by the time budget" : "",
                (double)kiln_optim_lr_at(opt, step));
        }
        if (save && save_every && step % save_every == 0 && step < last && kiln_checkpoint_save(opt, save))
            die("saving the checkpoint");
        if (out_of_time || (step < last && progress_now() + per_step(&bud) + reserve > bud.deadline)) {
            say("the time budget is spent: stopping at step %lld of %lld\n", (long long)step, (long long)total);
            break;
        }
    }
    progress_finish(&pr);
    double t_train = progress_now() - t_train0;
    if (save) {
        if (kiln_checkpoint_save(opt, save)) die("saving the checkpoint");
        printf("saved %s (step %lld of %lld)\n", save, (long long)step, (long long)total);
    }

#ifdef KILN_MPI
    if (dist) {
        double mine = opt ? (double)kiln_optim_state_bytes(opt) : 0, all = kiln_dist_sum(mine);
        printf("optimizer state: %.0f bytes on rank 0, %.0f on all %d ranks\n", mine, all, world);
        kiln_dist_free(dist);
        if (me) { /* rank 0 evaluates and samples */
            kiln_dist_finalize();
            return 0;
        }
    }
#endif
    /* 5. The held-out text, all of it (or what the budget leaves): bits per byte. */
    int64_t final_stride = sized_by_time ? bud.final_stride : final_subset ? stride : 1, done;
    double t0 = progress_now();
    double val = evaluate(&ev, final_stride, bud.deadline - sample_s(&bud) - margin_s(&bud), &done);
    char over[160];
    if (final_stride == 1 && done == bud.eval_batches) snprintf(over, sizeof over, "all the validation text");
    else if (final_stride == stride && done == batches_at(&bud, stride)) snprintf(over, sizeof over, "the subset");
    else
        snprintf(over, sizeof over, "%lld of its %lld batches, spread over it (the time budget)", (long long)done,
                 (long long)bud.eval_batches);
    printf("validation: %.4f nats/byte = %.3f bits/byte over %s (%.0f s); trained %lld steps in %.1f min\n", val,
           val / log(2), over, progress_now() - t0, (long long)step, t_train / 60);
    optimizer_print_skips(opt);

    /* 6. Some text from the model. */
    if (sample_n) {
        printf("--- sample (temperature %g, top-k %d) ---\n", temperature, top_k);
        int got = sample(ctx, m, seq, prompt, sample_n, temperature, top_k, seed, bud.deadline - margin_s(&bud) / 2);
        if (got < sample_n) printf("--- the time budget ended the sample after %d of %d bytes ---\n", got, sample_n);
    }
    /* on a shared machine the wall clock says little: the CPU time too */
    printf("total time: %.1f min, %.1f min of CPU time\n", (progress_now() - t_start) / 60, (double)clock() / CLOCKS_PER_SEC / 60);
    lm_eval_free(&ev);
    gpt_free(m);
    kiln_ctx_free(ctx);
    data_corpus_free(&corpus);
#ifdef KILN_MPI
    kiln_dist_finalize();
#endif
    return 0;
}
