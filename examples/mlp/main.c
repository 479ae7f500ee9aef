/* mlp — train a 784-256-256-10 multilayer perceptron on Fashion-MNIST.
 *
 * A tour of kiln in one file: load a data set, build a model out of op
 * constructors, build its training graph once (forward, backward and the
 * optimizer's update), then run it over shuffled batches, and measure the
 * accuracy on the test set with a second, forward-only graph.
 *
 *     build/examples/mlp --epochs 1
 *     build/examples/mlp --help
 *
 * The data come from the dataset-fashion-mnist package (scripts/deps.sh data).
 * With the defaults (2 epochs, batch 64, SGD with momentum 0.9 and a learning
 * rate falling from 0.05 to 0) it reaches about 88% test accuracy.
 */
#include "args.h"
#include "kiln.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PIXELS 784   /* 28 x 28 images, flattened */
#define HIDDEN 256
#define CLASSES 10
#define EVAL_BATCH 1000

/* Every kiln call reports failure by value; kiln_last_error() says why. */
static void die(const char *what) {
    fprintf(stderr, "mlp: %s: %s\n", what, kiln_last_error());
    exit(1);
}

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* splitmix64: a tiny seeded generator for the shuffle. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fisher-Yates: a uniformly random order of 0..n-1. */
static void shuffle(int32_t *order, int64_t n, uint64_t *rng) {
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(next_random(rng) % (uint64_t)(i + 1));
        int32_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

/* Load one IDX file; a missing file most likely means a missing package. */
static kiln_tensor *load(kiln_ctx *ctx, const char *dir, const char *name, bool labels) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    kiln_tensor *t = kiln_idx_load(ctx, path, labels, 1.0f / 255.0f); /* pixels 0..255 become 0..1 */
    if (t) return t;
    fprintf(stderr, "mlp: loading the data set: %s\n", kiln_last_error());
    if (kiln_last_status() == KILN_ERR_IO)
        fprintf(stderr, "mlp: Fashion-MNIST is missing: run scripts/deps.sh data (or pass --data DIR)\n");
    exit(1);
}

/* The model: weights w [out, in] and biases [out], as torch.nn.Linear. */
typedef struct { kiln_tensor *w[3], *b[3]; } mlp;

static mlp make_model(kiln_ctx *ctx, uint64_t seed) {
    static const int64_t in[3] = {PIXELS, HIDDEN, HIDDEN}, out[3] = {HIDDEN, HIDDEN, CLASSES};
    mlp m;
    for (int i = 0; i < 3; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i + 1);
        /* kiln_param: a leaf that owns a gradient; optimizers find it in ctx */
        m.w[i] = kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){out[i], in[i]});
        snprintf(name, sizeof name, "b%d", i + 1);
        m.b[i] = kiln_param(ctx, name, KILN_F32, 1, &out[i]);
        if (!m.w[i] || !m.b[i]) die("making the parameters");
        /* PyTorch's default: uniform in +-1/sqrt(fan_in) for weights and biases */
        kiln_tensor_init_linear(m.w[i], seed * 16 + 2 * (uint64_t)i, in[i]);
        kiln_tensor_init_linear(m.b[i], seed * 16 + 2 * (uint64_t)i + 1, in[i]);
    }
    return m;
}

/* Only records nodes: nothing is computed until a graph runs. A NULL from
 * any constructor flows through the later ones, so one check at the end
 * (in the caller) catches every error with the first message. */
static kiln_tensor *forward(kiln_ctx *ctx, const mlp *m, kiln_tensor *x) {
    kiln_tensor *h = kiln_relu(ctx, kiln_linear(ctx, x, m->w[0], m->b[0]));
    h = kiln_relu(ctx, kiln_linear(ctx, h, m->w[1], m->b[1]));
    return kiln_linear(ctx, h, m->w[2], m->b[2]); /* logits [batch, 10] */
}

/* Fraction of the test images classified right, in batches of EVAL_BATCH.
 * The last batch is aligned to the end of the set; rows already counted
 * in the batch before are skipped. */
static double evaluate(kiln_graph *g, kiln_tensor *x, kiln_tensor *pred, const float *images,
                       const int32_t *labels, int64_t n, int64_t eb) {
    int64_t correct = 0;
    for (int64_t i = 0; i < n; i += eb) {
        int64_t start = i + eb > n ? n - eb : i;
        memcpy(kiln_tensor_data(x), images + start * PIXELS, (size_t)(eb * PIXELS) * sizeof(float));
        if (kiln_graph_compute(g)) die("evaluating");
        const int32_t *p = kiln_tensor_data(pred);
        for (int64_t r = i - start; r < eb; r++) correct += p[r] == labels[start + r];
    }
    return (double)correct / (double)n;
}

