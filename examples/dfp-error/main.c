/* dfp-error — how much one shared exponent per tensor costs against one
 * per block of 64 (the KILN_DFP16 dtype), on the tensors a DFP training
 * step of the Fashion-MNIST CNN quantizes: the GEMM inputs (images and the
 * activations entering each layer), the weights, the weight gradients and
 * the gradient of the loss with respect to the logits. The CNN is trained
 * in f32 for a few hundred steps first, so the tensors are those of a net
 * that is learning, not of its initialization.
 *
 *     dfp-error [--steps 300] [--data DIR] [--threads N] [--backend cpu|vulkan|cuda]
 *     dfp-error --help
 *
 * Prints, per tensor, the relative RMS error |x - Q(x)| / |x| of three
 * quantizers: 16-bit per tensor, 16-bit per block of 64 (kiln_quantize to
 * KILN_DFP16) and 14-bit per tensor (the DFP GEMM operands). The exponent
 * rule is quant/dfp.h's: e = E_max - (bits - 2), q = round(x 2^-e). */
#include "args.h"
#include "cnn.h"
#include "data.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Relative RMS error of one exponent for all n values at the given bits. */
static double per_tensor(const float *x, int64_t n, int bits) {
    float amax = 0;
    for (int64_t i = 0; i < n; i++) amax = fmaxf(amax, fabsf(x[i]));
    if (amax == 0) return 0;
    int emax;
    frexpf(amax, &emax); /* amax = f 2^emax, f in [0.5, 1): E_max = emax - 1 */
    int e = emax - 1 - (bits - 2);
    double lim = ldexp(1, bits - 1) - 1, err = 0, ref = 0;
    for (int64_t i = 0; i < n; i++) {
        double q = fmin(fmax(rint(ldexp(x[i], -e)), -lim), lim), d = ldexp(q, e) - x[i];
        err += d * d, ref += (double)x[i] * x[i];
    }
    return sqrt(err / ref);
}

/* The same through the DFP16 dtype (blocks of 64; n padded with zeros). */
static double per_block(kiln_ctx *ctx, const float *x, int64_t n) {
    int64_t np = (n + 63) / 64 * 64;
    float *v = calloc((size_t)np, 4), *y = malloc((size_t)np * 4);
    memcpy(v, x, (size_t)n * 4);
    kiln_tensor *t = kiln_new_1d(ctx, KILN_F32, np);
    kiln_tensor_set_f32(t, v, np);
    kiln_tensor *q = kiln_quantize(ctx, t, KILN_DFP16);
    double err = 0, ref = 0;
    if (q && !kiln_tensor_get_f32(q, y, np))
        for (int64_t i = 0; i < n; i++) err += (double)(y[i] - x[i]) * (y[i] - x[i]), ref += (double)x[i] * x[i];
    free(v), free(y);
    return ref > 0 ? sqrt(err / ref) : 0;
}

static void row(kiln_ctx *ctx, const char *name, const float *x, int64_t n) {
    printf("%-22s %9lld   %9.3g   %9.3g   %9.3g\n", name, (long long)n, per_tensor(x, n, 16), per_block(ctx, x, n),
           per_tensor(x, n, 14));
}

static void row_t(kiln_ctx *ctx, const char *name, kiln_tensor *t) {
    int64_t n = kiln_tensor_numel(t);
    float *v = malloc((size_t)n * 4);
    if (!kiln_tensor_get_f32(t, v, n)) row(ctx, name, v, n);
    free(v);
}

