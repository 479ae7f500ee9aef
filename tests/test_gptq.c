/* test_gptq.c — the GPTQ layout and its algorithms (include/kiln.h): the
 * reference Quantizer's scale, zero and codes on hand-worked rows
 * (asymmetric, symmetric with its saturating all-positive case, zero rows,
 * groups); RTN's round-trip error bounds; GPTQ against an independent
 * double-precision implementation of the paper's algorithm (column after
 * column over the whole matrix, no lazy blocks, its own Cholesky), with
 * and without act order and groups, at 2, 3 and 4 bits; GPTQ's output
 * error below RTN's on correlated inputs; dead columns; errors, one of
 * them a link without the CPU backend's GEMM (core/host_gemm.h). A BLAS=0
 * build has no LAPACK: there GPTQ must fail with KILN_ERR_UNSUPPORTED. */
#include "kt.h"
#include "host_gemm.h"
#include "../backends/cpu/gemm.h"

#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_next(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static double rng_normal(uint64_t *s) {
    double u1 = ((double)(rng_next(s) >> 11) + 0.5) / 9007199254740992.0;
    double u2 = (double)(rng_next(s) >> 11) / 9007199254740992.0;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* RTN of one row with one group: codes, scale and zero */
static kiln_gptq_result *rtn_row(const float *x, int64_t n, int bits, bool sym, int64_t group) {
    kiln_gptq_config c = kiln_gptq_defaults();
    c.bits = bits;
    c.sym = sym;
    c.group_size = group;
    return kiln_rtn_quantize(x, 1, n, &c);
}

