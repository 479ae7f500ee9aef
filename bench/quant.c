/* quant.c — `kiln_bench --only quant`: the quantized dtypes' round-trip
 * error on N(0, 1) data (NF4 against uniform 4-bit at the same block of 64,
 * the target: NF4 lower) and the dequantize kernel's rate. The
 * error lines print RMSE x 1000 with the uniform 4-bit figure as the
 * reference, so a ratio below 1 means NF4 wins; the GQ (GPTQ layout)
 * types at 4, 3 and 2 bits follow. Then the quantized matmul
 * (KILN_OP_QMATMUL): batch-1 GEMV over a set of [11008, 4096] weights
 * bigger than the 480 MiB cache (> 640 MiB of weight bytes, so they stream
 * from memory) in GB/s of weight bytes against the triad in the same run
 * and against f32 GEMV; then prompt processing (128 rows) on a 1.1B
 * llama's matrices in tokens/s and GOP/s against kiln's f32 GEMM on the
 * same shapes in the same run (bench_prompt): Q4_0, Q8_0, Q4_K, Q6_K and
 * IQ4_XS, the integer GEMMs beside the routes without VNNI. */
#include "bench.h"
#include "cpu_features.h"
#include "gemm.h"
#include "qmatmul.h"
#include "qmatmul_gemm.h"
#include "qmatmul_kgemm.h"

#ifdef KILN_BLAS
#include <cblas.h>
#endif
#define REF_SGEMM "kiln f32 GEMM, same shapes"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

typedef struct mm_job {
    kiln_graph *g;
    int nt;
} mm_job;

static void run_mm(void *p) {
    mm_job *j = p;
    kiln_set_threads(j->nt);
    bench_check(kiln_graph_compute(j->g) == KILN_OK, "qmatmul graph");
}

#define QM_N 11008
#define QM_K 4096
#define QM_BYTES ((int64_t)640 << 20) /* weight bytes per set: above the cache */

/* L weights of dtype t ([QM_N, QM_K], copies of one quantized matrix: the
 * bytes streamed are what matters) and a graph of y_i = x W_i^T, x [m, K]. */
static kiln_graph *qm_graph(kiln_ctx *ctx, kiln_tensor *src, kiln_dtype t, int64_t m, int *layers) {
    kiln_tensor *w0 = t == KILN_F32 ? kiln_new_2d(ctx, KILN_F32, QM_N, QM_K) : kiln_quantize(ctx, src, t);
    bench_check(w0 != NULL, "quantize");
    if (t == KILN_F32) memcpy(kiln_tensor_data(w0), kiln_tensor_data(src), kiln_tensor_nbytes(src));
    const size_t bytes = kiln_tensor_nbytes(w0);
    const int l = (int)(QM_BYTES / (int64_t)bytes) + 1;
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, m, QM_K);
    bench_check(x && kiln_tensor_fill_randn(x, 2, 0.0, 1.0) == KILN_OK, "x");
    kiln_graph *g = kiln_graph_new(ctx);
    for (int i = 0; i < l; i++) {
        kiln_tensor *w = i ? kiln_tensor_new(ctx, t, 2, (int64_t[]){QM_N, QM_K}) : w0;
        bench_check(w != NULL, "weights");
        if (i) memcpy(kiln_tensor_data(w), kiln_tensor_data(w0), bytes);
        bench_check(kiln_graph_add(g, kiln_linear(ctx, x, w, NULL)) == KILN_OK, "linear");
    }
    *layers = l;
    return g;
}


/* Prompt processing (m = 128 rows) on a 1.1B llama's matrices (TinyLlama:
 * dim 2048, hidden 5632, 22 layers, 4 of 32 heads for k and v, vocab
 * 32000): one layer's 7 projections and the output head, timed apart;
 * tokens/s = 128 / (22 t_layer + t_head). Reference in the same run:
 * kiln's own f32 GEMM (kiln__sgemm_own, AVX-512) on the f32 weights;
 * also shown: OpenBLAS's sgemm, and the route with VNNI turned off in the
 * caps (Q4_0: the dequantize + f32 GEMM route the integer GEMM replaced;
 * the K types: AVX2's integer tile). */
