/* mlp.h — a multilayer perceptron for Fashion-MNIST: 784 -> hidden (ReLU)
 * -> 10, as torch.nn.Sequential(Linear, ReLU, Linear) with torch's default
 * init (U(-1/sqrt(fan_in), 1/sqrt(fan_in)) for weights and biases).
 * Parameters: fc1.weight [hidden, inputs], fc1.bias, fc2.weight
 * [classes, hidden], fc2.bias. Graphs and usage: model.h.
 *
 *     mlp *m = mlp_new(ctx, &(mlp_config){.inputs = 784, .hidden = 128, .classes = 10}, 1);
 *     model_graph g;
 *     mlp_train_graph(m, 64, &g);   // g.input f32 [64, 784], g.labels i32 [64]
 */
#ifndef MLP_H
#define MLP_H

#include "model.h"

typedef struct mlp_config {
    int64_t inputs, hidden, classes;
    /* layers whose forward and backward products run in INT16 dynamic fixed
     * point (kiln_dfp_linear; Das et al. 2018): bit 0 fc1, bit 1 fc2;
     * MLP_DFP_ALL for both, 0 (the default) for f32. Weights, biases,
     * activations, the loss and the optimizer stay f32. */
    unsigned dfp;
} mlp_config;
#define MLP_DFP_ALL 3u

/* 784 -> 256 -> 10 */
mlp_config mlp_defaults(void);

typedef struct mlp {
    kiln_ctx *ctx;
    mlp_config cfg;
    kiln_tensor *fc1_w, *fc1_b, *fc2_w, *fc2_b;
    kiln_tensor *params[4]; /* the four above, in that order */
    int n_params;
} mlp;

/* cfg NULL: mlp_defaults(). NULL on failure (kiln_last_error() says why). */
mlp *mlp_new(kiln_ctx *ctx, const mlp_config *cfg, uint64_t seed);
void mlp_free(mlp *m);
/* logits [..., classes] of x [..., inputs] */
kiln_tensor *mlp_forward(mlp *m, kiln_tensor *x);
kiln_status mlp_train_graph(mlp *m, int64_t batch, model_graph *out);
kiln_status mlp_eval_graph(mlp *m, int64_t batch, model_graph *out);
/* inputs*hidden + hidden + hidden*classes + classes */
int64_t mlp_param_count(const mlp *m);

#endif