int main(int argc, char **argv) {
    int steps = 300, threads = 0;
    const int64_t batch = 64;
    const char *dir = DATA_FASHION_DIR, *backend = "cpu";
    args_opt opts[] = {
        {"steps", ARGS_INT, &steps, "N", "f32 training steps before the tensors are measured", NULL, false},
        {"data", ARGS_STRING, &dir, "DIR", "Fashion-MNIST's IDX files", NULL, false},
        {"threads", ARGS_INT, &threads, "N", "worker threads (0: $KILN_THREADS, else all cores)", NULL, false},
        {"backend", ARGS_CHOICE, &backend, "B", "where the training runs", .choices = "cpu|vulkan|cuda"},
    };
    int r = args_parse("dfp-error",
                       "The error of one DFP exponent per tensor against one per block of 64, on the tensors of a "
                       "DFP training step of the Fashion-MNIST CNN.",
                       opts, (int)(sizeof opts / sizeof *opts), argc, argv);
    if (r != ARGS_OK) return r == ARGS_HELP ? 0 : 2;
    if (threads && kiln_set_threads(threads))
        return fprintf(stderr, "dfp-error: --threads: %s\n", kiln_last_error()), 2;
    kiln_ctx *ctx = kiln_ctx_new();
    if (strcmp(backend, "cpu")) { /* the training on the device; the errors are measured on the host */
        kiln_backend *b = kiln_backend_get(backend);
        if (!b) return fprintf(stderr, "dfp-error: --backend %s: %s\n", backend, kiln_last_error()), 1;
        kiln_ctx_set_backend(ctx, b);
    }
    data_images train;
    if (data_fashion_load(ctx, dir, DATA_TRAIN, DATA_NCHW, &train))
        return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
    data_fashion_standardize(&train);
    cnn *m = cnn_new(ctx, NULL, 1);
    model_graph g;
    if (!m || cnn_train_graph(m, batch, &g)) return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
    kiln_adam_config ac = kiln_adamw_defaults();
    ac.lr = 2e-3f;
    kiln_optim *opt = kiln_adamw_new(ctx, &ac);
    data_loader *dl = data_loader_new(train.images, train.labels, batch, 1, true, true);
    if (!opt || !dl) return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
    for (int64_t s = 0; s <= steps; s++) {
        if (data_loader_next(dl, g.input, g.labels) <= 0 && data_loader_next(dl, g.input, g.labels) <= 0)
            return fprintf(stderr, "dfp-error: %s\n", data_last_error()), 1;
        if (kiln_graph_compute(g.graph)) return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
        if (s < steps && kiln_optim_step(opt)) return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
    }
    printf("after %lld f32 steps (batch %lld), loss %.4f\n", (long long)steps, (long long)batch,
           kiln_tensor_item(g.loss));
    printf("%-22s %9s   %9s   %9s   %9s\n", "tensor", "elements", "16b/tensor", "16b/64", "14b/tensor");
    /* the activations entering each GEMM, on the last batch */
    kiln_conv2d_params p = {.padding = {1, 1}};
    kiln_tensor *a1 = kiln_max_pool2d(ctx, kiln_relu(ctx, kiln_conv2d(ctx, g.input, m->conv1_w, m->conv1_b, &p)), 2, 2, 2, 0);
    kiln_tensor *a2 = kiln_max_pool2d(ctx, kiln_relu(ctx, kiln_conv2d(ctx, a1, m->conv2_w, m->conv2_b, &p)), 2, 2, 2, 0);
    kiln_tensor *f = kiln_reshape(ctx, a2, 2, (int64_t[]){batch, -1});
    kiln_tensor *h = kiln_relu(ctx, kiln_linear(ctx, f, m->hidden_w, m->hidden_b));
    kiln_graph *ga = kiln_graph_new(ctx);
    if (!h || kiln_graph_add(ga, a1) || kiln_graph_add(ga, f) || kiln_graph_add(ga, h) || kiln_graph_compute(ga))
        return fprintf(stderr, "dfp-error: %s\n", kiln_last_error()), 1;
    row_t(ctx, "input images", g.input);
    row_t(ctx, "conv2 input", a1);
    row_t(ctx, "fc1 input", f);
    row_t(ctx, "fc2 input", h);
    /* d loss / d logits = (softmax - onehot) / N: the error entering backward */
    int64_t c = 10;
    float *lg = malloc((size_t)(batch * c) * 4);
    int32_t *lab = malloc((size_t)batch * 4);
    kiln_tensor_get_f32(g.logits, lg, batch * c);
    memcpy(lab, kiln_tensor_data(g.labels), (size_t)batch * 4);
    for (int64_t i = 0; i < batch; i++) {
        float mx = -INFINITY, s = 0;
        for (int64_t j = 0; j < c; j++) mx = fmaxf(mx, lg[i * c + j]);
        for (int64_t j = 0; j < c; j++) s += expf(lg[i * c + j] - mx);
        for (int64_t j = 0; j < c; j++) lg[i * c + j] = (expf(lg[i * c + j] - mx) / s - (j == lab[i])) / (float)batch;
    }
    row(ctx, "d loss/d logits", lg, batch * c);
    const char *names[8] = {"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias",
                            "fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
    for (int i = 0; i < m->n_params; i += 2) row_t(ctx, names[i], m->params[i]);
    char gname[40];
    for (int i = 0; i < m->n_params; i += 2) {
        snprintf(gname, sizeof gname, "grad %s", names[i]);
        row_t(ctx, gname, kiln_tensor_grad(m->params[i]));
    }
    free(lg), free(lab);
    data_loader_free(dl);
    cnn_free(m);
    kiln_ctx_free(ctx);
    return 0;
}
