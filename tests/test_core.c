/* test_core.c — tensors, dtypes, the graph, the memory planner, gradient
 * accumulation, no-grad/detach, and the error paths of the core API. */
#include "gradcheck.h"

#include <string.h>

KT_TEST(core_tensor_create_and_io) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_NOTNULL(ctx);
    kiln_tensor *t = kiln_new_3d(ctx, KILN_F32, 2, 3, 4);
    KT_NOTNULL(t);
    KT_CHECK(kiln_tensor_numel(t) == 24 && kiln_tensor_ndim(t) == 3 && kiln_tensor_dim(t, -1) == 4, "shape");
    KT_CHECK(kiln_tensor_nbytes(t) == 96 && kiln_tensor_is_contiguous(t), "bytes/contiguous");
    float v[24], back[24];
    for (int i = 0; i < 24; i++) v[i] = (float)i * 0.5f;
    KT_OK(kiln_tensor_set_f32(t, v, 24));
    KT_OK(kiln_tensor_get_f32(t, back, 24));
    KT_CHECK(!memcmp(v, back, sizeof v), "round trip");
    KT_CHECK(kiln_tensor_item(t) == 0.0, "item");
    kiln_tensor *s = kiln_scalar(ctx, KILN_F64, 2.5);
    KT_CHECK(kiln_tensor_item(s) == 2.5, "scalar");
    KT_CHECK(kiln_ctx_storage_bytes(ctx) >= 104, "storage accounted");
    kiln_ctx_free(ctx);
}

KT_TEST(core_dtype_conversions) {
    kiln_ctx *ctx = kiln_ctx_new();
    const float vals[] = {0.0f, 1.0f, -2.5f, 65504.0f, 1e-7f, 3.14159265f, 1e6f, -0.0f};
    const float want_f16[] = {0.0f, 1.0f, -2.5f, 65504.0f, 1.1920929e-07f, 3.140625f, INFINITY, -0.0f};
    const float want_bf16[] = {0.0f, 1.0f, -2.5f, 65536.0f, 1.0011718e-07f, 3.140625f, 999424.0f, -0.0f};
    kiln_tensor *h = kiln_new_1d(ctx, KILN_F16, 8), *b = kiln_new_1d(ctx, KILN_BF16, 8), *i = kiln_new_1d(ctx, KILN_I32, 8);
    KT_OK(kiln_tensor_set_f32(h, vals, 8));
    KT_OK(kiln_tensor_set_f32(b, vals, 8));
    KT_OK(kiln_tensor_set_f32(i, vals, 8));
    float hv[8], bv[8];
    int32_t iv[8];
    KT_OK(kiln_tensor_get_f32(h, hv, 8));
    KT_OK(kiln_tensor_get_f32(b, bv, 8));
    KT_OK(kiln_tensor_get_i32(i, iv, 8));
    for (int k = 0; k < 8; k++) {
        KT_CHECK(hv[k] == want_f16[k], "f16(%g) = %.9g, want %.9g", vals[k], hv[k], want_f16[k]);
        KT_CHECK(bv[k] == want_bf16[k], "bf16(%g) = %.9g, want %.9g", vals[k], bv[k], want_bf16[k]);
    }
    KT_CHECK(iv[2] == -2 && iv[5] == 3 && iv[6] == 1000000, "i32 rounding: %d %d %d", iv[2], iv[5], iv[6]);
    KT_CHECK(kiln_dtype_size(KILN_F16) == 2 && kiln_dtype_size(KILN_F64) == 8 && !strcmp(kiln_dtype_name(KILN_BF16), "bf16"),
             "traits");
    /* every f16 bit pattern that is a number survives f16 -> f32 -> f16 */
    kiln_tensor *all = kiln_new_1d(ctx, KILN_F16, 65536);
    uint16_t *bits = kiln_tensor_data(all);
    for (int k = 0; k < 65536; k++) bits[k] = (uint16_t)k;
    float *f = malloc(65536 * sizeof *f);
    KT_OK(kiln_tensor_get_f32(all, f, 65536));
    KT_OK(kiln_tensor_set_f32(all, f, 65536));
    int bad = 0;
    for (int k = 0; k < 65536; k++) bad += f[k] == f[k] && bits[k] != k;
    KT_CHECK(bad == 0, "%d f16 values changed in a round trip", bad);
    free(f);
    kiln_ctx_free(ctx);
}

