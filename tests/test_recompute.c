/* test_recompute.c — gradient checkpointing (kiln_checkpoint_begin/end):
 * the same model built twice, with and without segments, gives the same
 * loss and gradients bit for bit (an MLP stack with dropout, GPT-2 and
 * llama blocks from models/), and the planner's peak for a deep stack
 * drops; misuse is a clear error that changes nothing. */
#include "kt.h"
#include "kt_device.h"
#include "gpt.h"
#include "llama.h"

/* a status call that must fail with this status and a message containing text */
#define EXPECT_STATUS(expr, status, text)                                                                      \
    do {                                                                                                       \
        kiln_clear_error();                                                                                    \
        kiln_status st_ = (expr);                                                                              \
        KT_CHECK(st_ == (status), "%s: status %s", #expr, kiln_status_name(st_));                               \
        KT_CHECK(strstr(kiln_last_error(), text) != NULL, "%s: message '%s' lacks '%s'", #expr, kiln_last_error(), \
                 text);                                                                                        \
    } while (0)

enum { MLP_LAYERS = 8, MLP_ROWS = 64, MLP_WIDTH = 96 };

typedef struct {
    kiln_ctx *ctx;
    kiln_graph *g;
    kiln_tensor *loss, *w[MLP_LAYERS];
} mlp_run;

/* x -> MLP_LAYERS x (x + dropout(gelu(x w^T))) -> sum of squares; each
 * block a segment when ckpt */
static void mlp_build(mlp_run *r, bool ckpt, double p_drop, kiln_backend *be) {
    kiln_ctx *ctx = r->ctx = kiln_ctx_new();
    if (be) KT_OK(kiln_ctx_set_backend(ctx, be));
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, MLP_ROWS, MLP_WIDTH);
    KT_OK(kiln_tensor_fill_randn(x, 7, 0, 1));
    for (int l = 0; l < MLP_LAYERS; l++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", l);
        r->w[l] = kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){MLP_WIDTH, MLP_WIDTH});
        KT_OK(kiln_tensor_fill_randn(r->w[l], 100 + l, 0, 0.1));
        if (ckpt) KT_OK(kiln_checkpoint_begin(ctx));
        kiln_tensor *h = kiln_gelu(ctx, kiln_linear(ctx, x, r->w[l], NULL));
        if (p_drop > 0) h = kiln_dropout(ctx, h, p_drop, 40 + l);
        x = kiln_add(ctx, x, kiln_tanh(ctx, h));
        if (ckpt) KT_OK(kiln_checkpoint_end(ctx));
    }
    r->loss = kiln_sum_all(ctx, kiln_mul(ctx, x, x));
    r->g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(r->g, r->loss));
    KT_OK(kiln_graph_backward(r->g, r->loss));
}

/* every gradient of a and b equal byte for byte */
static void same_grads(kiln_tensor **pa, kiln_tensor **pb, int n, const char *what) {
    for (int i = 0; i < n; i++) {
        const kiln_tensor *ga = kiln_tensor_grad(pa[i]), *gb = kiln_tensor_grad(pb[i]);
        KT_REQUIRE(ga && gb && kiln_tensor_nbytes(ga) == kiln_tensor_nbytes(gb), "%s: gradient %d missing", what, i);
        KT_CHECK(!memcmp(kiln_tensor_data(ga), kiln_tensor_data(gb), kiln_tensor_nbytes(ga)),
                 "%s: gradient of parameter %d differs with checkpointing", what, i);
    }
}

static void mlp_compare(double p_drop, kiln_backend *be) {
    mlp_run a, b;
    mlp_build(&a, false, p_drop, be);
    mlp_build(&b, true, p_drop, be);
    for (int step = 0; step < 2; step++) { /* the second compute draws new dropout masks */
        kiln_zero_grad(a.ctx);
        kiln_zero_grad(b.ctx);
        KT_OK(kiln_graph_compute(a.g));
        KT_OK(kiln_graph_compute(b.g));
        double la = kiln_tensor_item(a.loss), lb = kiln_tensor_item(b.loss);
        KT_CHECK(la == lb, "loss %.9g with checkpointing, %.9g without", lb, la);
        same_grads(a.w, b.w, MLP_LAYERS, p_drop > 0 ? "mlp with dropout" : "mlp");
    }
    size_t pa = kiln_graph_planned_bytes(a.g), pb = kiln_graph_planned_bytes(b.g);
    printf("    mlp %d layers: planned %zu bytes without, %zu with checkpointing; %d vs %d nodes\n", MLP_LAYERS, pa,
           pb, kiln_graph_n_nodes(a.g), kiln_graph_n_nodes(b.g));
    KT_CHECK(pb < pa * 3 / 4, "planned peak %zu with checkpointing, %zu without: no drop", pb, pa);
    KT_CHECK(kiln_graph_n_nodes(b.g) > kiln_graph_n_nodes(a.g), "no node was recomputed");
    kiln_ctx_free(a.ctx);
    kiln_ctx_free(b.ctx);
}

KT_TEST(recompute_mlp_same_gradients_less_memory) { mlp_compare(0, NULL); }
KT_TEST(recompute_mlp_dropout_same_mask) { mlp_compare(0.25, NULL); }
/* only graph structure: the same on a device backend */
KT_TEST(recompute_mlp_vulkan) {
    kiln_backend *be = kt_device("vulkan");
    if (be) mlp_compare(0.25, be);
}
KT_TEST(recompute_mlp_cuda) {
    kiln_backend *be = kt_device("cuda");
    if (be) mlp_compare(0.25, be);
}

static const char text[] = "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs. ";