KT_TEST(gptq_quantizer_hand_worked) {
    /* asymmetric 4-bit: xmin -1, xmax 3.5, scale 4.5/15 = 0.3, zero
     * round(1/0.3 = 3.33) = 3; x/0.3 = -3.33, 1.67, 6.67, 11.67 */
    kiln_gptq_result *r = rtn_row((const float[]){-1.0f, 0.5f, 2.0f, 3.5f}, 4, 4, false, 0);
    KT_NOTNULL(r);
    KT_CHECK(r->n_groups == 1 && r->group_size == 4, "groups %lld size %lld", (long long)r->n_groups,
             (long long)r->group_size);
    KT_CHECK(fabsf(r->scales[0] - 0.3f) < 1e-7f && r->zeros[0] == 3, "scale %g zero %d", (double)r->scales[0],
             r->zeros[0]);
    KT_CHECK(r->codes[0] == 0 && r->codes[1] == 5 && r->codes[2] == 10 && r->codes[3] == 15, "codes %d %d %d %d",
             r->codes[0], r->codes[1], r->codes[2], r->codes[3]);
    kiln_gptq_result_free(r);

    /* two groups of 3 at 2 bits: [1, 2, 3] has xmin 0 (the range holds 0):
     * scale 1, zero 0, codes 1 2 3; [-3, -1.2, 0]: scale 1, zero 3,
     * codes 0, 3 - 1 = 2 (-1.2 -> -1), 3 */
    r = rtn_row((const float[]){1, 2, 3, -3, -1.2f, 0}, 6, 2, false, 3);
    KT_NOTNULL(r);
    KT_CHECK(r->n_groups == 2 && r->g_idx[2] == 0 && r->g_idx[3] == 1, "groups %lld", (long long)r->n_groups);
    KT_CHECK(r->scales[0] == 1.0f && r->zeros[0] == 0 && r->scales[1] == 1.0f && r->zeros[1] == 3,
             "scales %g %g zeros %d %d", (double)r->scales[0], (double)r->scales[1], r->zeros[0], r->zeros[1]);
    const uint8_t want2[6] = {1, 2, 3, 0, 2, 3};
    KT_CHECK(memcmp(r->codes, want2, 6) == 0, "codes %d %d %d %d %d %d", r->codes[0], r->codes[1], r->codes[2],
             r->codes[3], r->codes[4], r->codes[5]);
    float back[6];
    KT_OK(kiln_gptq_dequantize(r, back));
    KT_CHECK(back[0] == 1 && back[2] == 3 && back[3] == -3 && back[4] == -1 && back[5] == 0, "dequant %g %g %g",
             (double)back[0], (double)back[3], (double)back[4]);
    kiln_gptq_result_free(r);

    /* symmetric 4-bit: xmax = max(|-1|, 2) = 2, xmin = -2, scale 4/15,
     * zero 8; 2 -> 7.5 -> 15 (8 + 8 clamps to 15 too), -1 -> -3.75 -> 4,
     * 0.5 -> 1.875 -> 10, -0.2 -> -0.75 -> 7 */
    r = rtn_row((const float[]){2.0f, -1.0f, 0.5f, -0.2f}, 4, 4, true, 0);
    KT_NOTNULL(r);
    KT_CHECK(fabsf(r->scales[0] - 4.0f / 15.0f) < 1e-7f && r->zeros[0] == 8, "sym scale %g zero %d",
             (double)r->scales[0], r->zeros[0]);
    KT_CHECK(r->codes[0] == 15 && r->codes[1] == 4 && r->codes[2] == 10 && r->codes[3] == 7, "sym codes %d %d %d %d",
             r->codes[0], r->codes[1], r->codes[2], r->codes[3]);
    kiln_gptq_result_free(r);

    /* symmetric with no negative value: xmin stays 0, scale = 2/3 at 2 bits,
     * zero still 2, so both values saturate at code 3 = +1 scale (as the
     * reference: 0.5 -> 0.75 -> 1 + 2, 2 -> 3 + 2 clamps) */
    r = rtn_row((const float[]){0.5f, 2.0f}, 2, 2, true, 0);
    KT_NOTNULL(r);
    KT_CHECK(fabsf(r->scales[0] - 2.0f / 3.0f) < 1e-7f && r->zeros[0] == 2 && r->codes[0] == 3 && r->codes[1] == 3,
             "sym positive: scale %g zero %d codes %d %d", (double)r->scales[0], r->zeros[0], r->codes[0],
             r->codes[1]);
    kiln_gptq_result_free(r);

    /* a zero row: range [-1, 1], scale 2/15; asymmetric zero = round(1 /
     * scale): 2/15 rounds up in f32, 1/scale is 7.4999995 -> 7 (torch gives
     * the same); symmetric zero 8. Either way the row comes back as zeros. */
    const float zrow[3] = {0, 0, 0};
    for (int sym = 0; sym < 2; sym++) {
        r = rtn_row(zrow, 3, 4, sym, 0);
        KT_NOTNULL(r);
        KT_CHECK(fabsf(r->scales[0] - 2.0f / 15.0f) < 1e-8f && r->zeros[0] == (sym ? 8 : 7),
                 "zero row sym %d: scale %g zero %d", sym, (double)r->scales[0], r->zeros[0]);
        KT_CHECK(r->codes[0] == r->zeros[0] && r->codes[2] == r->zeros[0], "zero row codes %d", r->codes[0]);
        KT_OK(kiln_gptq_dequantize(r, back));
        KT_CHECK(back[0] == 0 && back[1] == 0 && back[2] == 0 && r->error == 0, "zero row dequant %g", (double)back[0]);
        kiln_gptq_result_free(r);
    }
}

