/* gemm_lowp.c — bf16/f16 GEMM: C (f32, bf16 or f16) = op(A) op(B) with
 * bf16 or f16 operands, or f32 operands rounded to bf16 (the mixed
 * precision of kiln_set_matmul_precision), always accumulated in f32.
 *
 * The path is chosen at run time (cpu_features.h):
 *   - AMX-BF16 tiles (gemm_lowp_amx.c), else AVX512-BF16 vdpbf16ps
 *     (gemm_lowp_avx512bf16.c), both on operands packed to bf16 in a
 *     tile-ready layout (gemm_lowp.h, packers in gemm_lowp_avx512.c);
 *   - the portable path everywhere else, and for f16 operands (f16 has
 *     more mantissa than bf16, so rounding it to bf16 would lose bits):
 *     operands widened to f32 (products of bf16 or f16 values are exact
 *     in f32) and multiplied by kiln__sgemm, the result narrowed to c_dt. */
#include "gemm_lowp.h"

#include "cpu_features.h"
#include "pool.h"
#include "scratch.h"

#include <stdlib.h>
#include <string.h>

static bool use_avx2(void) {
#if defined(__x86_64__)
    return kiln__cpu_avx2(kiln__cpu_caps());
#else
    return false;
#endif
}

/* n elements of in_dt as f32 (f32 input is rounded through bf16) */
static void row_to_f32(kiln_dtype in_dt, const void *src, float *dst, int64_t n, bool simd) {
#if defined(__x86_64__)
    if (simd) {
        kiln__lowp_row_to_f32_avx2(in_dt, src, dst, n);
        return;
    }
#endif
    (void)simd;
    if (in_dt != KILN_F32) {
        kiln__types[in_dt].to_f32(src, dst, n);
        return;
    }
    const float *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = kiln__bf16_to_f32(kiln__f32_to_bf16(s[i]));
}

static void row_from_f32(kiln_dtype c_dt, const float *src, void *dst, int64_t n, bool simd) {
#if defined(__x86_64__)
    if (simd) {
        kiln__lowp_row_from_f32_avx2(c_dt, src, dst, n);
        return;
    }
#endif
    (void)simd;
    kiln__types[c_dt].from_f32(src, dst, n);
}

/* Rows converted between a low-precision matrix (lp, row stride ld) and a
 * dense f32 one (f, cols wide), one way or the other. */
typedef struct rows_job {
    kiln_dtype dt;
    const void *lp_in;
    void *lp_out;
    float *f;
    int64_t cols, ld;
    bool simd;
} rows_job;

static void widen_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const rows_job *j = arg;
    size_t es = kiln__types[j->dt].size;
    (void)tid;
    for (int64_t i = i0; i < i1; i++)
        row_to_f32(j->dt, (const char *)j->lp_in + (size_t)(i * j->ld) * es, j->f + i * j->cols, j->cols, j->simd);
}

static void narrow_rows(void *arg, int64_t i0, int64_t i1, int tid) {
    const rows_job *j = arg;
    (void)tid;
    for (int64_t i = i0; i < i1; i++)
        row_from_f32(j->dt, j->f + i * j->cols, (uint16_t *)j->lp_out + i * j->ld, j->cols, j->simd);
}

/* The rows x cols matrix x (row stride ld) widened to a dense f32 copy. */
static float *widen(kiln_dtype in_dt, const void *x, int64_t rows, int64_t cols, int64_t ld, int nt) {
    float *w = kiln__malloc((size_t)(rows * cols) * sizeof(float));
    if (!w) return NULL;
    rows_job j = {in_dt, x, NULL, w, cols, ld, use_avx2()};
    kiln__pool_for(rows, 1, rows * cols > (1 << 16) ? nt : 1, widen_rows, &j);
    return w;
}