#define PP_M 128
static const int64_t pp_shapes[8][2] = {{2048, 2048}, {256, 2048}, {256, 2048}, {2048, 2048},
                                        {5632, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};

typedef struct pp_job {
    kiln_graph *g;
    int nt;
    float *w[8], *x[8], *y; /* f32 reference */
    int s0, s1;             /* shapes [s0, s1) */
} pp_job;

static void run_pp_f32(void *p) {
    pp_job *j = p;
    for (int i = j->s0; i < j->s1; i++) {
        const int n = (int)pp_shapes[i][0], k = (int)pp_shapes[i][1];
        kiln__sgemm_own(false, true, PP_M, n, k, 1.0f, j->x[i], k, j->w[i], k, 0.0f, j->y, n, j->nt);
    }
}

#ifdef KILN_BLAS
static void run_pp_blas(void *p) {
    pp_job *j = p;
    for (int i = j->s0; i < j->s1; i++) {
        const int n = (int)pp_shapes[i][0], k = (int)pp_shapes[i][1];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, PP_M, n, k, 1.0f, j->x[i], k, j->w[i], k, 0.0f, j->y, n);
    }
}
#endif

/* graph of the shapes [s0, s1) in dtype t, x random */
static kiln_graph *pp_graph(kiln_ctx *ctx, kiln_dtype t, int s0, int s1) {
    kiln_graph *g = kiln_graph_new(ctx);
    for (int i = s0; i < s1; i++) {
        kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, pp_shapes[i][0], pp_shapes[i][1]);
        kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, PP_M, pp_shapes[i][1]);
        bench_check(w && x && kiln_tensor_fill_randn(w, 10 + (uint64_t)i, 0.0, 0.02) == KILN_OK &&
                        kiln_tensor_fill_randn(x, 20 + (uint64_t)i, 0.0, 1.0) == KILN_OK,
                    "prompt weights");
        kiln_tensor *q = kiln_quantize(ctx, w, t);
        bench_check(q && kiln_graph_add(g, kiln_linear(ctx, x, q, NULL)) == KILN_OK, "prompt graph");
    }
    return g;
}