KT_TEST(gptq_rtn_round_trip) {
    const int64_t rows = 16, cols = 256;
    float *w = malloc(sizeof(float) * rows * cols), *back = malloc(sizeof(float) * rows * cols);
    uint64_t s = 7;
    for (int64_t i = 0; i < rows * cols; i++) w[i] = (float)(0.05 * rng_normal(&s));
    const int bits[4] = {2, 3, 4, 8};
    const int64_t groups[3] = {32, 128, 0};
    for (int b = 0; b < 4; b++)
        for (int gi = 0; gi < 3; gi++)
            for (int sym = 0; sym < 2; sym++) {
                kiln_gptq_config c = kiln_gptq_defaults();
                c.bits = bits[b];
                c.group_size = groups[gi];
                c.sym = sym;
                kiln_gptq_result *r = kiln_rtn_quantize(w, rows, cols, &c);
                KT_NOTNULL(r);
                KT_OK(kiln_gptq_dequantize(r, back));
                const int64_t gs = groups[gi] ? groups[gi] : cols;
                KT_CHECK(r->group_size == gs && r->n_groups == cols / gs, "group size %lld", (long long)r->group_size);
                const int maxq = (1 << bits[b]) - 1;
                double sse = 0.0;
                int64_t over_half = 0, bad = 0;
                for (int64_t i = 0; i < rows; i++)
                    for (int64_t k = 0; k < cols; k++) {
                        const int64_t g = k / gs;
                        KT_CHECK(r->g_idx[k] == g, "g_idx[%lld] = %d", (long long)k, r->g_idx[k]);
                        const float sc = r->scales[i * r->n_groups + g];
                        const uint8_t q = r->codes[i * cols + k], z = r->zeros[i * r->n_groups + g];
                        const double e = fabs((double)w[i * cols + k] - back[i * cols + k]);
                        if (q > maxq || back[i * cols + k] != sc * (float)(q - z)) bad++;
                        /* round to nearest: half a step; a value rounded past maxq
                         * (round(x/s) + round(-xmin/s) = maxq + 1) or, symmetric,
                         * the positive extreme clamps: up to a whole step */
                        if (e > 0.5 * sc * (1 + 1e-5)) over_half++;
                        if (e > sc * (1 + 1e-5)) bad++;
                        sse += e * e;
                    }
                KT_CHECK(bad == 0, "bits %d group %lld sym %d: %lld codes out of range or off the grid", bits[b],
                         (long long)gs, sym, (long long)bad);
                KT_CHECK(over_half <= rows * cols / gs * (sym ? 1 : 1), "bits %d group %lld sym %d: %lld over half a step",
                         bits[b], (long long)gs, sym, (long long)over_half);
                KT_CHECK(fabs(sse - r->error) <= 1e-6 * sse + 1e-12, "error %g vs %g", r->error, sse);
                if (gi == 1 && bits[b] <= 4)
                    printf("  rtn %d-bit group 128 %s: rmse %.3e (weights sd 5e-2)\n", bits[b], sym ? "sym " : "asym",
                           sqrt(sse / (double)(rows * cols)));
                kiln_gptq_result_free(r);
            }
    free(w);
    free(back);
}

KT_TEST(gptq_errors) {
    const float w[4] = {1, 2, 3, 4};
    kiln_gptq_config c = kiln_gptq_defaults();
    c.bits = 5;
    KT_EXPECT_ERR(kiln_rtn_quantize(w, 2, 2, &c), KILN_ERR_ARG, "bits");
    c = kiln_gptq_defaults();
    c.group_size = -1;
    KT_EXPECT_ERR(kiln_rtn_quantize(w, 2, 2, &c), KILN_ERR_ARG, "group_size");
    c = kiln_gptq_defaults();
    KT_EXPECT_ERR(kiln_rtn_quantize(w, 0, 2, &c), KILN_ERR_SHAPE, "shape");
    const float nan_w[4] = {1, NAN, 3, 4};
    KT_EXPECT_ERR(kiln_rtn_quantize(nan_w, 2, 2, &c), KILN_ERR_NUMERIC, "not finite");
    KT_EXPECT_ERR(kiln_gptq_new(0), KILN_ERR_SHAPE, "column");
    kiln_gptq *h = kiln_gptq_new(2);
    KT_NOTNULL(h);
    KT_CHECK(kiln_gptq_add_batch(h, nan_w, 2) == KILN_ERR_NUMERIC, "NaN batch accepted");
    KT_CHECK(kiln_gptq_samples(h) == 0, "samples %lld", (long long)kiln_gptq_samples(h));
#ifdef KILN_BLAS
    KT_EXPECT_ERR(kiln_gptq_quantize(h, w, 2, &c), KILN_ERR_STATE, "no calibration");
    KT_OK(kiln_gptq_add_batch(h, w, 2));
    c.percdamp = -1;
    KT_EXPECT_ERR(kiln_gptq_quantize(h, w, 2, &c), KILN_ERR_ARG, "percdamp");
#else
    KT_OK(kiln_gptq_add_batch(h, w, 2));
    KT_EXPECT_ERR(kiln_gptq_quantize(h, w, 2, &c), KILN_ERR_UNSUPPORTED, "BLAS=0");
#endif
    kiln_gptq_free(h);
}

