/* gemm.c — f32 GEMM GFLOP/s of kiln__sgemm (what a BLAS build runs) and
 * kiln__sgemm_own (what a BLAS=0 build runs) against OpenBLAS's cblas_sgemm
 * at the same thread count, for square sizes, the MLP's shapes (forward
 * x w^T and the two products of its backward pass) and three of a width-512
 * GPT's; and bf16 GEMM through
 * kiln__gemm_lowp (f32 out; bf16 operands, or f32 ones rounded to bf16 as
 * kiln_set_matmul_precision's bf16 mode does) against kiln's own f32 GEMM
 * in the same run. */
#include "bench.h"
#include "gemm.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef KILN_BLAS
#include <cblas.h>
#include <ctype.h>
#include <dlfcn.h>
typedef __typeof__(cblas_sgemm) sgemm_fn;
static sgemm_fn *threaded_sgemm(int nt);

/* "openblas-<core>": OpenBLAS picks its kernels by the CPU it detects, and
 * may pick an old core on a CPU it does not know (bench/run.sh then runs
 * the GEMM part again with OPENBLAS_CORETYPE forced); "-pthread" at more
 * than one thread, "-1t" where its threaded library is missing */
static const char *ref_name(int nt) {
    static char name[2][64];
    char *s = name[nt > 1];
    snprintf(s, sizeof name[0], "openblas-%s%s", openblas_get_corename(),
             nt == 1 ? "" : threaded_sgemm(nt) ? "-pthread" : "-1t");
    for (char *p = s; *p; p++) *p = (char)tolower((unsigned char)*p);
    return s;
}
#define REF_NAME(nt) ref_name(nt)
#else
#define REF_NAME(nt) ((void)(nt), "no openblas in a BLAS=0 build")
#endif

typedef struct gemm_job {
    bool ta, tb;
    int64_t m, n, k;
    const void *a, *b; /* f32, or bf16 for lowp */
    float *c;
    int nt;
} gemm_job;

static int64_t lead(bool trans, int64_t rows, int64_t cols) { return trans ? rows : cols; }

static void run_kiln(void *p) {
    gemm_job *j = p;
    kiln__sgemm(j->ta, j->tb, j->m, j->n, j->k, 1.0f, j->a, lead(j->ta, j->m, j->k), j->b, lead(j->tb, j->k, j->n),
                0.0f, j->c, j->n, j->nt);
}

static void run_own(void *p) {
    gemm_job *j = p;
    kiln__sgemm_own(j->ta, j->tb, j->m, j->n, j->k, 1.0f, j->a, lead(j->ta, j->m, j->k), j->b,
                    lead(j->tb, j->k, j->n), 0.0f, j->c, j->n, j->nt);
}

static void lowp(kiln_dtype in_dt, gemm_job *j) {
    kiln_status s = kiln__gemm_lowp(in_dt, KILN_F32, j->ta, j->tb, j->m, j->n, j->k, j->a,
                                    lead(j->ta, j->m, j->k), j->b, lead(j->tb, j->k, j->n), j->c, j->n, j->nt);
    bench_check(s == KILN_OK, "kiln__gemm_lowp");
}
static void run_lowp(void *p) { lowp(KILN_BF16, p); }
static void run_lowp_f32(void *p) { lowp(KILN_F32, p); }

#ifdef KILN_BLAS
/* The build links OpenBLAS's single-threaded library (see the Makefile),
 * whose figures at 2 threads would be 1 thread's: at more than one thread
 * the reference is the threaded library (libopenblas0-pthread), loaded
 * beside it with its own symbols. NULL when it is not installed. */