static kiln_status portable(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, int nt) {
    int64_t ar = ta ? k : m, ac = ta ? m : k, br = tb ? n : k, bc = tb ? k : n;
    float *aw = widen(in_dt, a, ar, ac, lda, nt), *bw = widen(in_dt, b, br, bc, ldb, nt);
    float *cw = c_dt == KILN_F32 ? c : kiln__malloc((size_t)(m * n) * sizeof(float));
    kiln_status s = KILN_OK;
    if (!aw || !bw || !cw) {
        s = kiln__errs(KILN_ERR_OOM, "matmul: no memory for the f32 copies of a [%lld, %lld] x [%lld, %lld] product",
                       (long long)m, (long long)k, (long long)k, (long long)n);
        goto out;
    }
    int64_t ldw = c_dt == KILN_F32 ? ldc : n;
    kiln__sgemm(ta, tb, m, n, k, 1.0f, aw, ac, bw, bc, 0.0f, cw, ldw, nt);
    if (c_dt != KILN_F32) {
        rows_job j = {c_dt, NULL, c, cw, n, ldc, use_avx2()};
        kiln__pool_for(m, 1, m * n > (1 << 16) ? nt : 1, narrow_rows, &j);
    }
out:
    free(aw);
    free(bw);
    if (cw != c) free(cw);
    return s;
}

#if defined(__x86_64__)
static int64_t round_up(int64_t x) { return (x + KILN_LOWP_BLOCK - 1) / KILN_LOWP_BLOCK * KILN_LOWP_BLOCK; }


static kiln_status packed(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                          const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc, int nt,
                          bool amx) {
    kiln_lowp_packed p = {.m = m, .n = n, .mp = round_up(m), .np = round_up(n), .kp = round_up(k)};
    /* below 2^25 multiply-adds (256^3: ~15 us on one core's tiles) a second
     * thread saves less than waking it costs, and on a busy machine waiting
     * for it at the join cost 10x the product itself */
    if ((double)p.mp * (double)p.np * (double)p.kp < (double)(1 << 25)) nt = 1;
    bool owned;
    uint16_t *ap = kiln__scratch_get((size_t)(p.mp + p.np) * (size_t)p.kp * 2, &owned), *bp = ap ? ap + p.mp * p.kp : NULL;
    if (!ap)
        return kiln__errs(KILN_ERR_OOM, "matmul: no memory to pack a [%lld, %lld] x [%lld, %lld] bf16 product",
                          (long long)m, (long long)k, (long long)k, (long long)n);
    p.a = ap, p.b = bp;
    kiln__lowp_pack_a_avx512(in_dt, ta, m, k, a, lda, ap, p.mp, p.kp, nt);
    kiln__lowp_pack_b_avx512(in_dt, tb, k, n, b, ldb, bp, p.kp, p.np, nt);
    if (amx) kiln__lowp_kernel_amx(&p, c_dt, c, ldc, nt);
    else kiln__lowp_kernel_avx512bf16(&p, c_dt, c, ldc, nt);
    if (owned) free(ap);
    return KILN_OK;
}
#endif

kiln_status kiln__gemm_lowp(kiln_dtype in_dt, kiln_dtype c_dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                            const void *a, int64_t lda, const void *b, int64_t ldb, void *c, int64_t ldc,
                            int n_threads) {
    if (in_dt != KILN_BF16 && in_dt != KILN_F16 && in_dt != KILN_F32)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: no low-precision CPU kernel for %s operands",
                          kiln_dtype_name(in_dt));
    if (c_dt != KILN_F32 && c_dt != KILN_BF16 && c_dt != KILN_F16)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "matmul: no low-precision CPU kernel writing %s", kiln_dtype_name(c_dt));
    if (m < 0 || n < 0 || k < 0)
        return kiln__errs(KILN_ERR_ARG, "matmul: negative size m %lld n %lld k %lld", (long long)m, (long long)n,
                          (long long)k);
    if (n_threads < 1) n_threads = 1;
    if (m == 0 || n == 0) return KILN_OK;
    if (k == 0) { /* an empty sum */
        size_t es = kiln__types[c_dt].size;
        for (int64_t i = 0; i < m; i++) memset((char *)c + (size_t)(i * ldc) * es, 0, (size_t)n * es);
        return KILN_OK;
    }
#if defined(__x86_64__)
    const kiln_cpu_caps *caps = kiln__cpu_caps();
    if (in_dt != KILN_F16 && kiln__cpu_avx512bf16(caps))
        return packed(in_dt, c_dt, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, n_threads, kiln__cpu_amx(caps));
#endif
    return portable(in_dt, c_dt, ta, tb, m, n, k, a, lda, b, ldb, c, ldc, n_threads);
}