/* GPTQ's products are the GEMM the CPU backend lends core: where none was
 * lent, both calls refuse before touching anything. */
KT_TEST(gptq_without_a_host_gemm) {
    const float x[4] = {1, 2, 3, 4};
    kiln_gptq *h = kiln_gptq_new(2);
    KT_NOTNULL(h);
    KT_OK(kiln_gptq_add_batch(h, x, 2));
    kiln__host_sgemm_lend(NULL);
    KT_CHECK(kiln_gptq_add_batch(h, x, 2) == KILN_ERR_UNSUPPORTED &&
                 strstr(kiln_last_error(), "kiln_gptq_add_batch: no CPU backend"),
             "a batch without a GEMM: %s", kiln_last_error());
    KT_CHECK(kiln_gptq_samples(h) == 2, "samples %lld after a refused batch", (long long)kiln_gptq_samples(h));
#ifdef KILN_BLAS
    kiln_gptq_config c = kiln_gptq_defaults();
    KT_EXPECT_ERR(kiln_gptq_quantize(h, x, 2, &c), KILN_ERR_UNSUPPORTED, "kiln_gptq_quantize: no CPU backend");
#endif
    kiln__host_sgemm_lend(kiln__sgemm);
    KT_OK(kiln_gptq_add_batch(h, x, 2));
    KT_CHECK(kiln_gptq_samples(h) == 4, "samples %lld", (long long)kiln_gptq_samples(h));
    kiln_gptq_free(h);
}

#ifdef KILN_BLAS

/* ---- an independent reference: the paper's algorithm in double, column by
 * column over the whole matrix ---- */

static void ref_fit(const double *x, int64_t n, int bits, bool sym, double *scale, double *zero) {
    const double maxq = (double)((1 << bits) - 1);
    double lo = 0, hi = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = fmin(lo, x[i]);
        hi = fmax(hi, x[i]);
    }
    if (sym) {
        hi = fmax(-lo, hi);
        if (lo < 0) lo = -hi;
    }
    if (lo == 0 && hi == 0) lo = -1, hi = 1;
    *scale = (hi - lo) / maxq;
    *zero = sym ? (maxq + 1) / 2 : nearbyint(-lo / *scale);
}

/* lower Cholesky factor in place (a symmetric, full); false if not PD */
static bool ref_cholesky(double *a, int64_t n) {
    for (int64_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (int64_t k = 0; k < j; k++) d -= a[j * n + k] * a[j * n + k];
        if (!(d > 0)) return false;
        a[j * n + j] = sqrt(d);
        for (int64_t i = j + 1; i < n; i++) {
            double v = a[i * n + j];
            for (int64_t k = 0; k < j; k++) v -= a[i * n + k] * a[j * n + k];
            a[i * n + j] = v / a[j * n + j];
        }
        for (int64_t i = 0; i < j; i++) a[i * n + j] = 0;
    }
    return true;
}

typedef struct ref_out {
    uint8_t *codes; /* original column order */
    double *scales, *zeros;
    double loss;
} ref_out;

