/* test_graph_misuse.c — graphs used the wrong way round: a second backward
 * pass of one loss, values read before a compute wrote them or after the
 * graph reused their buffer. Each is an error naming the call, never a
 * silently wrong number. */
#include "kt.h"

/* loss = sum(w * w * x) with w = 1, x = 3: d loss / d w = 2 w x = 6 */
static kiln_tensor *small_loss(kiln_ctx *ctx, kiln_tensor **w) {
    *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){2});
    kiln_tensor *x = kiln_new_1d(ctx, KILN_F32, 2);
    if (!*w || !x || kiln_tensor_fill(*w, 1) || kiln_tensor_fill(x, 3)) return NULL;
    return kiln_sum_all(ctx, kiln_mul(ctx, kiln_mul(ctx, *w, *w), x));
}

KT_TEST(graph_backward_twice_is_refused) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w, *loss = small_loss(ctx, &w);
    KT_NOTNULL(loss);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    int nodes = kiln_graph_n_nodes(g);
    KT_CHECK(kiln_graph_backward(g, loss) == KILN_ERR_STATE, "a second backward of the same loss was accepted");
    KT_CHECK(strstr(kiln_last_error(), "kiln_graph_backward") && strstr(kiln_last_error(), "already"), "message: %s",
             kiln_last_error());
    KT_CHECK(kiln_graph_n_nodes(g) == nodes, "the refused call added %d nodes", kiln_graph_n_nodes(g) - nodes);
    KT_OK(kiln_graph_compute(g));
    float gw[2];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gw, 2));
    KT_CHECK(gw[0] == 6 && gw[1] == 6, "gradient %g %g, expected 6 (not doubled)", gw[0], gw[1]);
    /* another loss in the same graph adds its own gradient: d sum(w) / d w = 1 */
    kiln_tensor *loss2 = kiln_sum_all(ctx, w);
    KT_OK(kiln_graph_backward(g, loss2));
    kiln_zero_grad(ctx);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gw, 2));
    KT_CHECK(gw[0] == 7 && gw[1] == 7, "two losses: gradient %g %g, expected 7", gw[0], gw[1]);
    /* the same loss in a second graph is that graph's own backward pass */
    kiln_graph *g2 = kiln_graph_new(ctx);
    KT_OK(kiln_graph_backward(g2, loss));
    kiln_ctx_free(ctx);
}

/* kiln_tensor_item's NaN always comes with a message naming the call */
static void expect_unreadable(const kiln_tensor *t, const char *why, const char *text) {
    kiln_clear_error();
    double v = kiln_tensor_item(t);
    KT_CHECK(isnan(v) && kiln_last_status() == KILN_ERR_STATE, "%s: item %g, status %s", why, v,
             kiln_status_name(kiln_last_status()));
    KT_CHECK(strstr(kiln_last_error(), "kiln_tensor_item") && strstr(kiln_last_error(), text),
             "%s: message '%s' lacks '%s'", why, kiln_last_error(), text);
    KT_CHECK(kiln_tensor_data(t) == NULL, "%s: kiln_tensor_data gave a pointer", why);
}

KT_TEST(graph_values_readable_only_once_computed) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w, *loss = small_loss(ctx, &w);
    KT_NOTNULL(loss);
    kiln_tensor *inner = kiln_mul(ctx, w, w), *out = kiln_sum_all(ctx, kiln_exp(ctx, inner));
    kiln_tensor *view = kiln_reshape(ctx, loss, 2, (int64_t[]){1, 1}); /* made before loss has storage */
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_add(g, out));
    expect_unreadable(inner, "a node never computed", "kiln_graph_add");
    KT_CHECK(kiln_graph_planned_bytes(g) > 0, "planned"); /* gives the outputs their (zeroed) storage */
    expect_unreadable(loss, "a planned output", "not been computed");
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_item(loss) == 6 && kiln_tensor_item(view) == 6, "loss %g, its view %g",
             kiln_tensor_item(loss), kiln_tensor_item(view));
    /* the intermediate's bytes are the graph's buffer, reused and then freed */
    expect_unreadable(inner, "an intermediate after compute", "kiln_graph_add");
    kiln_graph_free_buffers(g);
    expect_unreadable(inner, "an intermediate after kiln_graph_free_buffers", "kiln_graph_add");
    KT_CHECK(fabs(kiln_tensor_item(out) - 2 * exp(1.0)) < 1e-5, "out %g", kiln_tensor_item(out));
    kiln_ctx_free(ctx);
}
