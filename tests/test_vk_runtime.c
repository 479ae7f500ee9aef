/* test_vk_runtime.c — the Vulkan runtime itself: starting, choosing a
 * device, copies, falling back to the CPU, and big transfers through the
 * staging buffer. The kernels have their own tests (test_vk_*.c and the
 * cross-backend table, test_backend_ops.c). */
#include "kt_device.h"

KT_TEST(vk_backend_starts_and_names_its_device) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    KT_CHECK(!strcmp(kiln_backend_name(vk), "vulkan"), "name %s", kiln_backend_name(vk));
    KT_CHECK(strlen(kiln_backend_device(vk)) > 8 && strstr(kiln_backend_device(vk), "Vulkan 1."), "device '%s'",
             kiln_backend_device(vk));
    KT_CHECK(kiln_backend_get("vulkan") == vk, "the backend is started once");
    KT_CHECK(!kiln_backend_get("metal") && kiln_last_status() == KILN_ERR_ARG, "unknown name: %s", kiln_last_error());
}

KT_TEST(vk_device_env_picks_by_index_and_rejects_no_match) {
    setenv("KILN_VULKAN_DEVICE", "no-such-device-anywhere", 1);
    kiln_backend *vk = kiln_backend_get("vulkan");
    if (!vk && strstr(kiln_last_error(), "no Vulkan driver")) kt_skip(kiln_last_error());
    KT_CHECK(!vk && kiln_last_status() == KILN_ERR_UNSUPPORTED && strstr(kiln_last_error(), "KILN_VULKAN_DEVICE"),
             "a name that matches nothing is an error naming the variable: %s", kiln_last_error());
}

KT_TEST(vk_device_env_index_zero) {
    setenv("KILN_VULKAN_DEVICE", "0", 1);
    kiln_backend *vk = kt_device("vulkan");
    if (vk) KT_CHECK(strlen(kiln_backend_device(vk)) > 0, "device named");
}

/* f64 has no Vulkan kernels: the graph still computes, on the CPU, and the
 * stats show the fallback and the copies around it. */
KT_TEST(vk_unclaimed_nodes_fall_back_with_copies) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    KT_CHECK(kiln_ctx_backend(ctx) == vk, "ctx backend");
    kiln_tensor *a = kiln_new_1d(ctx, KILN_F64, 5), *b = kiln_new_1d(ctx, KILN_F64, 5);
    KT_OK(kiln_tensor_set_f64(a, (double[]){1, 2, 3, 4, 5}, 5));
    KT_OK(kiln_tensor_set_f64(b, (double[]){10, 20, 30, 40, 50}, 5));
    kiln_tensor *y = kiln_mul(ctx, kiln_add(ctx, a, b), a);
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, y));
    KT_CHECK(kiln_graph_backend(g) == vk, "graphs follow the context");
    KT_OK(kiln_graph_compute(g));
    double out[5];
    KT_OK(kiln_tensor_get_f64(y, out, 5));
    for (int i = 0; i < 5; i++) KT_CHECK(out[i] == (i + 1) * 11.0 * (i + 1), "y[%d] = %g", i, out[i]);
    kiln_graph_stats st = kiln_graph_get_stats(g);
    KT_CHECK(st.computes == 1 && st.nodes_fallback == 2 && st.nodes_on_backend == 0, "fallback %lld on %lld",
             (long long)st.nodes_fallback, (long long)st.nodes_on_backend);
    KT_CHECK(kiln_backend_validation_messages(vk) == 0, "validation messages");
    kiln_ctx_free(ctx);
}

/* A gradient accumulated on the device (acc_grad) from values computed on
 * the CPU, read back, zeroed on the device, accumulated again. */
KT_TEST(vk_gradient_accumulates_and_zeroes_on_device) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, (int64_t[]){3});
    KT_OK(kiln_tensor_set_f32(w, (float[]){1, 2, 3}, 3));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_mul(ctx, w, w));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_graph_compute(g)); /* gradients add up, as in PyTorch */
    float gr[3];
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gr, 3));
    for (int i = 0; i < 3; i++) KT_CHECK(gr[i] == 4.0f * (i + 1), "grad[%d] = %g", i, gr[i]);
    KT_CHECK(fabs(kiln_tensor_item(loss) - 14.0) < 1e-6, "loss %g", kiln_tensor_item(loss));
    kiln_zero_grad(ctx);
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), gr, 3));
    for (int i = 0; i < 3; i++) KT_CHECK(gr[i] == 2.0f * (i + 1), "after zero_grad grad[%d] = %g", i, gr[i]);
    KT_CHECK(kiln_backend_validation_messages(vk) == 0, "validation messages");
    kiln_ctx_free(ctx);
}

/* 24 MiB each way: more than the first staging buffer holds. */
KT_TEST(vk_large_tensors_round_trip) {
    kiln_backend *vk = kt_device("vulkan");
    if (!vk) return;
    kiln_ctx *ctx = kiln_ctx_new();
    KT_OK(kiln_ctx_set_backend(ctx, vk));
    int64_t n = 6 << 20;
    kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 1, &n);
    float *v = malloc((size_t)n * sizeof *v);
    KT_REQUIRE(v, "malloc");
    for (int64_t i = 0; i < n; i++) v[i] = (float)(i % 1000) - 500.0f;
    KT_OK(kiln_tensor_set_f32(w, v, n));
    kiln_tensor *loss = kiln_sum_all(ctx, kiln_scale(ctx, w, 0.5));
    kiln_graph *g = kiln_graph_new(ctx);
    KT_OK(kiln_graph_add(g, loss));
    KT_OK(kiln_graph_backward(g, loss));
    KT_OK(kiln_graph_compute(g));
    KT_OK(kiln_tensor_get_f32(kiln_tensor_grad(w), v, n));
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += v[i] != 0.5f;
    KT_CHECK(bad == 0, "%lld gradient values differ from 0.5", (long long)bad);
    KT_OK(kiln_tensor_get_f32(w, v, n));
    for (int64_t i = 0; i < n; i++) bad += v[i] != (float)(i % 1000) - 500.0f;
    KT_CHECK(bad == 0, "%lld parameter values changed", (long long)bad);
    free(v);
    kiln_ctx_free(ctx);
}