KT_TEST(core_random_fills_are_seeded) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_1d(ctx, KILN_F64, 20000), *b = kiln_new_1d(ctx, KILN_F64, 20000);
    KT_OK(kiln_tensor_fill_randn(a, 7, 1.0, 2.0));
    KT_OK(kiln_tensor_fill_randn(b, 7, 1.0, 2.0));
    KT_CHECK(!memcmp(kiln_tensor_data(a), kiln_tensor_data(b), 20000 * 8), "same seed, same values");
    const double *v = kiln_tensor_data(a);
    double m = 0, s = 0;
    for (int i = 0; i < 20000; i++) m += v[i];
    m /= 20000;
    for (int i = 0; i < 20000; i++) s += (v[i] - m) * (v[i] - m);
    s = sqrt(s / 20000);
    KT_CHECK(fabs(m - 1.0) < 0.05 && fabs(s - 2.0) < 0.05, "randn mean %g std %g", m, s);
    KT_OK(kiln_tensor_init_linear(b, 3, 100));
    v = kiln_tensor_data(b);
    double lo = 1, hi = -1;
    for (int i = 0; i < 20000; i++) lo = v[i] < lo ? v[i] : lo, hi = v[i] > hi ? v[i] : hi;
    KT_CHECK(lo >= -0.1 && hi <= 0.1 && lo < -0.099 && hi > 0.099, "kaiming bound 0.1: [%g, %g]", lo, hi);
    kiln_ctx_free(ctx);
}

/* A chain of 200 element-wise ops: the planner reuses two buffers. */
KT_TEST(core_planner_chain_is_constant_memory) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 64, 64);
    KT_OK(kiln_tensor_fill(x, 1.0));
    size_t one = 64 * 64 * 4;
    size_t planned[2];
    int depths[2] = {20, 200};
    kiln_tensor *y = NULL;
    for (int d = 0; d < 2; d++) {
        y = x;
        for (int i = 0; i < depths[d]; i++) y = (i % 2) ? kiln_add_scalar(ctx, y, 1.0) : kiln_scale(ctx, y, 1.0);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        planned[d] = kiln_graph_planned_bytes(g);
        KT_CHECK(kiln_graph_unplanned_bytes(g) >= (size_t)(depths[d] - 1) * one, "unplanned %zu", kiln_graph_unplanned_bytes(g));
        KT_OK(kiln_graph_compute(g));
    }
    KT_CHECK(planned[0] <= 2 * one && planned[1] == planned[0], "planned bytes: depth 20 -> %zu, depth 200 -> %zu",
             planned[0], planned[1]);
    KT_CHECK(kiln_tensor_item(y) == 101.0, "chain value %g", kiln_tensor_item(y));
    kiln_ctx_free(ctx);
}

/* A product read only inside a fused chain (matmul -> gelu -> tanh) is
 * freed when the chain ends: a stack of such layers holds a few buffers,
 * not one per layer (on a backend without chains each node frees its own). */
