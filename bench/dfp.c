/* dfp.c — the DFP GEMM (backends/cpu/gemm_dfp.h) against f32 GEMM of the
 * same shape in the same run: GOP/s (2 m n k per call) of kiln__gemm_dfp on
 * 14-bit operands (the DFP ops' precision: chunks of 32 k), of the same
 * with the f32 -> DFP quantization of both operands counted in, of kiln's
 * f32 sgemm (kiln__sgemm: OpenBLAS in a BLAS build) and kiln's own f32
 * kernel, and OpenBLAS cblas_sgemm; in the NT form (B [n, k]), and the
 * convolution's NN form (B [k, n]). */
#include "bench.h"
#include "gemm.h"
#include "gemm_dfp.h"

#include "../quant/dfp.h"

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
    }
}
