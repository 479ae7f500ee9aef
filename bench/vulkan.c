/* vulkan.c — the Vulkan backend's figures: f32 (and f16) matmul GFLOP/s of
 * a one-node graph (a submit and a wait per call included) against the
 * same graph on kiln's CPU backend at the highest thread count measured,
 * and training steps of the mlp and gpt models (bench/train.c) against
 * the CPU; the GEMV per dtype against the device's copy bandwidth
 * (gpu_gemv.c); the GPT-2 steps and generation of gpu_lines.c. On lavapipe,
 * Mesa's Vulkan on the CPU, these only show that the code runs; on a real
 * GPU they are the backend's speed. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

typedef struct mm_job {
    kiln_graph *g;
    int nt;
} mm_job;

static void mm_run(void *p) {
    mm_job *j = p;
    kiln_set_threads(j->nt);
    bench_check(kiln_graph_compute(j->g) == KILN_OK, "matmul");
}

/* Seconds per n x n x n matmul of dtype dt on backend b (NULL: CPU). */
static double matmul_seconds(kiln_backend *b, kiln_dtype dt, int64_t n, int nt, double budget) {
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx && kiln_ctx_set_backend(ctx, b) == KILN_OK, "context");
    kiln_tensor *x = kiln_new_2d(ctx, dt, n, n), *y = kiln_new_2d(ctx, dt, n, n);
    bench_check(x && y && !kiln_tensor_fill_uniform(x, 1, -1, 1) && !kiln_tensor_fill_uniform(y, 2, -1, 1), "inputs");
    mm_job j = {kiln_graph_new(ctx), nt};
    bench_check(j.g && kiln_graph_add(j.g, kiln_matmul(ctx, x, y)) == KILN_OK, "matmul graph");
    bench_job job = {mm_run, &j};
    double med;
    bench_measure(&job, 1, 3, 100, budget, &med);
    kiln_graph_stats st = kiln_graph_get_stats(j.g);
    bench_check(!b || st.nodes_fallback == 0, "the matmul ran on the CPU, not the device");
    kiln_ctx_free(ctx);
    return med;
}

void bench_vulkan(const bench_opts *o) {
    kiln_backend *vk = kiln_backend_get("vulkan");
    if (!vk) {
        printf("# vulkan: %s\n", kiln_last_error());
        return;
    }
    int nt = o->threads[o->n_threads - 1];
    char ref[32];
    snprintf(ref, sizeof ref, "kiln-cpu %dt", nt);
    printf("# vulkan: %s\n", kiln_backend_device(vk));
    bench_gpu_gemv(vk, "vk", o);
    static const int64_t sizes[] = {256, 512, 1024};
    for (int i = 0; i < 3; i++) {
        int64_t n = sizes[i];
        double flop = 2.0 * (double)n * (double)n * (double)n;
        double cpu = matmul_seconds(NULL, KILN_F32, n, nt, 0.5 * o->scale);
        double dev = matmul_seconds(vk, KILN_F32, n, nt, 1.0 * o->scale);
        char name[48];
        snprintf(name, sizeof name, "vk_matmul_f32 %lld", (long long)n);
        bench_report(name, flop / dev * 1e-9, "GFLOP/s", flop / cpu * 1e-9, ref);
        double half = matmul_seconds(vk, KILN_F16, n, nt, 1.0 * o->scale);
        snprintf(name, sizeof name, "vk_matmul_f16 %lld", (long long)n);
        bench_report(name, flop / half * 1e-9, "GFLOP/s", flop / cpu * 1e-9, ref);
    }
    static const char *models[] = {"mlp", "gpt"};
    for (int i = 0; i < 2; i++) {
        if (o->model && strcmp(o->model, models[i])) continue;
        const char *unit;
        double cpu = bench_train_rate(models[i], NULL, nt, 0.5 * o->scale, &unit);
        double dev = bench_train_rate(models[i], vk, nt, 0.5 * o->scale, &unit);
        char name[48];
        snprintf(name, sizeof name, "vk_train_%s", models[i]);
        bench_report(name, dev, unit, cpu, ref);
    }
    bench_gpu_lines(vk, "vk", o);
}