KT_TEST(core_planner_frees_what_a_chain_reads) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 32, 32), *w = kiln_new_2d(ctx, KILN_F32, 32, 32);
    KT_OK(kiln_tensor_fill(x, 0.5));
    KT_OK(kiln_tensor_fill(w, 0.01));
    size_t one = 32 * 32 * 4;
    kiln_tensor *y = x;
    for (int i = 0; i < 16; i++) y = kiln_tanh(ctx, kiln_gelu(ctx, kiln_matmul(ctx, y, w)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_CHECK(kiln_graph_planned_bytes(g) <= 3 * one, "16 layers planned %zu bytes (%zu a tensor)",
             kiln_graph_planned_bytes(g), one);
    KT_OK(kiln_graph_compute(g));
    kiln_ctx_free(ctx);
}

/* Forward activations stay alive until the backward nodes that read them. */
KT_TEST(core_planner_keeps_values_for_backward) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F64, 1, (int64_t[]){16});
    KT_OK(kiln_tensor_fill_uniform(w, 1, 0.5, 1.5));
    kiln_tensor *y = w;
    for (int i = 0; i < 30; i++) y = kiln_tanh(ctx, kiln_mul(ctx, y, w));
    kiln_tensor *loss = kiln_sum_all(ctx, y);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    double ga[16];
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), ga, 16));
    /* the same gradient from a graph that is planned with nothing reused */
    kiln_ctx *ctx2 = kiln_ctx_new();
    kiln_tensor *w2 = kiln_param(ctx2, "w", KILN_F64, 1, (int64_t[]){16});
    kiln_tensor_fill_uniform(w2, 1, 0.5, 1.5);
    kiln_tensor *y2 = w2;
    kiln_graph *g2 = kiln_graph_new(ctx2);
    for (int i = 0; i < 30; i++) {
        y2 = kiln_tanh(ctx2, kiln_mul(ctx2, y2, w2));
        KT_OK(kiln_graph_add(g2, y2)); /* outputs keep their own storage */
    }
    kiln_tensor *loss2 = kiln_sum_all(ctx2, y2);
    KT_OK(kiln_graph_add(g2, loss2));
    KT_OK(kiln_graph_backward(g2, loss2));
    KT_OK(kiln_graph_compute(g2));
    double gb[16];
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w2), gb, 16));
    KT_CHECK(!memcmp(ga, gb, sizeof ga), "planned and unplanned gradients differ");
    KT_CHECK(kiln_graph_planned_bytes(g) < kiln_graph_unplanned_bytes(g), "planner reused nothing");
    kiln_ctx_free(ctx);
    kiln_ctx_free(ctx2);
}

KT_TEST(core_grad_accumulates_and_zeroes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){3});
    kiln_tensor *x = kiln_new_1d(ctx, KILN_F32, 3);
    KT_OK(kiln_tensor_set_f32(w, (float[]){1, 2, 3}, 3));
    KT_OK(kiln_tensor_set_f32(x, (float[]){4, 5, 6}, 3));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, kiln_mul(ctx, w, w), x)); /* d/dw = 2 w x */
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_CHECK(kiln_tensor_item(loss) == 4 + 20 + 54, "loss %g", kiln_tensor_item(loss));
    KT_OK(kiln_graph_compute(g)); /* a second micro-batch adds to the gradient */
    float gv[3];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 3));
    KT_CHECK(gv[0] == 16 && gv[1] == 40 && gv[2] == 72, "accumulated grad %g %g %g", gv[0], gv[1], gv[2]);
    kiln_tensor *params[4];
    KT_CHECK(kiln_ctx_params(ctx, params, 4) == 1 && params[0] == w, "param list");
    kiln_zero_grad(ctx);
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gv, 3));
    KT_CHECK(gv[0] == 0 && gv[1] == 0 && gv[2] == 0, "zeroed");
    kiln_ctx_free(ctx);
}

KT_TEST(core_no_grad_and_detach) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F64, 1, (int64_t[]){2});
    KT_OK(kiln_tensor_set_f64(w, (double[]){3, 4}, 2));
    kiln_tensor *y = kiln_mul(ctx, w, w);
    KT_CHECK(kiln_tensor_requires_grad(y), "tracked");
    kiln_ctx_set_grad_enabled(ctx, false);
    kiln_tensor *z = kiln_mul(ctx, w, w);
    KT_CHECK(!kiln_tensor_requires_grad(z) && !kiln_ctx_grad_enabled(ctx), "no-grad mode");
    kiln_ctx_set_grad_enabled(ctx, true);
    kiln_tensor *d = kiln_detach(ctx, y);
    KT_CHECK(d && !kiln_tensor_requires_grad(d), "detach");
    /* loss = sum(w*w + detach(w*w) * w): d/dw = 2w + w*w */
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_add(ctx, y, kiln_mul(ctx, d, w)));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    double gv[2];
    KT_OK(kiln_tensor_get_f64(kiln_tensor_grad(w), gv, 2));
    KT_CHECK(gv[0] == 6 + 9 && gv[1] == 8 + 16, "grad through detach: %g %g", gv[0], gv[1]);
    kiln_ctx_free(ctx);
}