static sgemm_fn *threaded_sgemm(int nt) {
    static void *lib;
    static sgemm_fn *fn;
    static void (*set_threads)(int);
    if (!lib) {
        lib = dlopen(BENCH_OPENBLAS_PTHREAD, RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
        if (!lib) return NULL;
        fn = (sgemm_fn *)dlsym(lib, "cblas_sgemm");
        set_threads = (void (*)(int))dlsym(lib, "openblas_set_num_threads");
    }
    if (!fn || !set_threads) return NULL;
    set_threads(nt);
    return fn;
}

static void run_blas(void *p) {
    gemm_job *j = p;
    sgemm_fn *f = j->nt > 1 ? threaded_sgemm(j->nt) : NULL;
    (f ? f : cblas_sgemm)(CblasRowMajor, j->ta ? CblasTrans : CblasNoTrans, j->tb ? CblasTrans : CblasNoTrans,
                          (int)j->m, (int)j->n, (int)j->k, 1.0f, j->a, (int)lead(j->ta, j->m, j->k), j->b,
                          (int)lead(j->tb, j->k, j->n), 0.0f, j->c, (int)j->n);
}
#endif

static float *rand_f32(int64_t n, uint64_t seed) {
    float *v = aligned_alloc(64, ((size_t)n * sizeof(float) + 63) / 64 * 64);
    bench_check(v != NULL, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        v[i] = (float)((double)(seed >> 40) / (double)(1ull << 24) - 0.5);
    }
    return v;
}

/* f32 -> bf16 bits, round to nearest even (the values are finite). */
static uint16_t *to_bf16(const float *x, int64_t n) {
    uint16_t *v = aligned_alloc(64, ((size_t)n * 2 + 63) / 64 * 64);
    bench_check(v != NULL, "out of memory");
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], 4);
        v[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
    }
    return v;
}

/* A GEMM that is still slow (a scalar fallback) would take minutes at 4096:
 * a size is skipped when the rate measured at the previous size predicts
 * more than this many seconds per call. */
#define MAX_CALL_S 3.0

/* The last rates seen of kiln's dispatch and own kernel (0: none yet). */
typedef struct rates {
    double kiln, own;
} rates;

static bool too_slow(double gflops, double flop, double max_s) { return gflops > 0 && flop / (gflops * 1e9) > max_s; }

static void report_or_skip(const char *name, bool ran, double *rate, double measured, double flop, double ref,
                           int nt) {
    if (ran) {
        *rate = measured;
        bench_report(name, measured, "GFLOP/s", ref, REF_NAME(nt));
    } else {
        printf("%-34s skipped: %.1f GFLOP/s at the last size predicts %.0f s a call\n", name, *rate,
               flop / (*rate * 1e9));
    }
}

/* One shape at one thread count: kiln's dispatch, kiln's own kernel and
 * OpenBLAS, interleaved. */
static void one_shape(const bench_opts *o, const char *label, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                      int nt, rates *r) {
    float *a = rand_f32(m * k, 1), *b = rand_f32(k * n, 2), *c = rand_f32(m * n, 3);
    gemm_job j = {ta, tb, m, n, k, a, b, c, nt};
    double med[3] = {0, 0, 0}, flop = 2.0 * (double)m * (double)n * (double)k;
    bench_job jobs[3];
    int nj = 0, i_kiln = -1, i_own = -1, i_blas = -1;
    if (!too_slow(r->kiln, flop, MAX_CALL_S)) jobs[i_kiln = nj++] = (bench_job){run_kiln, &j};
    if (!too_slow(r->own, flop, MAX_CALL_S)) jobs[i_own = nj++] = (bench_job){run_own, &j};
#ifdef KILN_BLAS
    jobs[i_blas = nj++] = (bench_job){run_blas, &j};
#endif
    if (nj > 0) bench_measure(jobs, nj, 3, 15, 2.0 * o->scale, med);
    double ref = i_blas >= 0 ? flop / med[i_blas] * 1e-9 : 0;
    char name[64];
    snprintf(name, sizeof name, "sgemm %s %dt", label, nt);
    report_or_skip(name, i_kiln >= 0, &r->kiln, i_kiln >= 0 ? flop / med[i_kiln] * 1e-9 : 0, flop, ref, nt);
    snprintf(name, sizeof name, "sgemm_own %s %dt", label, nt);
    report_or_skip(name, i_own >= 0, &r->own, i_own >= 0 ? flop / med[i_own] * 1e-9 : 0, flop, ref, nt);
    free(a);
    free(b);
    free(c);
}

