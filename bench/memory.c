/* memory.c — bandwidth of memory-bound ops through the graph API (add, mul,
 * gelu, softmax, layer_norm: leaves in, kiln_graph_compute, an output out)
 * against a plain threaded triad a[i] = b[i] + s * c[i] on arrays of the
 * same size, interleaved with it.
 *
 * Sizes: each array holds --stream-mib MiB (default 320 MiB, 80 Mi floats),
 * so even the two-array ops (gelu, softmax, layer_norm: 640 MiB) leave the
 * 480 MiB last-level cache this machine reports; the three-array ops and the
 * triad move 960 MiB. GB/s counts the bytes the op must read and write
 * once (not write-allocate traffic), the same way for kiln and the triad.
 * Softmax and layer_norm work on rows of 1024. Peak memory is about 2 GiB. */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>

#define ROW 1024

typedef struct graph_job {
    kiln_graph *g;
    int nt;
} graph_job;

static void run_graph(void *p) {
    graph_job *j = p;
    kiln_set_threads(j->nt);
    bench_check(kiln_graph_compute(j->g) == KILN_OK, "kiln_graph_compute");
}

typedef enum { OP_ADD, OP_MUL, OP_GELU, OP_SOFTMAX, OP_LAYER_NORM } op_kind;

static const struct {
    const char *name;
    int arrays; /* arrays of n floats read or written */
} ops[] = {{"add", 3}, {"mul", 3}, {"gelu", 2}, {"softmax", 2}, {"layer_norm", 2}};

static kiln_tensor *leaf(kiln_ctx *ctx, int64_t n, uint64_t seed) {
    kiln_tensor *t = kiln_new_2d(ctx, KILN_F32, n / ROW, ROW);
    bench_check(t && kiln_tensor_fill_uniform(t, seed, -2.0, 2.0) == KILN_OK, "input");
    return t;
}

static kiln_tensor *build(kiln_ctx *ctx, op_kind op, int64_t n) {
    kiln_tensor *x = leaf(ctx, n, 1);
    switch (op) {
    case OP_ADD: return kiln_add(ctx, x, leaf(ctx, n, 2));
    case OP_MUL: return kiln_mul(ctx, x, leaf(ctx, n, 2));
    case OP_GELU: return kiln_gelu(ctx, x);
    case OP_SOFTMAX: return kiln_softmax(ctx, x, false);
    case OP_LAYER_NORM: {
        kiln_tensor *w = kiln_new_1d(ctx, KILN_F32, ROW), *b = kiln_new_1d(ctx, KILN_F32, ROW);
        bench_check(w && b && kiln_tensor_fill(w, 1.0) == KILN_OK, "layer_norm weights");
        return kiln_layer_norm(ctx, x, w, b, 1e-5);
    }
    }
    return NULL;
}

void bench_memory(const bench_opts *o) {
    int64_t n = o->stream_mib * (1 << 20) / 4 / ROW * ROW;
    bench_triad tr = bench_triad_new(n);
    double mib = (double)n * 4 / (1 << 20);
    printf("# bandwidth: arrays of %.0f MiB (%lld floats), rows of %d; LLC 480 MiB\n", mib, (long long)n, ROW);
    for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *y = build(ctx, (op_kind)k, n);
        kiln_graph *g = kiln_graph_new(ctx);
        bench_check(y && g && kiln_graph_add(g, y) == KILN_OK, ops[k].name);
        for (int t = 0; t < o->n_threads; t++) {
            graph_job j = {g, o->threads[t]};
            tr.nt = o->threads[t];
            bench_job jobs[2] = {{run_graph, &j}, {bench_triad_run, &tr}};
            double med[2];
            bench_measure(jobs, 2, 3, 9, 1.5 * o->scale, med);
            double bytes = (double)ops[k].arrays * (double)n * 4, triad_gbs = bench_triad_gbs(&tr, med[1]);
            char name[64];
            snprintf(name, sizeof name, "%s %dt", ops[k].name, o->threads[t]);
            bench_report(name, bytes / med[0] * 1e-9, "GB/s", triad_gbs, "triad");
        }
        kiln_ctx_free(ctx);
    }
    bench_triad_free(&tr);
}