KT_TEST(core_graph_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 2), *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){2, 2});
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_tensor *y = kiln_mul(ctx, x, w);
    KT_CHECK(kiln_graph_backward(g, y) == KILN_ERR_SHAPE && strstr(kiln_last_error(), "one element"), "%s",
             kiln_last_error());
    KT_CHECK(kiln_graph_backward(g, kiln_sum_all(ctx, x)) == KILN_ERR_STATE && strstr(kiln_last_error(), "requires grad"),
             "%s", kiln_last_error());
    KT_CHECK(kiln_graph_add(g, NULL) != KILN_OK, "NULL output");
    KT_CHECK(kiln_graph_add(NULL, y) == KILN_ERR_ARG, "NULL graph");
    KT_CHECK(kiln_graph_compute(NULL) == KILN_ERR_ARG, "NULL graph compute");
    /* reading a node that was never computed is an error, not garbage */
    float v[4];
    KT_CHECK(kiln_tensor_get_f32(y, v, 4) == KILN_ERR_STATE && strstr(kiln_last_error(), "compute"), "%s",
             kiln_last_error());
    KT_CHECK(kiln_tensor_set_f32(x, v, 3) == KILN_ERR_SHAPE, "count mismatch");
    KT_CHECK(isnan(kiln_tensor_item(y)), "item of an uncomputed node");
    /* tensors of another context */
    kiln_ctx *other = kiln_ctx_new();
    kiln_tensor *o = kiln_new_2d(other, KILN_F32, 2, 2);
    KT_CHECK(!kiln_add(ctx, x, o) && kiln_last_status() == KILN_ERR_ARG, "cross-context: %s", kiln_last_error());
    kiln_ctx_free(other);
    KT_CHECK(kiln_tensor_set_requires_grad(kiln_new_1d(ctx, KILN_I32, 2), true) == KILN_ERR_DTYPE, "i32 grad");
    KT_CHECK(kiln_tensor_set_requires_grad(y, true) == KILN_ERR_STATE, "non-leaf requires_grad");
    kiln_ctx_free(ctx);
}

KT_TEST(core_tensor_errors) {
    kiln_ctx *ctx = kiln_ctx_new();
    KT_CHECK(!kiln_tensor_new(ctx, KILN_F32, 0, (int64_t[]){1}) && kiln_last_status() == KILN_ERR_SHAPE, "ndim 0");
    KT_CHECK(!kiln_tensor_new(ctx, KILN_F32, 7, (int64_t[]){1, 1, 1, 1, 1, 1, 1}), "ndim 7");
    KT_CHECK(!kiln_new_2d(ctx, KILN_F32, 3, -1) && strstr(kiln_last_error(), "[3, -1]"), "negative dim: %s",
             kiln_last_error());
    KT_CHECK(!kiln_new_2d(ctx, KILN_F32, (int64_t)1 << 30, (int64_t)1 << 30), "overflowing shape");
    KT_CHECK(!kiln_tensor_new(ctx, (kiln_dtype)99, 1, (int64_t[]){1}) && kiln_last_status() == KILN_ERR_DTYPE, "bad dtype");
    KT_CHECK(!kiln_tensor_new(NULL, KILN_F32, 1, (int64_t[]){1}) && kiln_last_status() == KILN_ERR_ARG, "NULL ctx");
    KT_CHECK(kiln_tensor_fill(NULL, 1) == KILN_ERR_ARG, "fill NULL");
    KT_CHECK(kiln_tensor_init_linear(kiln_new_1d(ctx, KILN_F32, 2), 1, 0) == KILN_ERR_ARG, "fan_in 0");
    kiln_clear_error();
    KT_CHECK(kiln_last_status() == KILN_OK && !kiln_last_error()[0], "cleared");
    KT_CHECK(!strcmp(kiln_status_name(KILN_ERR_OOM), "out of memory"), "status names");
    kiln_ctx_free(ctx);
}

/* A name that saving would refuse after training is refused at creation,
 * and the refusal leaves the context as it was. */