/* bf16 GEMM of s x s x s, of bf16 operands and of f32 ones rounded to
 * bf16, against kiln's own f32 GEMM, interleaved; skipped at a size where
 * the last rate predicts more than MAX_CALL_S a call. */
static void bf16_shape(const bench_opts *o, int64_t s, int nt, double *rate) {
    float *a = rand_f32(s * s, 4), *b = rand_f32(s * s, 5), *c = rand_f32(s * s, 6);
    uint16_t *ah = to_bf16(a, s * s), *bh = to_bf16(b, s * s);
    gemm_job jl = {false, false, s, s, s, ah, bh, c, nt}, jf = {false, false, s, s, s, a, b, c, nt};
    double flop = 2.0 * (double)s * (double)s * (double)s;
    char name[64], name_f32[64];
    snprintf(name, sizeof name, "gemm_bf16 %lld %dt", (long long)s, nt);
    snprintf(name_f32, sizeof name_f32, "gemm_bf16 f32-operands %lld %dt", (long long)s, nt);
    /* one call first: the build may have no bf16 kernel yet */
    double t0 = bench_now();
    kiln_status st = too_slow(*rate, flop, MAX_CALL_S)
                         ? KILN_OK
                         : kiln__gemm_lowp(KILN_BF16, KILN_F32, false, false, s, s, s, ah, s, bh, s, c, s, nt);
    double first = bench_now() - t0;
    if (st != KILN_OK) {
        printf("%-34s unavailable: %s\n", name, kiln_last_error());
        kiln_clear_error();
    } else if (too_slow(*rate, flop, MAX_CALL_S) || first > MAX_CALL_S) {
        printf("%-34s skipped: %.1f GFLOP/s predicts %.0f s a call\n", name, *rate > 0 ? *rate : flop / first * 1e-9,
               *rate > 0 ? flop / (*rate * 1e9) : first);
    } else {
        bench_job jobs[3] = {{run_lowp, &jl}, {run_lowp_f32, &jf}, {run_own, &jf}};
        double med[3] = {0, 0, 0};
        bench_measure(jobs, 3, 3, 15, 2.0 * o->scale, med);
        *rate = flop / med[2] * 1e-9;
        bench_report(name, flop / med[0] * 1e-9, "GFLOP/s", *rate, "kiln f32");
        bench_report(name_f32, flop / med[1] * 1e-9, "GFLOP/s", *rate, "kiln f32");
    }
    free(a);
    free(b);
    free(c);
    free(ah);
    free(bh);
}

void bench_gemm(const bench_opts *o) {
    static const int64_t sizes[] = {256, 384, 512, 1024, 2048, 4096};
    for (int t = 0; t < o->n_threads; t++) {
        int nt = o->threads[t];
        rates r = {0, 0};
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            char label[32];
            snprintf(label, sizeof label, "%lld", (long long)sizes[i]);
            one_shape(o, label, false, false, sizes[i], sizes[i], sizes[i], nt, &r);
        }
        /* the MLP's first layer, batch 128: forward y = x w^T, backward
         * dw = dy^T x and dx = dy w */
        one_shape(o, "mlp 128x256x784 NT", false, true, 128, 256, 784, nt, &r);
        one_shape(o, "mlp 256x784x128 TN", true, false, 256, 784, 128, nt, &r);
        one_shape(o, "mlp 128x784x256 NN", false, false, 128, 784, 256, nt, &r);
        /* a GPT of width 512, batch 8 x context 256: the attention's
         * projections x w^T, the MLP's first layer, and a weight gradient
         * dw = dy^T x */
        one_shape(o, "gpt512 2048x512x512 NT", false, true, 2048, 512, 512, nt, &r);
        one_shape(o, "gpt512 2048x2048x512 NT", false, true, 2048, 2048, 512, nt, &r);
        one_shape(o, "gpt512 512x512x2048 TN", true, false, 512, 512, 2048, nt, &r);
        double f32_rate = 0;
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
            if (sizes[i] >= 512) bf16_shape(o, sizes[i], nt, &f32_rate);
    }
}
