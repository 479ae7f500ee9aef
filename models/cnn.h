/* cnn.h — a small convolutional net for 28x28 images (Fashion-MNIST):
 *
 *   conv1 3x3 (padding 1) -> ReLU -> max_pool 2   [N, c1, 14, 14]
 *   conv2 3x3 (padding 1) -> ReLU -> max_pool 2   [N, c2, 7, 7]
 *   flatten -> fc1 -> ReLU                        [N, hidden]
 *   fc2                                           [N, classes]
 *
 * with torch's default init (U(-1/sqrt(fan_in), 1/sqrt(fan_in))).
 * Parameters: conv1.weight [c1, channels, 3, 3], conv1.bias, conv2.weight
 * [c2, c1, 3, 3], conv2.bias, fc1.weight [hidden, c2*(size/4)^2], fc1.bias,
 * fc2.weight [classes, hidden], fc2.bias. With hidden 0 the flattened
 * features go straight to the head, named fc.weight [classes, c2*(size/4)^2]
 * and fc.bias.
 * Graphs and usage: model.h; the input is f32 [N, channels, size, size].
 * The default reached 90.2% Fashion-MNIST test accuracy after 3 epochs of
 * AdamW (lr 2e-3 with a cosine schedule to 0, weight decay 0.01, batch 64,
 * seed 1; 88.5% without the hidden layer at lr 1e-3).
 *
 *     cnn *m = cnn_new(ctx, NULL, 1);        // 1 -> 16 -> 32 channels, 10 classes
 *     model_graph g;
 *     cnn_train_graph(m, 128, &g);           // g.input [128, 1, 28, 28], g.labels [128]
 */
#ifndef CNN_H
#define CNN_H

#include "model.h"

typedef struct cnn_config {
    int64_t channels; /* input channels */
    int64_t size;     /* input height = width, a multiple of 4 */
    int64_t c1, c2;   /* channels after conv1, conv2 */
    int64_t hidden;   /* units of the hidden linear layer; 0: none */
    int64_t classes;
    /* layers whose forward and backward products run in INT16 dynamic fixed
     * point (kiln_dfp_conv2d, kiln_dfp_linear; Das et al. 2018): bit 0
     * conv1, bit 1 conv2, bit 2 fc1, bit 3 the head; CNN_DFP_ALL for all, 0
     * (the default) for f32. Weights, biases, ReLU, pooling, the loss and
     * the optimizer stay f32. */
    unsigned dfp;
} cnn_config;
#define CNN_DFP_ALL 15u

/* 1 x 28 x 28 -> 16 -> 32 channels -> 128 hidden -> 10 classes */
cnn_config cnn_defaults(void);

typedef struct cnn {
    kiln_ctx *ctx;
    cnn_config cfg;
    kiln_tensor *conv1_w, *conv1_b, *conv2_w, *conv2_b;
    kiln_tensor *hidden_w, *hidden_b; /* fc1; NULL when cfg.hidden is 0 */
    kiln_tensor *fc_w, *fc_b;         /* the head: fc2 (or fc) */
    kiln_tensor *params[8]; /* those made, in state_dict order */
    int n_params;
} cnn;

/* cfg NULL: cnn_defaults(). NULL on failure (kiln_last_error() says why). */
cnn *cnn_new(kiln_ctx *ctx, const cnn_config *cfg, uint64_t seed);
void cnn_free(cnn *m);
/* logits [N, classes] of x [N, channels, size, size] */
kiln_tensor *cnn_forward(cnn *m, kiln_tensor *x);
kiln_status cnn_train_graph(cnn *m, int64_t batch, model_graph *out);
kiln_status cnn_eval_graph(cnn *m, int64_t batch, model_graph *out);
/* 9*channels*c1 + c1 + 9*c1*c2 + c2 + (F+1)*hidden + (hidden+1)*classes,
 * F = c2*(size/4)^2 (hidden 0: (F+1)*classes) */
int64_t cnn_param_count(const cnn *m);

#endif
