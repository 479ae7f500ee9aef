/* gpu_gemv.c — the device GEMV lines: y = x . W^T with one row of x
 * (kiln_linear: QMATMUL, or MATMUL for f32 W), W 4096 x 4096, per dtype as
 * GB/s of W's bytes against the device's copy bandwidth measured in the
 * same run (y = -x over 64 MiB of f32, W's f32 size: GB/s of the bytes
 * read and written). A submit and a wait are in every call, as in a
 * generated token. Then the same with 128 rows of x (a prompt: the
 * many-row path, W dequantized and a GEMM) as TFLOP/s against the f32
 * matmul of that size in the same run, and as GB/s of W. bench_vulkan
 * prints them as vk_*, bench_cuda as cu_* (`--only cuda`; a line saying
 * why when the build or the machine has no CUDA). On lavapipe the figures
 * are the CPU's; on the fake CUDA toolkit the 128-row lines are skipped
 * (its host cuBLAS takes seconds a product). */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static void graph_run(void *g) { bench_check(kiln_graph_compute(g) == KILN_OK, "device graph"); }

/* Median seconds of y's graph in ctx, every node on the device. */
static double graph_seconds(kiln_ctx *ctx, kiln_tensor *y, double budget) {
    kiln_graph *g = kiln_graph_new(ctx);
    bench_check(y && g && kiln_graph_add(g, y) == KILN_OK, "device graph");
    bench_job job = {graph_run, g};
    double med;
    bench_measure(&job, 1, 3, 200, budget, &med);
    bench_check(kiln_graph_get_stats(g).nodes_fallback == 0, "a node ran on the CPU, not the device");
    return med;
}

static kiln_ctx *device_ctx(kiln_backend *b) {
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx && kiln_ctx_set_backend(ctx, b) == KILN_OK, "context");
    return ctx;
}

/* GB/s of y = -x, x 16 Mi f32, read and written once. */
static double copy_gbs(kiln_backend *b, double budget) {
    const int64_t n = 4096;
    kiln_ctx *ctx = device_ctx(b);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, n, n);
    bench_check(x && !kiln_tensor_fill_uniform(x, 1, -1, 1), "copy input");
    double s = graph_seconds(ctx, kiln_neg(ctx, x), budget);
    kiln_ctx_free(ctx);
    return 2.0 * 4.0 * (double)(n * n) / s * 1e-9;
}

static const kiln_dtype types[] = {KILN_F32,  KILN_Q8_0, KILN_Q4_0,   KILN_NF4,  KILN_NF4_DQ, KILN_GQ4_128,
                                   KILN_Q4_K, KILN_Q6_K, KILN_Q5_K,   KILN_IQ4_XS, KILN_Q4_1, KILN_Q5_0,
                                   KILN_Q5_1, KILN_IQ4_NL, KILN_Q2_K, KILN_Q3_K};
enum { N_TYPES = sizeof types / sizeof types[0] };

/* Median seconds of y = x . W^T, x [m, k], W [n, k] of dtype t; *bytes: W's. */
static double product_seconds(kiln_backend *b, kiln_dtype t, int64_t m, int64_t n, int64_t k, double budget,
                              double *bytes) {
    kiln_ctx *ctx = device_ctx(b);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, m, k), *w = kiln_new_2d(ctx, KILN_F32, n, k);
    bench_check(x && w && !kiln_tensor_fill_uniform(x, 1, -1, 1) && !kiln_tensor_fill_uniform(w, 2, -1, 1),
                "product inputs");
    if (t != KILN_F32) w = kiln_quantize(ctx, w, t);
    bench_check(w != NULL, "quantizing W");
    *bytes = (double)kiln_tensor_nbytes(w);
    const double s = graph_seconds(ctx, kiln_linear(ctx, x, w, NULL), budget);
    kiln_ctx_free(ctx);
    return s;
}

void bench_gpu_gemv(kiln_backend *b, const char *prefix, const bench_opts *o) {
    const int64_t n = 4096, k = 4096, rows = 128;
    char name[48];
    double bytes;
    const double copy = copy_gbs(b, 1.0 * o->scale);
    snprintf(name, sizeof name, "%s_copy 64MiB", prefix);
    bench_report(name, copy, "GB/s", 0, "the reference below");
    for (int i = 0; i < N_TYPES; i++) {
        const double s = product_seconds(b, types[i], 1, n, k, 1.0 * o->scale, &bytes);
        snprintf(name, sizeof name, "%s_gemv_%s 4096", prefix, kiln_dtype_name(types[i]));
        bench_report(name, bytes / s * 1e-9, "GB/s", copy, "device copy");
    }
    const char *d = kiln_backend_device(b);
    if (d && strstr(d, "emulation")) {
        printf("# %s_qgemm: skipped on the emulated device\n", prefix);
        return;
    }
    const double flops = 2.0 * (double)(rows * n * k);
    double f32 = 0;
    for (int i = 0; i < N_TYPES; i++) { /* f32 first: the reference */
        const double s = product_seconds(b, types[i], rows, n, k, 1.0 * o->scale, &bytes);
        if (types[i] == KILN_F32) f32 = flops / s * 1e-12;
        snprintf(name, sizeof name, "%s_qgemm_%s 128x4096", prefix, kiln_dtype_name(types[i]));
        bench_report(name, flops / s * 1e-12, "TFLOP/s", types[i] == KILN_F32 ? 0 : f32,
                     types[i] == KILN_F32 ? "the reference below" : "f32 matmul");
        if (types[i] != KILN_F32) bench_report(name, bytes / s * 1e-9, "GB/s", copy, "device copy");
    }
}

void bench_cuda(const bench_opts *o) {
    kiln_backend *cu = kiln_backend_get("cuda");
    if (!cu) {
        printf("# cuda: %s\n", kiln_last_error());
        return;
    }
    printf("# cuda: %s\n", kiln_backend_device(cu));
    bench_gpu_gemv(cu, "cu", o);
    bench_gpu_lines(cu, "cu", o);
}
