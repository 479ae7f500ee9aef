/* model.h — what the models in models/ share: the graphs they build and
 * how they make their parameters.
 *
 * Each model (mlp.h, cnn.h, resnet.h, gpt.h, llama.h) makes its parameters with
 * kiln_param() in the caller's context, named as PyTorch's state_dict keys,
 * and builds two graphs over them, both in that context:
 *
 *   - a training graph: input and label leaves, logits, the mean
 *     cross-entropy loss, and its backward pass (kiln_graph_backward), so
 *     one kiln_graph_compute() + kiln_optim_step() is one training step;
 *   - an evaluation graph: the same forward pass built with gradients
 *     disabled and the graph in eval mode (logits and loss, no backward).
 *
 * Usage, with any model (here the MLP):
 *
 *     kiln_ctx *ctx = kiln_ctx_new();
 *     mlp *m = mlp_new(ctx, NULL, 42);               // NULL: mlp_defaults()
 *     model_graph train;
 *     if (!m || mlp_train_graph(m, 64, &train)) die(kiln_last_error());
 *     kiln_optim *opt = kiln_adamw_new(ctx, NULL);
 *     // per step: fill train.input and train.labels, then
 *     kiln_graph_compute(train.graph);
 *     kiln_optim_step(opt);
 *     printf("loss %f\n", kiln_tensor_item(train.loss));
 *     mlp_free(m);                                   // the struct; tensors live in ctx
 *     kiln_ctx_free(ctx);
 *
 * Initialization is seeded per parameter from (seed, the parameter's name),
 * so the same seed gives the same weights whatever order the parameters
 * are made in. Saving and loading are the context's, by these names:
 * kiln_save_params(ctx, path) / kiln_load_params(ctx, path) (safetensors);
 * the models add no file format of their own.
 */
#ifndef MODEL_H
#define MODEL_H

#include "kiln.h"

/* The leaves and outputs of a model's graph. input is f32 (images) or i32
 * token ids [batch, seq]; labels is i32 (class per image, or next token per
 * position); loss is the mean cross-entropy (shape [1]). */
typedef struct model_graph {
    kiln_graph *graph;
    kiln_tensor *input, *labels;
    kiln_tensor *logits, *loss;
} model_graph;

/* How a parameter starts. */
typedef enum model_init {
    MODEL_INIT_ZEROS = 0,
    MODEL_INIT_ONES,
    MODEL_INIT_NORMAL, /* N(0, arg^2) */
    MODEL_INIT_LINEAR  /* torch.nn.Linear/Conv2d's U(-1/sqrt(arg), 1/sqrt(arg)), arg = fan_in */
} model_init;

/* A named f32 parameter of ctx, initialized from (seed, name). NULL on
 * failure with kiln's error set. */
kiln_tensor *model_param(kiln_ctx *ctx, const char *name, int ndim, const int64_t *shape, model_init init,
                         double arg, uint64_t seed);

/* A batch-norm layer as torch.nn.BatchNorm2d (affine, tracking running
 * statistics): "<prefix>.weight" (ones) and "<prefix>.bias" (zeros) are
 * parameters, "<prefix>.running_mean" (zeros) and "<prefix>.running_var"
 * (ones) buffers, so checkpoints hold all four (torch's num_batches_tracked
 * is not kept: momentum is always used). Its forward normalizes by the
 * batch and updates the running statistics when training is true (a
 * training graph), by the running statistics otherwise (an eval graph):
 * torch's module.train() / module.eval(), fixed when the graph is built. */
typedef struct model_bn {
    kiln_tensor *weight, *bias, *running_mean, *running_var;
} model_bn;
#define MODEL_BN_MOMENTUM 0.1
#define MODEL_BN_EPS 1e-5
/* false with kiln's error set on failure */
bool model_bn_init(model_bn *bn, kiln_ctx *ctx, const char *prefix, int64_t channels);
kiln_tensor *model_bn_forward(kiln_ctx *ctx, const model_bn *bn, kiln_tensor *x, bool training);

/* The seed a parameter named name gets from the model's seed. */
uint64_t model_param_seed(uint64_t seed, const char *name);

/* Add logits and loss to a new graph of ctx; with backward, append the
 * loss's backward pass, else put the graph in eval mode. g->input and
 * g->labels must already be set. */
kiln_status model_graph_finish(kiln_ctx *ctx, model_graph *g, kiln_tensor *logits, kiln_tensor *loss, bool backward);

/* A linear layer whose weight may carry a column permutation: y = x W^T +
 * b, or with perm (i32 [in]) y = x[..., perm] W^T + b. perm is NULL
 * normally (training, f32 or block-quantized weights); a GPTQ act-order
 * weight packed with kiln_gptq_pack stores its columns in quantization
 * order and comes with such a perm, and x's columns are gathered to match
 * (kiln_get_rows on the transposed [rows, in] view, as include/kiln.h
 * documents; differentiable in x). The models keep one perm pointer beside
 * each linear weight (gpt_block, llama_layer) and call this. b may be NULL.
 *
 *     kiln_tensor *perm, *wq = kiln_gptq_pack(ctx, r, KILN_GQ4_128, &perm);
 *     kiln_tensor *y = model_linear(ctx, x, wq, perm, NULL);  // x [B, T, in]
 */
kiln_tensor *model_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *perm, kiln_tensor *b);

/* What model_linear adds to a product: fn gets the layer's input x (before
 * any perm), its weight w and the product y, and returns y, or y plus
 * something where w is one it adapts (lora.h's adapters), NULL on an
 * error. Every registered hook sees every product built while it is
 * registered; none registered: model_linear is kiln_linear. At most 16 at
 * a time (KILN_ERR_STATE beyond); registering and building graphs are not
 * thread-safe. */
typedef kiln_tensor *(*model_linear_hook)(void *user, kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *y);
kiln_status model_linear_hook_add(model_linear_hook fn, void *user);
void model_linear_hook_remove(model_linear_hook fn, void *user);

/* Elements of the tensors in list (n of them). */
int64_t model_count(kiln_tensor *const *list, int n);

/* Fraction of the samples (inputs [N, ...] f32, labels [N] i32) that a
 * classifier's evaluation graph g gets right (largest logit = label),
 * batch by batch in order; max_batches 0: all. -1 on an error. */
double model_accuracy(model_graph *g, kiln_tensor *inputs, kiln_tensor *labels, int64_t max_batches);

#endif