static bool ref_gptq(const float *w, int64_t rows, int64_t c, const float *x, int64_t n, const kiln_gptq_config *cfg,
                     ref_out *o) {
    const int64_t gs = cfg->group_size ? cfg->group_size : c, ng = (c + gs - 1) / gs;
    const double maxq = (double)((1 << cfg->bits) - 1);
    double *h = calloc((size_t)(c * c), sizeof *h), *hp = malloc(sizeof(double) * c * c);
    double *wp = malloc(sizeof(double) * rows * c), *li = calloc((size_t)(c * c), sizeof *li);
    int64_t *perm = malloc(sizeof(int64_t) * c);
    for (int64_t s = 0; s < n; s++)
        for (int64_t i = 0; i < c; i++)
            for (int64_t j = i; j < c; j++) h[i * c + j] += 2.0 * x[s * c + i] * x[s * c + j] / (double)n;
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < i; j++) h[i * c + j] = h[j * c + i];
    bool dead[512] = {0};
    for (int64_t i = 0; i < c; i++)
        if (h[i * c + i] == 0) dead[i] = true, h[i * c + i] = 1;
    for (int64_t i = 0; i < c; i++) perm[i] = i;
    if (cfg->act_order) /* insertion sort, descending diag, ties by index */
        for (int64_t i = 1; i < c; i++)
            for (int64_t k = i; k > 0 && h[perm[k] * c + perm[k]] > h[perm[k - 1] * c + perm[k - 1]]; k--) {
                int64_t t = perm[k];
                perm[k] = perm[k - 1];
                perm[k - 1] = t;
            }
    double mean = 0;
    for (int64_t i = 0; i < c; i++) mean += h[i * c + i] / (double)c;
    for (int64_t i = 0; i < c; i++)
        for (int64_t j = 0; j < c; j++)
            hp[i * c + j] = h[perm[i] * c + perm[j]] + (i == j ? cfg->percdamp * mean : 0);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t k = 0; k < c; k++) wp[r * c + k] = dead[perm[k]] ? 0 : w[r * c + perm[k]];
    /* H = L L^T; H^-1 = L^-T L^-1; H^-1 = U^T U with U = (chol H^-1)^T */
    bool ok = ref_cholesky(hp, c);
    if (ok) {
        for (int64_t j = 0; j < c; j++) { /* li = L^-1, forward substitution */
            li[j * c + j] = 1 / hp[j * c + j];
            for (int64_t i = j + 1; i < c; i++) {
                double v = 0;
                for (int64_t k = j; k < i; k++) v += hp[i * c + k] * li[k * c + j];
                li[i * c + j] = -v / hp[i * c + i];
            }
        }
        for (int64_t i = 0; i < c; i++) /* hp = L^-T L^-1 */
            for (int64_t j = 0; j < c; j++) {
                double v = 0;
                for (int64_t k = i > j ? i : j; k < c; k++) v += li[k * c + i] * li[k * c + j];
                hp[i * c + j] = v;
            }
        ok = ref_cholesky(hp, c); /* hp = L2, U = L2^T: U[i][j] = hp[j][i] */
    }
    o->loss = 0;
    double *gbuf = malloc(sizeof(double) * gs);
    for (int64_t r = 0; ok && r < rows; r++) {
        double *wr = wp + r * c, sc = 0, z = 0;
        for (int64_t i = 0; i < c; i++) {
            if (i % gs == 0) {
                int64_t len = i + gs > c ? c - i : gs;
                for (int64_t j = 0; j < len; j++) gbuf[j] = wr[i + j];
                ref_fit(gbuf, len, cfg->bits, cfg->sym, &sc, &z);
                o->scales[r * ng + i / gs] = sc;
                o->zeros[r * ng + i / gs] = z;
            }
            double q = fmin(fmax(nearbyint(wr[i] / sc) + z, 0), maxq);
            o->codes[r * c + perm[i]] = (uint8_t)q;
            double d = hp[i * c + i], e = (wr[i] - sc * (q - z)) / d;
            o->loss += e * e / 2;
            for (int64_t j = i + 1; j < c; j++) wr[j] -= e * hp[j * c + i];
        }
    }
    free(gbuf);
    free(h);
    free(hp);
    free(wp);
    free(li);
    free(perm);
    return ok;
}

/* correlated inputs: x = z A with A mixing each column with its
 * neighbours and column scales spread over a decade */
static float *correlated(int64_t n, int64_t c, uint64_t seed, const int64_t *dead, int n_dead) {
    float *x = malloc(sizeof(float) * n * c);
    double *z = malloc(sizeof(double) * c);
    uint64_t s = seed;
    for (int64_t t = 0; t < n; t++) {
        for (int64_t i = 0; i < c; i++) z[i] = rng_normal(&s);
        for (int64_t i = 0; i < c; i++) {
            double v = z[i] + 0.8 * (i > 0 ? z[i - 1] : 0) + 0.6 * (i > 1 ? z[i - 2] : 0) + 0.5 * z[(i * 7) % c];
            x[t * c + i] = (float)(v * (0.3 + 3.0 * (double)((i * 37) % c) / (double)c));
        }
        for (int d = 0; d < n_dead; d++) x[t * c + dead[d]] = 0;
    }
    free(z);
    return x;
}