static void bench_prompt(int nt) {
    kiln_ctx *ctx = kiln_ctx_new();
    double params[2] = {0, 0}; /* layer, head */
    for (int i = 0; i < 8; i++) params[i == 7] += (double)pp_shapes[i][0] * (double)pp_shapes[i][1];
    const double total = 22 * params[0] + params[1];
    /* the f32 reference */
    pp_job ref[2] = {{.nt = nt, .s0 = 0, .s1 = 7}, {.nt = nt, .s0 = 7, .s1 = 8}};
    float *y = malloc((size_t)PP_M * 32000 * sizeof(float));
    bench_check(y != NULL, "prompt y");
    for (int i = 0; i < 8; i++) {
        const int64_t n = pp_shapes[i][0], k = pp_shapes[i][1];
        float *w = malloc((size_t)(n * k) * sizeof(float)), *x = malloc((size_t)(PP_M * k) * sizeof(float));
        bench_check(w && x, "prompt f32");
        for (int64_t e = 0; e < n * k; e++) w[e] = (float)((e * 2654435761u) % 2001) * 1e-5f - 0.01f;
        for (int64_t e = 0; e < PP_M * k; e++) x[e] = (float)((e * 40503u) % 2001) * 1e-3f - 1.0f;
        for (int r = 0; r < 2; r++) ref[r].w[i] = w, ref[r].x[i] = x, ref[r].y = y;
    }
    double rmed[2];
    bench_measure((bench_job[]){{run_pp_f32, &ref[0]}, {run_pp_f32, &ref[1]}}, 2, 1, 5, 1.5, rmed);
    const double ref_tps = PP_M / (22 * rmed[0] + rmed[1]);
    char name[96];
    snprintf(name, sizeof name, "prompt m=%d f32 1.1B llama %dt", PP_M, nt);
    bench_report(name, ref_tps, "tok/s", 0, REF_SGEMM);
    printf("%-34s      %9.1f GFLOP/s\n", "", 2.0 * PP_M * total / (22 * rmed[0] + rmed[1]) * 1e-9);
#ifdef KILN_BLAS
    /* OpenBLAS picks its kernels by the CPU it detects (0.3.21 takes this
     * VM for a "Prescott"; bench/run.sh forces SkylakeX for a second run) */
    openblas_set_num_threads(nt);
    double bmed[2];
    bench_measure((bench_job[]){{run_pp_blas, &ref[0]}, {run_pp_blas, &ref[1]}}, 2, 1, 5, 1.5, bmed);
    snprintf(name, sizeof name, "prompt m=%d f32 OpenBLAS %s %dt", PP_M, openblas_get_corename(), nt);
    bench_report(name, PP_M / (22 * bmed[0] + bmed[1]), "tok/s", ref_tps, REF_SGEMM);
#endif
    const kiln_cpu_caps saved = *kiln__cpu_caps();
    /* each integer GEMM (Q8_0 / Q4_0's, the K types', the blocks of
     * 32's), and the route below VNNI (AVX-512 and AVX-VNNI turned off):
     * for Q4_0 the dequantized panels and AVX-512 f32 GEMM it replaced
     * ("dequant"), for the K types and IQ4_XS AVX2's integer tile ("int8
     * no-VNNI"), the label taken from what the caps leave */
    static const struct {
        kiln_dtype t;
        bool dequant;
    } pv[] = {{KILN_Q4_0, false}, {KILN_Q8_0, false}, {KILN_Q4_0, true},   {KILN_Q4_K, false},  {KILN_Q4_K, true},
              {KILN_Q6_K, false}, {KILN_Q6_K, true},  {KILN_IQ4_XS, false}, {KILN_IQ4_XS, true}, {KILN_Q5_0, false},
              {KILN_IQ4_NL, false}};
    for (size_t v = 0; v < sizeof pv / sizeof pv[0]; v++) {
        const kiln_dtype t = pv[v].t;
        kiln_cpu_caps c = saved;
        if (pv[v].dequant) {
            c.avx512vnni = c.avxvnni = false;
            kiln__cpu_caps_set(&c);
        }
        const bool ints = kiln__qmm_gemm_available(t) || kiln__qmm_kgemm_handles(t);
        mm_job j[2] = {{pp_graph(ctx, t, 0, 7), nt}, {pp_graph(ctx, t, 7, 8), nt}};
        double med[2];
        bench_measure((bench_job[]){{run_mm, &j[0]}, {run_mm, &j[1]}}, 2, 1, 5, 1.5, med);
        kiln__cpu_caps_set(&saved);
        const double sec = 22 * med[0] + med[1];
        snprintf(name, sizeof name, "prompt m=%d %s%s 1.1B llama %dt", PP_M, kiln_dtype_name(t),
                 !ints ? (pv[v].dequant ? " dequant" : "") : pv[v].dequant ? " int8 no-VNNI" : " int8", nt);
        bench_report(name, PP_M / sec, "tok/s", ref_tps, REF_SGEMM);
        printf("%-34s      %9.1f GOP/s (layer %.1f ms, head %.1f ms)\n", "", 2.0 * PP_M * total / sec * 1e-9,
               med[0] * 1e3, med[1] * 1e3);
    }
    for (int i = 0; i < 8; i++) free(ref[0].w[i]), free(ref[0].x[i]);
    free(y);
    kiln_ctx_free(ctx);
}

/* The Q4_0 batch-1 kernel per core as a compute figure: W [256, 2048]
 * (295 KiB, in L2) and [4096, 4096] (9 MiB, in the LLC), with AVX512-VBMI
 * (four blocks per step) against the AVX512-VNNI pair kernel (VBMI turned
 * off), medians of interleaved runs, one thread (a per-core figure: two
 * threads on so small a GEMV measure the team's wake-up on shared cores);
 * only where the CPU has VBMI. */
typedef struct q4k_job {
    int64_t n, k;
    const void *w;
    const float *x;
    float *y;
    kiln_cpu_caps caps;
    int nt;
} q4k_job;

