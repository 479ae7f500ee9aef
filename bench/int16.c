/* int16.c — `kiln_bench --only dfp`, INT16 dynamic fixed point (quant/dfp.h):
 * the DFP GEMM (backends/cpu/gemm_dfp.h) against f32 GEMM of the same shape
 * in the same run: GOP/s (2 m n k per call) of kiln__gemm_dfp on
 * 14-bit operands (the DFP ops' precision: chunks of 32 k), of the same
 * with the f32 -> DFP quantization of both operands counted in, of kiln's
 * f32 sgemm (kiln__sgemm: OpenBLAS in a BLAS build) and kiln's own f32
 * kernel, and OpenBLAS cblas_sgemm; in the NT form (B [n, k]), and the
 * convolution's NN form (B [k, n]). Then the Fashion CNN's whole training
 * step (examples/int16-train: graph compute and AdamW, batch 64) in FP32
 * and in DFP, measured interleaved: images/s and the DFP/FP32 ratio. */
#include "bench.h"
#include "gemm.h"
#include "gemm_dfp.h"

#include "cnn.h"

#include "coders.h"

#include <stdio.h>
#include <stdlib.h>

#ifdef KILN_BLAS
#include <cblas.h>
#endif

typedef struct dfp_job {
    int64_t m, n, k;
    bool kn; /* B stored [k, n] (the convolution's im2col columns), else [n, k] */
    const float *a, *b;
    int16_t *qa, *qb;
    int ea, eb, ma, mb;
    float *c;
    int nt;
} dfp_job;

static void run_dfp(void *p) {
    dfp_job *j = p;
    bench_check(kiln__gemm_dfp_t(false, j->kn, j->m, j->n, j->k, j->qa, j->k, j->ma, j->ea, j->qb, j->kn ? j->n : j->k,
                                 j->mb, j->eb, j->c, j->n, j->nt) == KILN_OK,
                "kiln__gemm_dfp");
}

static void run_dfp_quant(void *p) {
    dfp_job *j = p;
    kiln__dfp_quantize(j->a, j->m * j->k, 14, j->qa, &j->ea, &j->ma, false, 0);
    kiln__dfp_quantize(j->b, j->n * j->k, 14, j->qb, &j->eb, &j->mb, false, 0);
    run_dfp(p);
}

static void run_sgemm(void *p) {
    dfp_job *j = p;
    kiln__sgemm(false, !j->kn, j->m, j->n, j->k, 1.0f, j->a, j->k, j->b, j->kn ? j->n : j->k, 0.0f, j->c, j->n, j->nt);
}

static void run_own(void *p) {
    dfp_job *j = p;
    kiln__sgemm_own(false, !j->kn, j->m, j->n, j->k, 1.0f, j->a, j->k, j->b, j->kn ? j->n : j->k, 0.0f, j->c, j->n,
                    j->nt);
}

#ifdef KILN_BLAS
static void run_blas(void *p) {
    dfp_job *j = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, j->kn ? CblasNoTrans : CblasTrans, (int)j->m, (int)j->n, (int)j->k, 1.0f,
                j->a, (int)j->k, j->b, (int)(j->kn ? j->n : j->k), 0.0f, j->c, (int)j->n);
}
#endif

static float *rand_f32(int64_t n, uint64_t seed) {
    float *v = malloc((size_t)n * sizeof *v);
    bench_check(v != NULL, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
    }
    return v;
}