int main(int argc, char **argv) {
    const char *dir = "/usr/share/datasets/fashion-mnist", *backend = "cpu";
    int epochs = 2, batch = 64, threads = 0;
    float lr = 0.05f;
    uint64_t seed = 1;
    args_opt opts[] = {
        {"data", ARGS_STRING, &dir, "DIR", "Fashion-MNIST's four .gz files", NULL, false},
        {"epochs", ARGS_INT, &epochs, "N", "passes over the 60000 training images", .positive = true},
        {"lr", ARGS_FLOAT, &lr, "X", "initial SGD learning rate, falling linearly to 0; momentum 0.9",
         .positive = true},
        {"batch", ARGS_INT, &batch, "N", "images per step", .positive = true},
        {"seed", ARGS_U64, &seed, "N", "seed of the initial weights and the shuffling", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the graphs run", .choices = "cpu|vulkan|cuda"},
    };
    int r = args_parse("mlp", "Train a 784-256-256-10 MLP on Fashion-MNIST with SGD.", opts,
                       (int)(sizeof opts / sizeof *opts), argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "mlp: --threads: %s\n", kiln_last_error()), 2;

    /* 1. A context owns every tensor, graph and optimizer made in it. */
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) die("making a context");
    /* Every graph of the context (the optimizer's step too) runs on this
     * backend; tensors get a device copy when a graph first uses them. */
    kiln_backend *be = kiln_backend_get(backend);
    if (!be || kiln_ctx_set_backend(ctx, be)) die("choosing the backend");
    kiln_tensor *train_x = load(ctx, dir, "train-images-idx3-ubyte.gz", false);
    kiln_tensor *train_y = load(ctx, dir, "train-labels-idx1-ubyte.gz", true);
    kiln_tensor *test_x = load(ctx, dir, "t10k-images-idx3-ubyte.gz", false);
    kiln_tensor *test_y = load(ctx, dir, "t10k-labels-idx1-ubyte.gz", true);
    int64_t n_train = kiln_tensor_dim(train_x, 0), n_test = kiln_tensor_dim(test_x, 0);
    if (kiln_tensor_numel(train_x) != n_train * PIXELS || kiln_tensor_numel(test_x) != n_test * PIXELS ||
        kiln_tensor_numel(train_y) != n_train || kiln_tensor_numel(test_y) != n_test)
        return fprintf(stderr, "mlp: the data are not 28x28 images with one label each\n"), 1;
    if (batch > n_train)
        return fprintf(stderr, "mlp: bad value %d for --batch (expected at most the %lld training images)\n", batch,
                       (long long)n_train), 2;
    float *train_img = kiln_tensor_data(train_x), *test_img = kiln_tensor_data(test_x);
    /* Standardize the pixels with the training set's mean and standard
     * deviation (0.286 and 0.353, as torchvision's Normalize would): inputs
     * centred on 0 make SGD converge faster. */
    for (int64_t i = 0; i < n_train * PIXELS; i++) train_img[i] = (train_img[i] - 0.286f) / 0.353f;
    for (int64_t i = 0; i < n_test * PIXELS; i++) test_img[i] = (test_img[i] - 0.286f) / 0.353f;
    const int32_t *train_lbl = kiln_tensor_data(train_y), *test_lbl = kiln_tensor_data(test_y);

    /* 2. The model and the training graph, built once for a fixed batch:
     * inputs are leaves whose storage we overwrite before every compute. */
    mlp model = make_model(ctx, seed);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, batch, PIXELS), *y = kiln_new_1d(ctx, KILN_I32, batch);
    kiln_tensor *loss = kiln_cross_entropy(ctx, forward(ctx, &model, x), y, -1);
    kiln_graph *train = kiln_graph_new(ctx);
    /* backward appends the gradient nodes: each compute adds into every
     * parameter's gradient, and the optimizer's step zeroes them again */
    if (!loss || kiln_graph_add(train, loss) || kiln_graph_backward(train, loss)) die("building the training graph");
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = lr, .momentum = 0.9f});
    /* a step whose loss or gradients hold a NaN or an infinity is skipped
     * and counted, not applied (as GradScaler's skip in PyTorch) */
    if (!opt || kiln_optim_set_skip_nonfinite(opt, true, loss)) die("making the optimizer");

    /* 3. The evaluation graph: same weights, a bigger batch, no gradients
     * (like torch.no_grad), and the predicted class of each row. */
    int64_t eb = n_test < EVAL_BATCH ? n_test : EVAL_BATCH;
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor *ex = kiln_new_2d(ctx, KILN_F32, eb, PIXELS);
    kiln_tensor *pred = kiln_argmax(ctx, forward(ctx, &model, ex), 1, false);
    kiln_graph *eval = kiln_graph_new(ctx);
    if (!pred || kiln_graph_add(eval, pred)) die("building the evaluation graph");
    kiln_ctx_set_grad_enabled(ctx, true);

    /* 4. Train: shuffle, copy each batch in, compute, step. */
    int32_t *order = malloc((size_t)n_train * sizeof *order);
    if (!order) return fprintf(stderr, "mlp: out of memory\n"), 1;
    for (int64_t i = 0; i < n_train; i++) order[i] = (int32_t)i;
    uint64_t rng = seed;
    int64_t steps = n_train / batch; /* the last partial batch is dropped */
    bool tty = isatty(fileno(stdout));
    printf("kiln %s: MLP %d-%d-%d-%d, %lld training images, batch %d, lr %g, %d thread(s), %s backend: %s\n",
           KILN_VERSION, PIXELS, HIDDEN, HIDDEN, CLASSES, (long long)n_train, batch, (double)lr, kiln_get_threads(),
           kiln_backend_name(be), kiln_backend_device(be));
    double t0 = now(), acc = 0;
    for (int e = 1; e <= epochs; e++) {
        shuffle(order, n_train, &rng);
        double loss_sum = 0;
        int loss_n = 0;
        for (int64_t s = 0; s < steps; s++) {
            /* ask for the pointers each step: that tells a device backend
             * the host has new bytes to copy over */
            float *xd = kiln_tensor_data(x);
            int32_t *yd = kiln_tensor_data(y);
            for (int r = 0; r < batch; r++) {
                int32_t k = order[s * batch + r];
                memcpy(xd + (int64_t)r * PIXELS, train_img + (int64_t)k * PIXELS, PIXELS * sizeof(float));
                yd[r] = train_lbl[k];
            }
            /* the learning rate falls linearly to 0 over the run: big steps
             * first, fine ones at the end. Setting it is cheap: it is a value
             * the optimizer's step graph reads, not part of the graph. */
            double done_frac = (double)((e - 1) * steps + s) / ((double)epochs * (double)steps);
            kiln_optim_set_lr(opt, lr * (float)(1.0 - done_frac));
            if (kiln_graph_compute(train)) die("training step");
            kiln_status st = kiln_optim_step(opt);
            if (st == KILN_ERR_NUMERIC) fprintf(stderr, "\n%s\n", kiln_last_error()); /* skipped: go on */
            else if (st) die("optimizer step");
            double l = kiln_tensor_item(loss);
            if (isfinite(l)) {
                loss_sum += l;
                loss_n++;
            }
            if ((s + 1) % 100 == 0 || s + 1 == steps) {
                double dt = now() - t0, done = (double)((e - 1) * steps + s + 1);
                double eta = dt / done * ((double)epochs * (double)steps - done);
                printf("%sepoch %d/%d  step %lld/%lld  loss %.4f  %.0f img/s  ETA %d:%02d%s", tty ? "\r" : "", e,
                       epochs, (long long)(s + 1), (long long)steps, loss_sum / loss_n, done * batch / dt,
                       (int)eta / 60, (int)eta % 60, tty ? "   " : "\n");
                fflush(stdout);
                loss_sum = 0;
                loss_n = 0;
            }
        }
        acc = evaluate(eval, ex, pred, test_img, test_lbl, n_test, eb);
        printf("%sepoch %d: test accuracy %.2f%%\n", tty ? "\n" : "", e, 100 * acc);
    }
    printf("test accuracy: %.2f%%\n", 100 * acc);
    printf("skipped steps (non-finite loss or gradient): %lld\n", (long long)kiln_optim_skipped_steps(opt));
    printf("total time: %.1f s\n", now() - t0);
    free(order);
    kiln_ctx_free(ctx);
    return 0;
}
