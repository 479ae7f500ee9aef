/* quant.c — `kiln_bench --only quant`: the quantized dtypes' round-trip
 * error on N(0, 1) data (NF4 against uniform 4-bit at the same block of 64,
 * the target: NF4 lower) and the dequantize kernel's rate. The
 * error lines print RMSE x 1000 with the uniform 4-bit figure as the
 * reference, so a ratio below 1 means NF4 wins. */
#include "bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#define N (1 << 20)

/* Uniform 4-bit with Q4_0's rule (d = m / -8, 16 levels, f32 scale) at block bs. */
static void uniform4(const float *x, float *y, int64_t n, int bs) {
    for (int64_t b = 0; b < n / bs; b++) {
        const float *xb = x + b * bs;
        float amax = 0, max = 0;
        for (int j = 0; j < bs; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]), max = xb[j];
        float d = max / -8, id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < bs; j++) {
            int q = (signed char)(xb[j] * id + 8.5f);
            y[b * bs + j] = (float)((q < 15 ? q : 15) - 8) * d;
        }
    }
}

/* Symmetric absmax int4 (d = absmax / 7, q = round(x / d) in [-7, 7]) at block bs. */
static void symmetric4(const float *x, float *y, int64_t n, int bs) {
    for (int64_t b = 0; b < n / bs; b++) {
        const float *xb = x + b * bs;
        float amax = 0;
        for (int j = 0; j < bs; j++) amax = fmaxf(amax, fabsf(xb[j]));
        float d = amax / 7, id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < bs; j++) y[b * bs + j] = roundf(xb[j] * id) * d;
    }
}

static double rmse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

typedef struct dq_job {
    kiln_graph *g;
} dq_job;
static void run_dq(void *arg) { bench_check(kiln_graph_compute(((dq_job *)arg)->g) == KILN_OK, "dequantize"); }

void bench_quant(const bench_opts *o) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, N / 4096, 4096);
    bench_check(x && kiln_tensor_fill_randn(x, 1, 0.0, 1.0) == KILN_OK, "randn");
    float *xv = malloc(N * sizeof *xv), *yv = malloc(N * sizeof *yv);
    bench_check(xv && yv && kiln_tensor_get_f32(x, xv, N) == KILN_OK, "read x");
    uniform4(xv, yv, N, 64);
    const double ref = 1000 * rmse(xv, yv, N);
    printf("# round-trip RMSE x 1000 on N(0,1), %d values; reference: uniform 4-bit at block 64 (Q4_0's rule), "
           "%.2f\n", N, ref);
    symmetric4(xv, yv, N, 64);
    printf("%-34s kiln %9.2f %-9s %6.2fx %s\n", "rmse symmetric int4 absmax/7, b64", 1000 * rmse(xv, yv, N), "x1e-3",
           1000 * rmse(xv, yv, N) / ref, "uniform 4-bit, block 64");
    const kiln_dtype ts[4] = {KILN_NF4, KILN_NF4_DQ, KILN_Q4_0, KILN_Q8_0};
    kiln_tensor *q[4];
    for (int i = 0; i < 4; i++) {
        q[i] = kiln_quantize(ctx, x, ts[i]);
        bench_check(q[i] && kiln_tensor_get_f32(q[i], yv, N) == KILN_OK, "quantize");
        char name[64];
        snprintf(name, sizeof name, "rmse %s (%.3f bits/weight)", kiln_dtype_name(ts[i]),
                 8.0 * (double)kiln_dtype_size(ts[i]) / (double)kiln_dtype_block(ts[i]));
        printf("%-34s kiln %9.2f %-9s %6.2fx %s\n", name, 1000 * rmse(xv, yv, N), "x1e-3", 1000 * rmse(xv, yv, N) / ref,
               "uniform 4-bit, block 64");
    }
    /* dequantize rate: f32 written per second, one thread */
    int saved = kiln_get_threads();
    kiln_set_threads(1);
    for (int i = 0; i < 4; i++) {
        dq_job j = {kiln_graph_new(ctx)};
        bench_check(j.g && kiln_graph_add(j.g, kiln_dequantize(ctx, q[i])) == KILN_OK, "graph");
        double med;
        bench_measure(&(bench_job){run_dq, &j}, 1, 3, 50, 0.5 * o->scale, &med);
        char name[64];
        snprintf(name, sizeof name, "dequantize %s, 1 thread", kiln_dtype_name(ts[i]));
        bench_report(name, N / med / 1e9, "Gelem/s", 0, kiln_cpu_describe());
    }
    kiln_set_threads(saved);
    free(xv), free(yv);
    kiln_ctx_free(ctx);
}