KT_TEST(core_param_names_refused_at_creation) {
    kiln_ctx *ctx = kiln_ctx_new();
    const int64_t shape[1] = {4};
    KT_NOTNULL(kiln_param(ctx, "fc1.weight", KILN_F32, 1, shape));
    char longest[48], too_long[49];
    memset(longest, 'a', 47), longest[47] = 0;
    memset(too_long, 'b', 48), too_long[48] = 0;
    size_t bytes = kiln_ctx_storage_bytes(ctx);
    KT_EXPECT_ERR(kiln_param(ctx, NULL, KILN_F32, 1, shape), KILN_ERR_ARG, "kiln_param: the name is NULL");
    KT_EXPECT_ERR(kiln_param(ctx, "", KILN_F32, 1, shape), KILN_ERR_ARG, "kiln_param: the name is empty");
    KT_EXPECT_ERR(kiln_param(ctx, "fc1.weight", KILN_F32, 1, shape), KILN_ERR_ARG,
                  "already has a parameter called 'fc1.weight'");
    KT_EXPECT_ERR(kiln_param(ctx, too_long, KILN_F32, 1, shape), KILN_ERR_ARG, "48 bytes long; at most 47");
    KT_CHECK(kiln_ctx_params(ctx, NULL, 0) == 1 && kiln_ctx_storage_bytes(ctx) == bytes,
             "a refused name left %d parameters, %zu bytes (was 1, %zu)", kiln_ctx_params(ctx, NULL, 0),
             kiln_ctx_storage_bytes(ctx), bytes);
    KT_NOTNULL(kiln_param(ctx, longest, KILN_F32, 1, shape));
    KT_CHECK(!strcmp(kiln_tensor_name(kiln_param(ctx, "fc2.weight", KILN_F32, 1, shape)), "fc2.weight"), "name kept");
    /* what kiln_tensor_new refuses is named as kiln_param's */
    KT_EXPECT_ERR(kiln_param(ctx, "bad", KILN_F32, 0, shape), KILN_ERR_SHAPE, "kiln_param 'bad': ");
    KT_EXPECT_ERR(kiln_param(ctx, "ids", KILN_I32, 1, shape), KILN_ERR_DTYPE, "kiln_param 'ids': ");
    kiln_ctx_free(ctx);
}

#ifndef KILN_VULKAN
/* Without the Vulkan backend, asking for it says how to get it. */
KT_TEST(core_vulkan_absent_says_how_to_build_it) {
    KT_CHECK(!kiln_backend_get("vulkan") && kiln_last_status() == KILN_ERR_UNSUPPORTED &&
                 strstr(kiln_last_error(), "VULKAN=1"),
             "%s", kiln_last_error());
}
#endif

KT_TEST(core_cpu_backend_is_the_default) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_backend *cpu = kiln_backend_get("cpu");
    KT_NOTNULL(cpu);
    KT_CHECK(kiln_ctx_backend(ctx) == cpu && !strcmp(kiln_backend_name(cpu), "cpu"), "default backend");
    kiln_graph *g = kiln_graph_new(ctx);
    KT_CHECK(kiln_graph_backend(g) == cpu, "graph backend");
    KT_CHECK(kiln_graph_get_stats(g).computes == 0, "no computes yet");
    kiln_ctx_free(ctx);
}

/* Planned bytes of training a stack of `layers` tanh(x W) layers. */
static void stack_planned(int layers, size_t *planned) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *y = kiln_new_2d(ctx, KILN_F32, 64, 32);
    KT_OK(kiln_tensor_fill(y, 0.5));
    for (int i = 0; i < layers; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%d", i);
        kiln_tensor *w = kiln_param(ctx, name, KILN_F32, 2, (int64_t[]){32, 32});
        KT_OK(kiln_tensor_fill_uniform(w, (uint64_t)i, -0.2, 0.2));
        y = kiln_tanh(ctx, kiln_matmul(ctx, y, w));
    }
    kiln_tensor *loss = kiln_sum_all(ctx, y);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    *planned = kiln_graph_planned_bytes(g);
    kiln_ctx_free(ctx);
}

/* Each layer's weight gradient is computed as soon as its activation
 * gradient is, not after the whole backward pass: a deeper stack holds one
 * more saved activation per layer, not also every layer's gradient. */
KT_TEST(core_backward_weight_gradients_follow_their_layer) {
    size_t one = 64 * 32 * 4, p4, p16;
    stack_planned(4, &p4);
    stack_planned(16, &p16);
    KT_CHECK(p16 - p4 <= 12 * one, "4 layers planned %zu bytes, 16 layers %zu (%zu a tensor)", p4, p16, one);
}