static float *weights(int64_t rows, int64_t c, uint64_t seed) {
    float *w = malloc(sizeof(float) * rows * c);
    uint64_t s = seed;
    for (int64_t i = 0; i < rows * c; i++) w[i] = (float)(0.05 * rng_normal(&s));
    return w;
}

/* kiln's GPTQ with x fed in batches of 100 rows */
static kiln_gptq_result *run_gptq(const float *w, int64_t rows, int64_t c, const float *x, int64_t n,
                                  const kiln_gptq_config *cfg) {
    kiln_gptq *h = kiln_gptq_new(c);
    if (!h) return NULL;
    for (int64_t s = 0; s < n; s += 100)
        if (kiln_gptq_add_batch(h, x + s * c, n - s < 100 ? n - s : 100)) {
            kiln_gptq_free(h);
            return NULL;
        }
    kiln_gptq_result *r = kiln_gptq_quantize(h, w, rows, cfg);
    kiln_gptq_free(h);
    return r;
}

/* ties: symmetric groups put their negative extreme exactly on a rounding
 * tie (-xmax / scale = -maxq / 2), so when a group's first column is that
 * extreme f32 and double may round it either way; the flip then changes
 * the later updates. Then only the figures are compared, loosely. */
static void check_against_ref(const char *what, const float *w, int64_t rows, int64_t c, const float *x, int64_t n,
                              const kiln_gptq_config *cfg, bool ties) {
    kiln_gptq_result *r = run_gptq(w, rows, c, x, n, cfg);
    if (!r) {
        kt_fail(__FILE__, __LINE__, "%s: %s", what, kiln_last_error());
        return;
    }
    const int64_t gs = cfg->group_size ? cfg->group_size : c, ng = (c + gs - 1) / gs;
    ref_out o = {malloc((size_t)(rows * c)), malloc(sizeof(double) * rows * ng), malloc(sizeof(double) * rows * ng), 0};
    KT_CHECK(ref_gptq(w, rows, c, x, n, cfg, &o), "%s: reference Cholesky failed", what);
    int64_t diff = 0, far = 0;
    for (int64_t i = 0; i < rows * c; i++) {
        diff += r->codes[i] != o.codes[i];
        far += abs((int)r->codes[i] - (int)o.codes[i]) > 1;
    }
    double worst = 0;
    for (int64_t i = 0; i < rows * ng; i++) worst = fmax(worst, fabs(r->scales[i] - o.scales[i]) / o.scales[i]);
    /* the f32 column loop against double: a code may flip where the
     * updated weight sits within f32 rounding of a rounding boundary, and
     * the flip then shifts later updates a little */
    if (!ties) {
        KT_CHECK(diff <= rows * c / 1000 && far == 0, "%s: %lld of %lld codes differ (%lld by more than 1)", what,
                 (long long)diff, (long long)(rows * c), (long long)far);
        KT_CHECK(worst < 1e-4, "%s: scales differ by %g relative", what, worst);
    } else
        KT_CHECK(diff <= rows * c / 50, "%s: %lld of %lld codes differ", what, (long long)diff, (long long)(rows * c));
    KT_CHECK(fabs(r->error - o.loss) <= (ties ? 2e-2 : 1e-4) * o.loss, "%s: error %g, reference %g", what, r->error,
             o.loss);
    if (r->sym == false && gs < c) /* g_idx: the group of each column's position in the order */
        for (int64_t k = 0; k < c; k++) KT_CHECK(r->g_idx[r->perm[k]] == k / gs, "%s: g_idx", what);
    printf("  %s: %lld of %lld codes differ from the double reference, scales within %.1e, error %.4g vs %.4g\n",
           what, (long long)diff, (long long)(rows * c), worst, r->error, o.loss);
    free(o.codes);
    free(o.scales);
    free(o.zeros);
    kiln_gptq_result_free(r);
}