static void shape(const bench_opts *o, const char *label, int64_t m, int64_t n, int64_t k, bool kn, int nt) {
    dfp_job j = {.m = m, .n = n, .k = k, .kn = kn, .a = rand_f32(m * k, 1), .b = rand_f32(n * k, 2), .nt = nt};
    j.qa = malloc((size_t)(m * k) * 2), j.qb = malloc((size_t)(n * k) * 2), j.c = malloc((size_t)(m * n) * 4);
    bench_check(j.qa && j.qb && j.c, "out of memory");
    run_dfp_quant(&j);
    bench_job jobs[5] = {{run_dfp, &j}, {run_dfp_quant, &j}, {run_sgemm, &j}, {run_own, &j}};
    int nj = 4;
#ifdef KILN_BLAS
    openblas_set_num_threads(nt);
    jobs[nj++] = (bench_job){run_blas, &j};
#endif
    double med[5] = {0}, ops = 2.0 * (double)m * (double)n * (double)k;
    bench_measure(jobs, nj, 3, 15, 1.5 * o->scale, med);
    double ref = nj == 5 ? ops / med[4] * 1e-9 : 0;
    const char *rn = nj == 5 ? "openblas sgemm" : "no openblas in a BLAS=0 build";
    char name[80];
    snprintf(name, sizeof name, "dfp_gemm %s %dt", label, nt);
    bench_report(name, ops / med[0] * 1e-9, "GOP/s", ref, rn);
    snprintf(name, sizeof name, "dfp_gemm %s %dt", label, nt);
    bench_report(name, ops / med[0] * 1e-9, "GOP/s", ops / med[3] * 1e-9, "kiln sgemm_own");
    snprintf(name, sizeof name, "dfp_gemm+quantize %s %dt", label, nt);
    bench_report(name, ops / med[1] * 1e-9, "GOP/s", ref, rn);
    snprintf(name, sizeof name, "sgemm (kiln__sgemm) %s %dt", label, nt);
    bench_report(name, ops / med[2] * 1e-9, "GFLOP/s", ref, rn);
    free((void *)j.a), free((void *)j.b), free(j.qa), free(j.qb), free(j.c);
}

/* One model's training step on fixed random images and labels. */
typedef struct step_job {
    kiln_ctx *ctx;
    cnn *m;
    model_graph g;
    kiln_optim *opt;
} step_job;

static void run_step(void *arg) {
    step_job *j = arg;
    bench_check(!kiln_graph_compute(j->g.graph) && !kiln_optim_step(j->opt), "cnn step failed");
}

static void step_init(step_job *j, unsigned dfp, int64_t batch) {
    j->ctx = kiln_ctx_new();
    cnn_config c = cnn_defaults();
    c.dfp = dfp;
    j->m = j->ctx ? cnn_new(j->ctx, &c, 1) : NULL;
    bench_check(j->m && !cnn_train_graph(j->m, batch, &j->g), "cnn setup failed");
    j->opt = kiln_adamw_new(j->ctx, NULL);
    int32_t *lab = malloc((size_t)batch * 4);
    bench_check(j->opt && lab, "cnn setup failed");
    for (int64_t i = 0; i < batch; i++) lab[i] = (int32_t)(i * 7 % 10);
    bench_check(!kiln_tensor_fill_randn(j->g.input, 3, 0.0, 1.0) && !kiln_tensor_set_i32(j->g.labels, lab, batch),
                "cnn setup failed");
    free(lab);
}

static void cnn_steps(const bench_opts *o, int nt) {
    const int64_t batch = 64;
    step_job j[2];
    kiln_set_threads(nt);
    step_init(&j[0], 0, batch), step_init(&j[1], CNN_DFP_ALL, batch);
    bench_job jobs[2] = {{run_step, &j[0]}, {run_step, &j[1]}};
    double med[2];
    bench_measure(jobs, 2, 5, 40, 3.0 * o->scale, med);
    char name[80];
    snprintf(name, sizeof name, "cnn train step fp32 b64 %dt", nt);
    bench_report(name, (double)batch / med[0], "img/s", 0, "");
    snprintf(name, sizeof name, "cnn train step dfp b64 %dt", nt);
    bench_report(name, (double)batch / med[1], "img/s", (double)batch / med[0], "fp32 step");
    for (int i = 0; i < 2; i++) cnn_free(j[i].m), kiln_ctx_free(j[i].ctx);
}

void bench_dfp(const bench_opts *o) {
    for (int t = 0; t < o->n_threads; t++) {
        int nt = o->threads[t];
        shape(o, "512", 512, 512, 512, false, nt);
        shape(o, "1024", 1024, 1024, 1024, false, nt);
        shape(o, "2048", 2048, 2048, 2048, false, nt);
        /* the MLP's first layer, batch 128 (forward y = x w^T) */
        shape(o, "mlp 128x256x784", 128, 256, 784, false, nt);
        /* the Fashion CNN's conv2 as kiln_dfp_conv2d runs it: w [32, 144]
         * times the im2col columns [144, 128 images x 14 x 14] */
        shape(o, "conv2 32x25088x144 NN", 32, 25088, 144, true, nt);
        cnn_steps(o, nt);
    }
}