static void run_q4k(void *p) {
    q4k_job *j = p;
    kiln__cpu_caps_set(&j->caps);
    bench_check(kiln__qmatmul_cpu(KILN_Q4_0, 1, j->n, j->k, j->x, j->w, j->y, j->nt) == KILN_OK, "q4_0 gemv");
}

static void bench_q4_kernel(int nt, double scale) {
    const kiln_cpu_caps saved = *kiln__cpu_caps();
    if (nt != 1 || !saved.avx512vbmi || !saved.avx512vnni) return;
    const int64_t shapes[2][2] = {{256, 2048}, {4096, 4096}};
    for (int si = 0; si < 2; si++) {
        const int64_t n = shapes[si][0], k = shapes[si][1];
        float *wf = malloc((size_t)(n * k) * 4), *x = malloc((size_t)k * 4), *y = malloc((size_t)n * 4);
        void *w = malloc(kiln_dtype_size(KILN_Q4_0) * (size_t)(n * k / 32));
        bench_check(wf && x && y && w, "q4_0 gemv buffers");
        for (int64_t i = 0; i < n * k; i++) wf[i] = (float)((i * 2654435761u) % 2001) / 20000.0f - 0.05f;
        for (int64_t i = 0; i < k; i++) x[i] = (float)((i * 40503u) % 2001) / 500.0f - 2.0f;
        kiln__types[KILN_Q4_0].from_f32(wf, w, n * k);
        q4k_job j[2] = {{n, k, w, x, y, saved, nt}, {n, k, w, x, y, saved, nt}};
        j[1].caps.avx512vbmi = false;
        bench_job jobs[2] = {{run_q4k, &j[0]}, {run_q4k, &j[1]}};
        double med[2];
        bench_measure(jobs, 2, 20, 2000, 0.5 * scale, med);
        kiln__cpu_caps_set(&saved);
        const double bytes = (double)kiln_dtype_size(KILN_Q4_0) * (double)(n * k / 32);
        char name[80];
        snprintf(name, sizeof name, "q4_0 vbmi kernel %lldx%lld %dt", (long long)n, (long long)k, nt);
        bench_report(name, bytes / med[0] * 1e-9, "GB/s", bytes / med[1] * 1e-9, "vnni pair kernel");
        free(wf), free(x), free(y), free(w);
    }
}

static void bench_qmatmul(const bench_opts *o) {
    const int64_t tn = o->stream_mib * (1 << 20) / 4;
    bench_triad tr = bench_triad_new(tn);
    kiln_ctx *sctx = kiln_ctx_new();
    kiln_tensor *src = kiln_new_2d(sctx, KILN_F32, QM_N, QM_K);
    bench_check(src && kiln_tensor_fill_randn(src, 1, 0.0, 0.02) == KILN_OK, "weights");
    printf("# quantized matmul: y = x W^T, W [%d, %d] x L copies (> %lld MiB of weight bytes, LLC 480 MiB)\n", QM_N,
           QM_K, (long long)(QM_BYTES >> 20));
    const kiln_dtype ts[] = {KILN_F32,     KILN_Q4_0,    KILN_Q8_0,    KILN_NF4,  KILN_NF4_DQ, KILN_GQ4_128,
                             KILN_GQ3_128, KILN_GQ2_128, KILN_Q4_1,    KILN_Q5_0, KILN_Q5_1,   KILN_IQ4_NL,
                             KILN_Q4_K,    KILN_Q6_K, KILN_Q5_K,   KILN_IQ4_XS};
    const int saved = kiln_get_threads();
    for (int ti = 0; ti < o->n_threads; ti++) {
        const int nt = o->threads[ti];
        double f32_gbs = 0;
        for (int i = 0; i < (int)(sizeof ts / sizeof ts[0]); i++) {
            kiln_ctx *ctx = kiln_ctx_new();
            int l;
            kiln_graph *g = qm_graph(ctx, src, ts[i], 1, &l);
            mm_job j = {g, nt};
            tr.nt = nt;
            bench_job jobs[2] = {{run_mm, &j}, {bench_triad_run, &tr}};
            double med[2];
            bench_measure(jobs, 2, 3, 9, 1.5 * o->scale, med);
            const double wb = (double)l * (double)kiln_dtype_size(ts[i]) * QM_N * QM_K / (double)kiln_dtype_block(ts[i]);
            const double gbs = wb / med[0] * 1e-9, triad_gbs = bench_triad_gbs(&tr, med[1]);
            char name[64];
            snprintf(name, sizeof name, "gemv %s x%d %dt", kiln_dtype_name(ts[i]), l, nt);
            bench_report(name, gbs, "GB/s", triad_gbs, "triad");
            if (ts[i] == KILN_F32)
                f32_gbs = (double)l * QM_N * QM_K / med[0]; /* weights per second */
            else {
                snprintf(name, sizeof name, "gemv %s %dt, weights/s", kiln_dtype_name(ts[i]), nt);
                bench_report(name, (double)l * QM_N * QM_K / med[0] * 1e-9, "Gw/s", f32_gbs * 1e-9, "f32 gemv");
            }
            kiln_ctx_free(ctx);
        }
        bench_q4_kernel(nt, o->scale);
        bench_prompt(nt);
    }
    kiln_set_threads(saved);
    kiln_ctx_free(sctx);
    bench_triad_free(&tr);
}

