/* test_cuda_runtime.c — starting the CUDA backend, in every build: one
 * without CUDA=1 says so, one with it and no GPU (no driver, or no
 * device) fails cleanly with "no CUDA device", and one with a GPU names
 * it. The kernels are tested by the cross-backend table
 * (test_backend_ops.c), which includes "cuda" wherever it starts. */
#include "kt_device.h"

KT_TEST(cuda_backend_starts_or_says_why) {
    kiln_clear_error();
    kiln_backend *cu = kiln_backend_get("cuda");
    if (!cu) {
        KT_CHECK(kiln_last_status() == KILN_ERR_UNSUPPORTED, "status %d: %s", (int)kiln_last_status(), kiln_last_error());
#ifdef KILN_CUDA
        KT_CHECK(strstr(kiln_last_error(), "no CUDA device") != NULL, "a CUDA build without a GPU says so: %s",
                 kiln_last_error());
#else
        KT_CHECK(strstr(kiln_last_error(), "built without CUDA") != NULL, "says how to build it: %s", kiln_last_error());
#endif
        /* asked again: the same answer, remembered */
        KT_CHECK(!kiln_backend_get("cuda") && kiln_last_status() == KILN_ERR_UNSUPPORTED, "again: %s", kiln_last_error());
        return;
    }
    KT_CHECK(!strcmp(kiln_backend_name(cu), "cuda"), "name %s", kiln_backend_name(cu));
    KT_CHECK(strstr(kiln_backend_device(cu), "CUDA, compute capability") != NULL, "device '%s'", kiln_backend_device(cu));
    KT_CHECK(kiln_backend_get("cuda") == cu, "the backend is started once");
}

#ifdef KILN_CUDA /* a device test: in the builds that have the backend */
/* A small training-shaped graph on the device: matmul, broadcast add,
 * relu, a sum, and the backward; the result matches the CPU's. */
KT_TEST(cuda_mlp_matches_cpu) {
    kiln_backend *cu = kt_device("cuda");
    if (!cu) return;
    float out[2];
    for (int dev = 0; dev < 2; dev++) {
        kiln_ctx *ctx = kiln_ctx_new();
        KT_REQUIRE(ctx, "context");
        if (dev) KT_OK(kiln_ctx_set_backend(ctx, cu));
        kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 3, 4), *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){4, 5});
        kiln_tensor *b = kiln_param(ctx, "b", KILN_F32, 1, (int64_t[]){5});
        float xv[12], wv[20], bv[5];
        for (int i = 0; i < 12; i++) xv[i] = (float)(i % 5) - 2.0f;
        for (int i = 0; i < 20; i++) wv[i] = 0.1f * (float)((i * 7) % 11) - 0.5f;
        for (int i = 0; i < 5; i++) bv[i] = 0.05f * (float)i;
        KT_OK(kiln_tensor_set_f32(x, xv, 12));
        KT_OK(kiln_tensor_set_f32(w, wv, 20));
        KT_OK(kiln_tensor_set_f32(b, bv, 5));
        kiln_tensor *y = kiln_sum_all(ctx, kiln_relu(ctx, kiln_add(ctx, kiln_matmul(ctx, x, w), b)));
        KT_REQUIRE(y, "graph: %s", kiln_last_error());
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_backward(g, y));
        KT_OK(kiln_graph_compute(g));
        out[dev] = (float)kiln_tensor_item(y);
        if (dev) KT_CHECK(kiln_graph_get_stats(g).nodes_on_backend > 0, "nodes ran on the GPU");
        kiln_ctx_free(ctx);
    }
    KT_CHECK(fabsf(out[0] - out[1]) <= 1e-5f * (1 + fabsf(out[0])), "cpu %g cuda %g", out[0], out[1]);
}

/* [a0, a1] times the 2 x 2 identity under precision p, on the device. */
static kiln_status cuda_identity_product(kiln_backend *cu, kiln_matmul_precision p, const float a[2], float y[2]) {
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return KILN_ERR_OOM;
    kiln_status s = kiln_ctx_set_backend(ctx, cu);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 1, 2), *e = kiln_new_2d(ctx, KILN_F32, 2, 2);
    if (!s) s = kiln_tensor_set_f32(x, a, 2);
    if (!s) s = kiln_tensor_set_f32(e, (const float[]){1, 0, 0, 1}, 4);
    kiln_tensor *r = kiln_matmul(ctx, x, e);
    kiln_graph *g = kiln_graph_new(ctx);
    if (!s) s = kiln_set_matmul_precision(p);
    if (!s) s = kiln_graph_add(g, r);
    if (!s) s = kiln_graph_compute(g);
    if (!s) s = kiln_tensor_get_f32(r, y, 2);
    kiln_set_matmul_precision(KILN_MATMUL_F32);
    kiln_ctx_free(ctx);
    return s;
}

/* kiln_set_matmul_precision reaches cuBLAS: 1 + 2^-13 survives f32 (exact,
 * pedantic) and is rounded away in TF32 (10 bits) and bf16 (7 bits), where
 * 1 + 2^-9 survives TF32 only. TF32 permits tensor cores without forcing
 * them, so on a GPU the first value may stay; the host emulation's cuBLAS
 * rounds as the tensor cores would, so there it must go. */
KT_TEST(cuda_matmul_precision_reaches_cublas) {
    kiln_backend *cu = kt_device("cuda");
    if (!cu) return;
    bool emu = strstr(kiln_backend_device(cu), "host emulation") != NULL;
    const float a[2] = {1.0f + 0x1p-13f, 1.0f + 0x1p-9f};
    float y[2];
    KT_OK(cuda_identity_product(cu, KILN_MATMUL_F32, a, y));
    KT_CHECK(y[0] == a[0] && y[1] == a[1], "f32: %.9g %.9g", y[0], y[1]);
    KT_OK(cuda_identity_product(cu, KILN_MATMUL_BF16, a, y));
    KT_CHECK(y[0] == 1.0f && y[1] == 1.0f, "bf16: %.9g %.9g", y[0], y[1]);
    KT_OK(cuda_identity_product(cu, KILN_MATMUL_TF32, a, y));
    KT_CHECK((y[0] == 1.0f || (!emu && y[0] == a[0])) && y[1] == a[1], "tf32: %.9g %.9g", y[0], y[1]);
}
#endif
