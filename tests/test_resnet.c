/* test_resnet.c — models/resnet: torchvision's names and sizes, a tiny
 * ResNet that learns under SGD with momentum, and a checkpoint that
 * carries the running statistics so that eval mode gives the same
 * outputs after a load. */
#include "resnet.h"
#include "kt.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

KT_TEST(resnet18_names_and_size) {
    kiln_ctx *ctx = kiln_ctx_new();
    resnet *m = resnet_new(ctx, NULL, 1);
    KT_NOTNULL(m);
    kiln_tensor *p[256], *b[256];
    int np = kiln_ctx_params(ctx, p, 256), nb = kiln_ctx_buffers(ctx, b, 256);
    int64_t total = 0;
    for (int i = 0; i < np; i++) total += kiln_tensor_numel(p[i]);
    /* torchvision's resnet18 with a 3x3 stem and a 10-class head */
    KT_CHECK(total == 11173962 && resnet_param_count(m) == total, "%lld parameters (count says %lld), want 11173962",
             (long long)total, (long long)resnet_param_count(m));
    KT_CHECK(np == 62 && nb == 40, "%d parameters and %d buffers, want 62 and 40", np, nb);
    KT_CHECK(!strcmp(kiln_tensor_name(p[0]), "conv1.weight") && !strcmp(kiln_tensor_name(b[0]), "bn1.running_mean"),
             "first names %s, %s", kiln_tensor_name(p[0]), kiln_tensor_name(b[0]));
    bool down = false;
    for (int i = 0; i < np; i++) down |= !strcmp(kiln_tensor_name(p[i]), "layer2.0.downsample.0.weight");
    KT_CHECK(down, "no layer2.0.downsample.0.weight");
    resnet_free(m);
    kiln_ctx_free(ctx);
}

/* Fixed inputs and labels for the tiny config's batch of 8. */
static kiln_status fill_batch(model_graph *g, uint64_t seed) {
    int32_t labels[8];
    for (int i = 0; i < 8; i++) labels[i] = (int32_t)(i % 3);
    kiln_status s = kiln_tensor_fill_randn(g->input, seed, 0.0, 1.0);
    return s ? s : kiln_tensor_set_i32(g->labels, labels, 8);
}

KT_TEST(resnet_tiny_learns_and_checkpoints) {
    char path[] = "/tmp/kiln_resnet_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp failed");
    close(fd);
    resnet_config cfg = resnet_tiny();
    kiln_ctx *ctx = kiln_ctx_new();
    resnet *m = resnet_new(ctx, &cfg, 7);
    KT_NOTNULL(m);
    model_graph train, eval;
    KT_OK(resnet_train_graph(m, 8, &train));
    KT_OK(resnet_eval_graph(m, 8, &eval));
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
    KT_NOTNULL(opt);
    KT_OK(fill_batch(&train, 3));
    double first = 0, last = 0;
    for (int step = 0; step < 15; step++) {
        KT_OK(kiln_graph_compute(train.graph));
        KT_OK(kiln_optim_step(opt));
        last = kiln_tensor_item(train.loss);
        if (!step) first = last;
    }
    KT_CHECK(last < 0.5 * first, "loss %g -> %g after 15 steps", first, last);
    float rm[4];
    KT_OK(kiln_tensor_get_f32(m->bn1.running_mean, rm, 4));
    KT_CHECK(rm[0] != 0 || rm[1] != 0 || rm[2] != 0 || rm[3] != 0, "training left bn1.running_mean at zero");
    KT_OK(kiln_checkpoint_save(opt, path));

    /* eval outputs now, and in a fresh model (another seed) after the load */
    KT_OK(fill_batch(&eval, 11));
    KT_OK(kiln_graph_compute(eval.graph));
    float want[24], got[24];
    KT_OK(kiln_tensor_get_f32(eval.logits, want, 24));
    kiln_ctx *ctx2 = kiln_ctx_new();
    resnet *m2 = resnet_new(ctx2, &cfg, 99);
    KT_NOTNULL(m2);
    model_graph eval2;
    KT_OK(resnet_eval_graph(m2, 8, &eval2));
    kiln_optim *opt2 = kiln_sgd_new(ctx2, &(kiln_sgd_config){.lr = 0.05f, .momentum = 0.9f});
    KT_NOTNULL(opt2);
    KT_OK(kiln_checkpoint_load(opt2, path));
    KT_OK(fill_batch(&eval2, 11));
    KT_OK(kiln_graph_compute(eval2.graph));
    KT_OK(kiln_tensor_get_f32(eval2.logits, got, 24));
    KT_CHECK(!memcmp(want, got, sizeof want), "eval logits differ after the load: %g vs %g", want[0], got[0]);
    /* eval mode updates nothing: a second compute gives the same */
    KT_OK(kiln_graph_compute(eval2.graph));
    KT_OK(kiln_tensor_get_f32(eval2.logits, got, 24));
    KT_CHECK(!memcmp(want, got, sizeof want), "a second eval compute differs");
    resnet_free(m);
    resnet_free(m2);
    kiln_ctx_free(ctx);
    kiln_ctx_free(ctx2);
    unlink(path);
}