KT_TEST(gptq_matches_reference) {
    const int64_t rows = 24, c = 256, n = 500;
    float *w = weights(rows, c, 11), *x = correlated(n, c, 12, NULL, 0);
    struct {
        const char *what;
        int bits, block;
        int64_t group;
        bool sym, act;
    } cases[] = {
        {"4-bit per row", 4, 128, 0, false, false},
        {"4-bit g128 act-order", 4, 128, 128, false, true},
        {"4-bit per row sym", 4, 128, 0, true, false},
        {"4-bit g32 sym (ties)", 4, 128, 32, true, false},
        {"3-bit g64 act-order", 3, 128, 64, false, true},
        {"2-bit g32", 2, 128, 32, false, false},
        {"3-bit g48 block 40", 3, 40, 48, false, true}, /* groups across blocks */
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        kiln_gptq_config cfg = kiln_gptq_defaults();
        cfg.bits = cases[k].bits;
        cfg.group_size = cases[k].group;
        cfg.sym = cases[k].sym;
        cfg.act_order = cases[k].act;
        cfg.block_size = cases[k].block;
        check_against_ref(cases[k].what, w, rows, c, x, n, &cfg, cfg.sym && cfg.group_size);
    }
    free(w);
    free(x);
}

/* sum over samples of |(W - W^) x|^2 */
static double output_err(const float *w, const float *wq, int64_t rows, int64_t c, const float *x, int64_t n) {
    double e = 0;
    for (int64_t t = 0; t < n; t++)
        for (int64_t r = 0; r < rows; r++) {
            double v = 0;
            for (int64_t i = 0; i < c; i++) v += ((double)w[r * c + i] - wq[r * c + i]) * x[t * c + i];
            e += v * v;
        }
    return e;
}

KT_TEST(gptq_beats_rtn) {
    const int64_t rows = 64, c = 256, n = 1024;
    float *w = weights(rows, c, 21), *x = correlated(n, c, 22, NULL, 0), *xt = correlated(512, c, 23, NULL, 0);
    float *wq = malloc(sizeof(float) * rows * c);
    for (int bits = 4; bits >= 2; bits--)
        for (int act = 0; act < 2; act++) {
            kiln_gptq_config cfg = kiln_gptq_defaults();
            cfg.bits = bits;
            cfg.act_order = act;
            kiln_gptq_result *q = kiln_rtn_quantize(w, rows, c, &cfg);
            KT_NOTNULL(q);
            KT_OK(kiln_gptq_dequantize(q, wq));
            kiln_gptq_result_free(q);
            const double rtn = output_err(w, wq, rows, c, xt, 512);
            q = run_gptq(w, rows, c, x, n, &cfg);
            KT_NOTNULL(q);
            KT_OK(kiln_gptq_dequantize(q, wq));
            kiln_gptq_result_free(q);
            const double gptq = output_err(w, wq, rows, c, xt, 512);
            /* held-out inputs from the same distribution */
            printf("  %d-bit g128%s: |WX - W^X|^2 GPTQ / RTN = %.3f\n", bits, act ? " act-order" : "", gptq / rtn);
            KT_CHECK(gptq < 0.8 * rtn, "%d-bit act %d: GPTQ %g not below RTN %g", bits, act, gptq, rtn);
        }
    free(w);
    free(x);
    free(xt);
    free(wq);
}

KT_TEST(gptq_dead_columns) {
    const int64_t rows = 16, c = 160, n = 400;
    const int64_t dead[3] = {0, 37, 130};
    float *w = weights(rows, c, 31), *x = correlated(n, c, 32, dead, 3), *wq = malloc(sizeof(float) * rows * c);
    for (int act = 0; act < 2; act++) {
        kiln_gptq_config cfg = kiln_gptq_defaults();
        cfg.group_size = 32;
        cfg.act_order = act;
        check_against_ref(act ? "dead columns act-order" : "dead columns", w, rows, c, x, n, &cfg, false);
        kiln_gptq_result *q = run_gptq(w, rows, c, x, n, &cfg);
        KT_NOTNULL(q);
        KT_OK(kiln_gptq_dequantize(q, wq));
        for (int64_t r = 0; r < rows; r++)
            for (int d = 0; d < 3; d++)
                KT_CHECK(wq[r * c + dead[d]] == 0, "act %d: dead column %lld row %lld dequantizes to %g", act,
                         (long long)dead[d], (long long)r, (double)wq[r * c + dead[d]]);
        kiln_gptq_result_free(q);
    }
    free(w);
    free(x);
    free(wq);
}

#endif
