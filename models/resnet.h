/* resnet.h — a ResNet of BasicBlocks with batch norm (He et al. 2016), as
 * torchvision's resnet18 adapted to 32x32 images (CIFAR's): a 3x3 stem of
 * stride 1 and no max-pool, then stages of BasicBlocks
 *
 *   conv 3x3 (stride s) -> BN -> ReLU -> conv 3x3 -> BN -> + shortcut -> ReLU
 *
 * (the shortcut a 1x1 conv of stride s with BN where the shape changes,
 * else the identity), each stage after the first halving the size, then
 * the global average pool and a linear head. Parameter and buffer names are
 * torchvision's state_dict keys: conv1.weight, bn1.{weight, bias,
 * running_mean, running_var}, layer1.0.conv1.weight, layer1.0.bn1.*, ...,
 * layer2.0.downsample.0.weight, layer2.0.downsample.1.*, fc.weight,
 * fc.bias (no num_batches_tracked). Convolutions have no bias and start as
 * torchvision's (Kaiming normal, fan_out); BN starts at weight 1, bias 0;
 * the head as nn.Linear.
 * The training graph normalizes by each batch and updates the running
 * statistics; the eval graph uses them (model.h's model_bn).
 *
 *     resnet *m = resnet_new(ctx, NULL, 1);  // resnet18_cifar(): 11.2M parameters
 *     model_graph g;
 *     resnet_train_graph(m, 128, &g);        // g.input [128, 3, 32, 32], g.labels [128]
 *     kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f, .momentum = 0.9f, .weight_decay = 5e-4f});
 */
#ifndef RESNET_H
#define RESNET_H

#include "model.h"

#define RESNET_MAX_STAGES 4
#define RESNET_MAX_BLOCKS 8

typedef struct resnet_config {
    int64_t channels; /* input channels */
    int64_t size;     /* input height = width */
    int64_t classes;
    int stages;       /* 1 to RESNET_MAX_STAGES */
    int64_t widths[RESNET_MAX_STAGES]; /* channels of each stage (the stem has widths[0]) */
    int blocks[RESNET_MAX_STAGES];     /* BasicBlocks per stage, 1 to RESNET_MAX_BLOCKS */
} resnet_config;

/* ResNet-18 for 3 x 32 x 32: 64, 128, 256, 512 channels, 2 blocks each, 10 classes */
resnet_config resnet18_cifar(void);
/* A small one for tests: 3 x 8 x 8, 4 and 8 channels, 1 block each, 3 classes */
resnet_config resnet_tiny(void);

typedef struct resnet_block {
    kiln_tensor *conv1_w, *conv2_w, *down_w; /* down_w NULL: the identity shortcut */
    model_bn bn1, bn2, down_bn;
    int stride;
} resnet_block;

typedef struct resnet {
    kiln_ctx *ctx;
    resnet_config cfg;
    kiln_tensor *conv1_w;
    model_bn bn1;
    resnet_block blocks[RESNET_MAX_STAGES][RESNET_MAX_BLOCKS];
    kiln_tensor *fc_w, *fc_b;
} resnet;

/* cfg NULL: resnet18_cifar(). NULL on failure (kiln_last_error() says why). */
resnet *resnet_new(kiln_ctx *ctx, const resnet_config *cfg, uint64_t seed);
void resnet_free(resnet *m);
/* logits [N, classes] of x [N, channels, size, size]; training: batch
 * statistics (and running ones updated) or the running ones */
kiln_tensor *resnet_forward(resnet *m, kiln_tensor *x, bool training);
kiln_status resnet_train_graph(resnet *m, int64_t batch, model_graph *out);
kiln_status resnet_eval_graph(resnet *m, int64_t batch, model_graph *out);
/* trainable parameters (the running statistics are buffers, not counted) */
int64_t resnet_param_count(const resnet *m);

#endif
