/* sine — the README's example: a 1-64-1 network learns sin(x). */
#include <kiln.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv) {
    if (argc > 1) { /* no options: --help says so, anything else is an error */
        int help = !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h");
        if (!help) fprintf(stderr, "sine: unknown option '%s'\n", argv[1]);
        fputs("usage: sine\nA 1-64-1 network learns sin(x) from 256 points with SGD; it takes no options.\n",
              help ? stdout : stderr);
        return help ? 0 : 2;
    }
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) { /* e.g. a $KILN_SIMD that names no level */
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    /* data: 256 points of y = sin(x), written straight into the leaves */
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 256, 1), *y = kiln_new_2d(ctx, KILN_F32, 256, 1);
    float *xv = kiln_tensor_data(x), *yv = kiln_tensor_data(y);
    for (int i = 0; i < 256; i++) xv[i] = -3.0f + 6.0f * (float)i / 255, yv[i] = sinf(xv[i]);
    /* model: linear -> tanh -> linear, weights [out, in] as in torch.nn.Linear */
    kiln_tensor *w1 = kiln_param(ctx, "w1", KILN_F32, 2, (int64_t[]){64, 1});
    kiln_tensor *b1 = kiln_param(ctx, "b1", KILN_F32, 1, (int64_t[]){64});
    kiln_tensor *w2 = kiln_param(ctx, "w2", KILN_F32, 2, (int64_t[]){1, 64});
    kiln_tensor *b2 = kiln_param(ctx, "b2", KILN_F32, 1, (int64_t[]){1});
    kiln_tensor_init_linear(w1, 1, 1);
    kiln_tensor_init_linear(w2, 2, 64);
    kiln_tensor *h = kiln_tanh(ctx, kiln_linear(ctx, x, w1, b1));
    kiln_tensor *loss = kiln_mse(ctx, kiln_linear(ctx, h, w2, b2), y);
    /* record forward and backward once; compute it every step */
    kiln_graph *g = kiln_graph_new(ctx);
    if (kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) {
        fprintf(stderr, "%s\n", kiln_last_error());
        return 1;
    }
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
    for (int step = 0; step <= 2000; step++) {
        if (kiln_graph_compute(g) || kiln_optim_step(opt)) {
            fprintf(stderr, "%s\n", kiln_last_error());
            return 1;
        }
        if (step % 500 == 0) printf("step %4d  loss %.5f\n", step, kiln_tensor_item(loss));
    }
    kiln_ctx_free(ctx);
    return 0;
}