static void fill_tokens(model_graph *mg, int64_t n) {
    int32_t in[256], lab[256];
    KT_REQUIRE(n <= 256, "too many tokens");
    for (int64_t i = 0; i < n; i++) {
        in[i] = (unsigned char)text[i % (sizeof text - 1)];
        lab[i] = (unsigned char)text[(i + 1) % (sizeof text - 1)];
    }
    KT_OK(kiln_tensor_set_i32(mg->input, in, n));
    KT_OK(kiln_tensor_set_i32(mg->labels, lab, n));
}

/* compute both train graphs once; loss and gradients equal, peak lower */
static void compare_models(model_graph *a, model_graph *b, kiln_ctx *ca, kiln_ctx *cb, const char *what) {
    KT_OK(kiln_graph_compute(a->graph));
    KT_OK(kiln_graph_compute(b->graph));
    KT_CHECK(kiln_tensor_item(a->loss) == kiln_tensor_item(b->loss), "%s: loss %.9g with checkpointing, %.9g without",
             what, kiln_tensor_item(b->loss), kiln_tensor_item(a->loss));
    kiln_tensor *pa[64], *pb[64];
    int n = kiln_ctx_params(ca, pa, 64);
    KT_REQUIRE(n <= 64 && n == kiln_ctx_params(cb, pb, 64), "%s: %d parameters", what, n);
    same_grads(pa, pb, n, what);
    size_t sa = kiln_graph_planned_bytes(a->graph), sb = kiln_graph_planned_bytes(b->graph);
    printf("    %s: planned %zu bytes without, %zu with checkpointing\n", what, sa, sb);
    KT_CHECK(sb < sa / 2, "%s: planned peak %zu with checkpointing, %zu without", what, sb, sa);
    KT_CHECK(kiln_graph_n_nodes(b->graph) > kiln_graph_n_nodes(a->graph), "%s: no node was recomputed", what);
}

KT_TEST(recompute_gpt_blocks) {
    gpt_config c = {.vocab = 256, .context = 32, .layers = 3, .heads = 2, .width = 32};
    kiln_ctx *ca = kiln_ctx_new(), *cb = kiln_ctx_new();
    gpt *a = gpt_new(ca, &c, 5), *b = gpt_new(cb, &c, 5);
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    b->checkpoint = true;
    model_graph ga, gb;
    KT_OK(gpt_train_graph(a, 2, 32, &ga));
    KT_OK(gpt_train_graph(b, 2, 32, &gb));
    fill_tokens(&ga, 64);
    fill_tokens(&gb, 64);
    compare_models(&ga, &gb, ca, cb, "gpt");
    gpt_free(a);
    gpt_free(b);
    kiln_ctx_free(ca);
    kiln_ctx_free(cb);
}

KT_TEST(recompute_llama_blocks) {
    llama_config c = llama_defaults();
    c.context = 32, c.layers = 3, c.heads = 4, c.kv_heads = 2, c.dim = 32, c.hidden = 64;
    kiln_ctx *ca = kiln_ctx_new(), *cb = kiln_ctx_new();
    llama *a = llama_new(ca, &c, 5), *b = llama_new(cb, &c, 5);
    KT_NOTNULL(a);
    KT_NOTNULL(b);
    b->checkpoint = true;
    model_graph ga, gb;
    KT_OK(llama_train_graph(a, 2, 32, &ga));
    KT_OK(llama_train_graph(b, 2, 32, &gb));
    fill_tokens(&ga, 64);
    fill_tokens(&gb, 64);
    compare_models(&ga, &gb, ca, cb, "llama");
    llama_free(a);
    llama_free(b);
    kiln_ctx_free(ca);
    kiln_ctx_free(cb);
}

KT_TEST(recompute_misuse_is_refused) {
    kiln_ctx *ctx = kiln_ctx_new();
    EXPECT_STATUS(kiln_checkpoint_end(ctx), KILN_ERR_STATE, "kiln_checkpoint_end: no segment is open");
    KT_OK(kiln_checkpoint_begin(ctx));
    EXPECT_STATUS(kiln_checkpoint_begin(ctx), KILN_ERR_STATE, "do not nest");
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){4, 3});
    KT_OK(kiln_tensor_fill(w, 0.5));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_tanh(ctx, kiln_exp(ctx, w)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    EXPECT_STATUS(kiln_graph_backward(g, loss), KILN_ERR_STATE, "still open");
    KT_OK(kiln_checkpoint_end(ctx));
    /* batch norm updating its running statistics inside a segment */
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 4, 3), *rm = kiln_buffer(ctx, "rm", KILN_F32, 1, (int64_t[]){3}),
                *rv = kiln_buffer(ctx, "rv", KILN_F32, 1, (int64_t[]){3});
    KT_OK(kiln_tensor_fill_randn(x, 1, 0, 1));
    KT_OK(kiln_tensor_fill(rv, 1));
    KT_OK(kiln_checkpoint_begin(ctx));
    kiln_tensor *bn = kiln_batch_norm(ctx, kiln_mul(ctx, x, w), rm, rv, NULL, NULL, true, 0.1, 1e-5);
    kiln_tensor *y = kiln_mul(ctx, bn, bn); /* its backward reads bn: bn would be recomputed */
    KT_OK(kiln_checkpoint_end(ctx));
    kiln_tensor *loss2 = kiln_sum_all(ctx, kiln_tanh(ctx, y));
    kiln_graph *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g2, loss2));
    int nodes = kiln_graph_n_nodes(g2);
    EXPECT_STATUS(kiln_graph_backward(g2, loss2), KILN_ERR_UNSUPPORTED, "writes in place");
    KT_CHECK(kiln_graph_n_nodes(g2) == nodes, "the refused backward left %d nodes", kiln_graph_n_nodes(g2) - nodes);
    KT_OK(kiln_graph_compute(g2));
    kiln_ctx_free(ctx);
}