typedef struct dq_job {
    kiln_graph *g;
} dq_job;
static void run_dq(void *arg) { bench_check(kiln_graph_compute(((dq_job *)arg)->g) == KILN_OK, "dequantize"); }

typedef struct q_job {
    kiln_tensor *x;
    kiln_dtype t;
} q_job;
static void run_q(void *arg) {
    const q_job *j = arg;
    kiln_ctx *ctx = kiln_ctx_new();
    bench_check(ctx && kiln_quantize(ctx, j->x, j->t), "quantize");
    kiln_ctx_free(ctx);
}

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
    /* and the GQ types (the GPTQ layout, RTN per group, asymmetric) */
    const kiln_dtype ts[13] = {KILN_NF4,     KILN_NF4_DQ,  KILN_Q4_0,   KILN_Q8_0,    KILN_GQ4_32,
                               KILN_GQ4_64,  KILN_GQ4_128, KILN_GQ3_32, KILN_GQ3_64,  KILN_GQ3_128,
                               KILN_GQ2_32,  KILN_GQ2_64,  KILN_GQ2_128};
    enum { NT = sizeof ts / sizeof ts[0] };
    kiln_tensor *q[NT];
    for (int i = 0; i < NT; i++) {
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
    for (int i = 0; i < NT; i++) {
        dq_job j = {kiln_graph_new(ctx)};
        bench_check(j.g && kiln_graph_add(j.g, kiln_dequantize(ctx, q[i])) == KILN_OK, "graph");
        double med;
        bench_measure(&(bench_job){run_dq, &j}, 1, 3, 50, 0.5 * o->scale, &med);
        char name[64];
        snprintf(name, sizeof name, "dequantize %s, 1 thread", kiln_dtype_name(ts[i]));
        bench_report(name, N / med / 1e9, "Gelem/s", 0, kiln_cpu_describe());
    }
    /* the K and IQ4 quantizers' rate (the scalar references llama-quantize's
     * mixes are written with), one thread */
    static const kiln_dtype kq[] = {KILN_Q4_K, KILN_Q5_K, KILN_Q6_K, KILN_Q2_K, KILN_Q3_K, KILN_IQ4_XS, KILN_IQ4_NL};
    for (size_t i = 0; i < sizeof kq / sizeof kq[0]; i++) {
        double med;
        bench_measure(&(bench_job){run_q, &(q_job){x, kq[i]}}, 1, 1, 5, 0.5 * o->scale, &med);
        char name[64];
        snprintf(name, sizeof name, "quantize %s, 1 thread", kiln_dtype_name(kq[i]));
        bench_report(name, N / med / 1e6, "Melem/s", 0, "quant/, no SIMD of its own");
    }
    kiln_set_threads(saved);
    free(xv), free(yv);
    kiln_ctx_free(ctx);
    bench_qmatmul(o);
}
