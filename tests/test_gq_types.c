/* test_gq_types.c — the GQ<b>_<G> dtypes (the GPTQ layout as blocks,
 * quant/gq.c): their traits and bits per weight; the documented byte
 * layout on hand-made chunks; the reference quantizer against GPTQ's
 * Quantizer rules (and an all-zero block); every SIMD dequantizer against
 * the scalar reference bit for bit; kiln_gptq_pack of RTN and GPTQ results
 * (bits 4/3/2, groups 32/64/128 and per channel, symmetric or not, act
 * order) against kiln_gptq_dequantize within the scales' f16 rounding; the
 * fused matmul (every kernel against the scalar reference bit for bit,
 * against the dequantized W as test_qmatmul.c does, threads); get_rows,
 * views and the refusals. */
#include "kt.h"
#include "kt_device.h"
#include "kt_simd.h"
#include "../backends/cpu/cpu_features.h"
#include "../backends/cpu/qmatmul.h"
#include "../backends/cpu/qmatmul_gq.h"
#include "../backends/cpu/coders.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

static const kiln_dtype gq[9] = {KILN_GQ4_32, KILN_GQ4_64, KILN_GQ4_128, KILN_GQ3_32, KILN_GQ3_64,
                                 KILN_GQ3_128, KILN_GQ2_32, KILN_GQ2_64, KILN_GQ2_128};

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 11);
}

KT_TEST(gq_dtype_traits) {
    static const char *names[9] = {"gq4_32", "gq4_64", "gq4_128", "gq3_32", "gq3_64",
                                   "gq3_128", "gq2_32", "gq2_64", "gq2_128"};
    static const double bpw[9] = {4.75, 4.375, 4.1875, 3.75, 3.375, 3.1875, 2.75, 2.375, 2.1875};
    for (int i = 0; i < 9; i++) {
        const int64_t g = kiln_dtype_block(gq[i]);
        KT_CHECK(!strcmp(kiln_dtype_name(gq[i]), names[i]) && kiln_dtype_is_quantized(gq[i]), "%s",
                 kiln_dtype_name(gq[i]));
        KT_CHECK(g == kiln__gq_group(gq[i]) && kiln__gq_bits(gq[i]) == 4 - i / 3, "%s group %lld", names[i],
                 (long long)g);
        KT_CHECK(kiln_dtype_size(gq[i]) * 8.0 / (double)g == bpw[i], "%s: %g bits per weight", names[i],
                 kiln_dtype_size(gq[i]) * 8.0 / (double)g);
        KT_CHECK(kiln__gq_dtype(kiln__gq_bits(gq[i]), (int)g) == gq[i], "%s by (bits, group)", names[i]);
    }
    KT_CHECK(!kiln__is_gq(KILN_Q4_0) && !kiln__is_gq(KILN_F32), "only the GQ types");
}

/* The layout of kiln.h, byte for byte, on chunks whose codes are chosen
 * so that each documented position shows. */
KT_TEST(gq_chunk_layout) {
    uint8_t q[32], c[16], want[16];
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)(j % 16);
    kiln__gq_pack_chunk(q, 4, c);
    for (int j = 0; j < 16; j++) want[j] = (uint8_t)(j | j << 4); /* element j low, j + 16 high */
    KT_CHECK(!memcmp(c, want, 16), "4-bit chunk");
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)(j / 8);
    kiln__gq_pack_chunk(q, 2, c);
    for (int j = 0; j < 8; j++) KT_CHECK(c[j] == 0xe4, "2-bit byte %d is %#x, not 0xe4 (0,1,2,3 from bit 0)", j, c[j]);
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)(j / 8 + 4 * (j % 2) * (j < 24));
    kiln__gq_pack_chunk(q, 3, c);
    const uint8_t w3[12] = {0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xe4, 0xaa, 0xaa, 0xaa, 0x00};
    KT_CHECK(!memcmp(c, w3, 12), 
             "3-bit chunk: the 2-bit plane, then bit 2 of element j at bit j %% 8 of byte 8 + j / 8");
    for (int j = 0; j < 32; j++) KT_CHECK(kiln__gq_chunk_code(c, 3, j) == q[j], "3-bit code %d back", j);
    /* a block: scale little-endian f16, the zero, the chunks in order */
    float x[64];
    for (int j = 0; j < 64; j++) x[j] = (float)(j - 16) * 0.25f; /* -4 .. 11.75 */
    kiln_block_gq4_64 b;
    kiln__quantize_gq_ref(KILN_GQ4_64, x, &b, 64);
    const float s = (11.75f + 4.0f) / 15; /* the reference Quantizer: (xmax - xmin) / maxq */
    const uint16_t h = kiln__f32_to_f16(s);
    KT_CHECK(b.d[0] == (h & 0xff) && b.d[1] == h >> 8, "scale bytes %02x %02x", b.d[0], b.d[1]);
    KT_CHECK(b.zero == (uint8_t)nearbyintf(4.0f / s), "zero %d = round(-xmin / scale)", b.zero);
    const float sh = kiln__f16_to_f32(h);
    for (int j = 0; j < 64; j++) {
        int qj = (int)nearbyintf(x[j] / sh) + b.zero;
        qj = qj < 0 ? 0 : qj > 15 ? 15 : qj;
        KT_CHECK(kiln__gq_chunk_code(b.qs + 16 * (j / 32), 4, j % 32) == qj, "code %d", j);
    }
}

/* RTN in each type: every value within half a step (the f16 scale) of the
 * input, an all-zero block exact, and the RMSE the same as kiln_rtn_quantize's
 * (f32 scales) within a percent. */
KT_TEST(gq_quantize_round_trip) {
    const int64_t rows = 8, cols = 384, n = rows * cols;
    float *x = kt_randn(n, 5, 0.02f), *y = malloc((size_t)n * 4), *ref = malloc((size_t)n * 4);
    for (int j = 0; j < 128; j++) x[j] = 0.0f; /* an all-zero group */
    void *q = malloc((size_t)n);
    for (int i = 0; i < 9; i++) {
        const int bits = kiln__gq_bits(gq[i]), g = kiln__gq_group(gq[i]);
        kiln__quantize_gq_ref(gq[i], x, q, n);
        kiln__dequantize_gq_ref(gq[i], q, y, n);
        double e = 0, e_ref = 0, worst = 0;
        for (int64_t b = 0; b < n / g; b++) {
            const float s = kiln__gq_scale((const uint8_t *)q + b * kiln_dtype_size(gq[i]));
            for (int64_t j = b * g; j < (b + 1) * g; j++) {
                const double d = fabs((double)y[j] - x[j]) / s;
                worst = d > worst ? d : worst;
                e += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
            }
        }
        for (int j = 0; j < 128; j++)
            KT_CHECK(y[j] == 0.0f, "%s: zero block value %d is %g", kiln_dtype_name(gq[i]), j, y[j]);
        kiln_gptq_config c = kiln_gptq_defaults();
        c.bits = bits, c.group_size = g;
        kiln_gptq_result *r = kiln_rtn_quantize(x, rows, cols, &c);
        KT_NOTNULL(r);
        KT_OK(kiln_gptq_dequantize(r, ref));
        for (int64_t j = 0; j < n; j++) e_ref += ((double)ref[j] - x[j]) * ((double)ref[j] - x[j]);
        kiln_gptq_result_free(r);
        KT_CHECK(worst <= 0.5 + 1e-3, "%s: %g steps from the input", kiln_dtype_name(gq[i]), worst);
        KT_CHECK(fabs(sqrt(e / e_ref) - 1) < 0.01, "%s: RMSE %g vs RTN's %g", kiln_dtype_name(gq[i]), sqrt(e / n),
                 sqrt(e_ref / n));
    }
    free(x), free(y), free(ref), free(q);
}

KT_TEST(gq_simd_matches_scalar) {
    const int64_t n = 128 * 24;
    float *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    uint8_t *q = malloc((size_t)n);
    for (int i = 0; i < 9; i++) {
        /* random codes and zero points; finite scales of both signs */
        const size_t bsz = kiln_dtype_size(gq[i]), nb = (size_t)(n / kiln_dtype_block(gq[i]));
        for (size_t j = 0; j < nb * bsz; j++) q[j] = (uint8_t)rnd();
        for (size_t b = 0; b < nb; b++) q[b * bsz + 1] &= 0xbf; /* exponent below 16: finite */
        kiln__dequantize_gq_ref(gq[i], q, ref, n);
        KT_FOR_EACH_SIMD(v) {
            kiln__dequantize_row(gq[i], q, got, n);
            KT_CHECK(!memcmp(ref, got, (size_t)n * 4), "%s differs from the scalar reference", kiln_dtype_name(gq[i]));
        }
        /* and element by element (the host accessors) */
        for (int64_t j = 0; j < n; j += 37)
            KT_CHECK(kiln__types[gq[i]].get(q, j) == ref[j], "%s: get(%lld)", kiln_dtype_name(gq[i]), (long long)j);
    }
    free(ref), free(got), free(q);
}

/* An act-order result made from RTN: the columns quantized in the order
 * perm (a random permutation), as GPTQ with act order stores them. */
static kiln_gptq_result *rtn_permuted(const float *w, int64_t rows, int64_t cols, const kiln_gptq_config *c) {
    int32_t *perm = malloc((size_t)cols * 4);
    float *wp = malloc((size_t)(rows * cols) * 4);
    for (int64_t k = 0; k < cols; k++) perm[k] = (int32_t)k;
    for (int64_t k = cols - 1; k > 0; k--) {
        int64_t j = rnd() % (k + 1);
        int32_t t = perm[k];
        perm[k] = perm[j], perm[j] = t;
    }
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < cols; k++) wp[i * cols + k] = w[i * cols + perm[k]];
    kiln_gptq_result *r = kiln_rtn_quantize(wp, rows, cols, c);
    uint8_t *codes = malloc((size_t)(rows * cols));
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < cols; k++) codes[i * cols + perm[k]] = r->codes[i * cols + k];
    for (int64_t k = 0; k < cols; k++) r->g_idx[perm[k]] = (int32_t)(k / r->group_size);
    memcpy(r->codes, codes, (size_t)(rows * cols));
    memcpy(r->perm, perm, (size_t)cols * 4);
    free(perm), free(wp), free(codes);
    return r;
}

/* kiln_gptq_pack against kiln_gptq_dequantize (each value within
 * |q - zero| times its scale's f16 rounding), and the layer's output
 * x[:, perm] . W^T (the documented recipe) against x . W_hat^T. */
static void check_pack(kiln_gptq_result *r, kiln_dtype t, const char *what) {
    const int64_t rows = r->rows, cols = r->cols, m = 3;
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *perm = NULL, *w = kiln_gptq_pack(ctx, r, t, &perm);
    KT_NOTNULL(w);
    bool identity = true;
    for (int64_t k = 0; k < cols; k++) identity &= r->perm[k] == k;
    KT_CHECK(identity == !perm, "%s %s: perm set only with act order", kiln_dtype_name(t), what);
    float *got = malloc((size_t)(rows * cols) * 4), *want = malloc((size_t)(rows * cols) * 4);
    kiln_tensor *wd = kiln_dequantize(ctx, w);
    KT_NOTNULL(wd);
    KT_OK(compute(ctx, wd));
    KT_OK(kiln_tensor_get_f32(wd, got, rows * cols));
    KT_OK(kiln_gptq_dequantize(r, want));
    int bad = 0;
    for (int64_t i = 0; i < rows; i++)
        for (int64_t k = 0; k < cols; k++) {
            const int64_t c = r->perm[k], gi = i * r->n_groups + r->g_idx[c];
            const float s = r->scales[gi], ds = fabsf(s - kiln__f16_to_f32(kiln__f32_to_f16(s)));
            /* plus each side's f32 product rounding */
            const float tol = (float)abs((int)r->codes[i * cols + c] - (int)r->zeros[gi]) * ds * 1.0001f +
                              fabsf(want[i * cols + c]) * 0x1p-22f + 1e-12f;
            bad += !(fabsf(got[i * cols + k] - want[i * cols + c]) <= tol);
        }
    KT_CHECK(bad == 0, "%s %s: %d values beyond the scales' f16 rounding", kiln_dtype_name(t), what, bad);
    /* the layer */
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, m, cols);
    KT_OK(kiln_tensor_fill_randn(x, 4, 0.0, 1.0));
    kiln_tensor *xp = perm ? kiln_transpose(ctx, kiln_get_rows(ctx, kiln_transpose(ctx, x, 0, 1), perm), 0, 1) : x;
    kiln_tensor *y = kiln_linear(ctx, xp, w, NULL);
    KT_NOTNULL(y);
    KT_OK(compute(ctx, y));
    float *yv = malloc((size_t)(m * rows) * 4), *xv = malloc((size_t)(m * cols) * 4);
    KT_OK(kiln_tensor_get_f32(y, yv, m * rows));
    KT_OK(kiln_tensor_get_f32(x, xv, m * cols));
    double worst = 0;
    for (int64_t i = 0; i < m; i++)
        for (int64_t r2 = 0; r2 < rows; r2++) {
            double s = 0, nx = 0, nw = 0;
            for (int64_t k = 0; k < cols; k++) {
                s += (double)xv[i * cols + k] * want[r2 * cols + k];
                nx += (double)xv[i * cols + k] * xv[i * cols + k];
                nw += (double)want[r2 * cols + k] * want[r2 * cols + k];
            }
            double e = fabs(yv[i * rows + r2] - s) / (sqrt(nx * nw) + 1e-30);
            worst = e > worst ? e : worst;
        }
    KT_CHECK(worst < 0.025, "%s %s: layer output off by %g |x| |w|", kiln_dtype_name(t), what, worst);
    free(got), free(want), free(yv), free(xv);
    kiln_ctx_free(ctx);
}

KT_TEST(gq_pack_rtn_results) {
    const int64_t rows = 12, cols = 256;
    float *w = kt_randn(rows * cols, 9, 0.05f);
    const int64_t groups[4] = {32, 64, 128, 0};
    for (int bits = 2; bits <= 4; bits++)
        for (int gi = 0; gi < 4; gi++)
            for (int sym = 0; sym < 2; sym++)
                for (int act = 0; act < 2; act++) {
                    kiln_gptq_config c = kiln_gptq_defaults();
                    c.bits = bits, c.group_size = groups[gi], c.sym = sym;
                    kiln_gptq_result *r = act ? rtn_permuted(w, rows, cols, &c) : kiln_rtn_quantize(w, rows, cols, &c);
                    KT_NOTNULL(r);
                    char what[64];
                    snprintf(what, sizeof what, "group %lld%s%s", (long long)groups[gi], sym ? " sym" : "",
                             act ? " act-order" : "");
                    /* the dtype of the result's group, and (per channel, 128)
                     * the smallest group, the parameters repeated */
                    const int g = groups[gi] ? (int)groups[gi] : 128;
                    check_pack(r, kiln__gq_dtype(bits, g), what);
                    if (g != 32) check_pack(r, kiln__gq_dtype(bits, 32), what);
                    kiln_gptq_result_free(r);
                }
    free(w);
}

/* GPTQ itself with act order (needs LAPACK: a BLAS=0 build checks the
 * RTN-made permutations above only). */
KT_TEST(gq_pack_gptq_act_order) {
    const int64_t rows = 16, cols = 128, n = 256;
    float *w = kt_randn(rows * cols, 3, 0.05f), *x = kt_randn(n * cols, 4, 1.0f);
    for (int64_t i = 0; i < n; i++)
        for (int64_t k = 0; k < cols; k++) x[i * cols + k] *= 0.2f + (float)((k * 37) % cols) / (float)cols;
    kiln_gptq *h = kiln_gptq_new(cols);
    KT_NOTNULL(h);
    KT_OK(kiln_gptq_add_batch(h, x, n));
    for (int bits = 2; bits <= 4; bits++) {
        kiln_gptq_config c = kiln_gptq_defaults();
        c.bits = bits, c.group_size = 32, c.act_order = true;
        kiln_gptq_result *r = kiln_gptq_quantize(h, w, rows, &c);
        if (!r && kiln_last_status() == KILN_ERR_UNSUPPORTED) break; /* no LAPACK in this build */
        KT_NOTNULL(r);
        check_pack(r, kiln__gq_dtype(bits, 32), "gptq act-order");
        kiln_gptq_result_free(r);
    }
    kiln_gptq_free(h);
    free(w), free(x);
}

KT_TEST(gq_pack_refusals) {
    const int64_t rows = 4, cols = 96;
    float *w = kt_randn(rows * cols, 1, 1.0f);
    kiln_gptq_config c = kiln_gptq_defaults();
    c.group_size = 32;
    kiln_gptq_result *r = kiln_rtn_quantize(w, rows, cols, &c);
    KT_NOTNULL(r);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *p = (kiln_tensor *)1;
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ3_32, &p), KILN_ERR_DTYPE, "4-bit result");
    KT_CHECK(p == NULL, "perm cleared on failure");
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_Q4_0, NULL), KILN_ERR_DTYPE, "not a GQ dtype");
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ4_64, NULL), KILN_ERR_SHAPE, "multiples of 64");
    kiln_gptq_result_free(r);
    r = rtn_permuted(w, rows, cols, &c);
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ4_32, NULL), KILN_ERR_ARG, "pass perm");
    r->g_idx[r->perm[0]] = 1; /* a group not contiguous in perm order */
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ4_32, &p), KILN_ERR_ARG, "not contiguous");
    kiln_gptq_result_free(r);
    c.bits = 8;
    r = kiln_rtn_quantize(w, rows, cols, &c);
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ4_32, NULL), KILN_ERR_DTYPE, "8-bit result");
    kiln_gptq_result_free(r);
    c.bits = 4;
    r = kiln_rtn_quantize(w, rows, cols, &c);
    r->scales[5] = 1e6f;
    KT_EXPECT_ERR(kiln_gptq_pack(ctx, r, KILN_GQ4_32, NULL), KILN_ERR_NUMERIC, "f16");
    kiln_gptq_result_free(r);
    kiln_ctx_free(ctx);
    free(w);
}

/* The dot kernel of every SIMD variant against the scalar reference bit
 * for bit, on random bytes (any codes, zero points within the bits). */
KT_TEST(gq_qmatmul_kernels_match_reference) {
    const int64_t k = 32 * 13; /* an odd number of chunks */
    float *x = kt_randn(k * 2, 2, 1.0f), dx[2 * 13];
    int8_t xq[2 * 32 * 13];
    kiln__qmm_quantize_x(x, xq, dx, 2 * k);
    for (int i = 0; i < 9; i++) {
        const int g = kiln__gq_group(gq[i]), bits = kiln__gq_bits(gq[i]);
        const int64_t kk = k / g * g, nc = kk / 32; /* whole blocks */
        const size_t bsz = kiln_dtype_size(gq[i]);
        uint8_t w[2048];
        for (size_t j = 0; j < sizeof w; j++) w[j] = (uint8_t)rnd();
        for (int64_t b = 0; b < kk / g; b++) {
            w[b * bsz + 1] &= 0x3b; /* modest finite scales */
            w[b * bsz + 2] &= (uint8_t)((1 << bits) - 1);
        }
        const float ref = kiln__gq_dot_ref(w, bits, g, xq, dx, nc);
        KT_FOR_EACH_SIMD(v) {
            const float got = kiln__gq_dot_best()(w, bits, g, xq, dx, nc);
            KT_CHECK(!memcmp(&got, &ref, 4), "%s: %.9g vs the reference %.9g", kiln_dtype_name(gq[i]), got, ref);
        }
        /* the reference is sum scale dx (q - zero) x8 */
        double want = 0;
        for (int64_t c = 0; c < nc; c++) {
            const uint8_t *b = w + (c * 32 / g) * bsz;
            for (int j = 0; j < 32; j++)
                want += (double)kiln__gq_scale(b) * dx[c] *
                        (kiln__gq_chunk_code(b + 3 + (c % (g / 32)) * 4 * bits, bits, j) - b[2]) * xq[32 * c + j];
        }
        KT_CHECK(fabs(ref - want) <= 1e-5 * (fabs(want) + 1), "%s: reference %g vs %g", kiln_dtype_name(gq[i]), ref,
                 want);
    }
    free(x);
}

/* The fused matmul through kiln_linear against x . dequantize(W)^T in
 * double: 0.025 |x| |w| per output on the int8 path (see test_qmatmul.c),
 * 1e-4 on the panel path; one thread and two give the same bits. */
KT_TEST(gq_qmatmul_matches_dequantized) {
    const int64_t n = 72, k = 384;
    KT_FOR_EACH_SIMD(v)
    for (int i = 0; i < 9; i++) {
        const int64_t ms[3] = {1, 3, 64};
        for (int mi = 0; mi < 3; mi++) {
            const int64_t m = ms[mi];
            kiln_ctx *ctx = kiln_ctx_new();
            kiln_tensor *wf = kiln_new_2d(ctx, KILN_F32, n, k), *x = kiln_new_2d(ctx, KILN_F32, m, k);
            KT_OK(kiln_tensor_fill_randn(wf, 7 + (uint64_t)i, 0.0, 0.05));
            KT_OK(kiln_tensor_fill_randn(x, 3 + (uint64_t)m, 0.0, 1.0));
            kiln_tensor *w = kiln_quantize(ctx, wf, gq[i]), *y = kiln_linear(ctx, x, w, NULL);
            KT_NOTNULL(y);
            KT_CHECK(y->op == KILN_OP_QMATMUL, "%s: a qmatmul node", kiln_dtype_name(gq[i]));
            KT_OK(compute(ctx, y));
            float *wd = malloc((size_t)(n * k) * 4), *xv = malloc((size_t)(m * k) * 4);
            float *yv = malloc((size_t)(m * n) * 4);
            KT_OK(kiln_tensor_get_f32(w, wd, n * k));
            KT_OK(kiln_tensor_get_f32(x, xv, m * k));
            KT_OK(kiln_tensor_get_f32(y, yv, m * n));
            const double rel = m < KILN_QMM_PANEL_MIN_M ? 0.025 : 1e-4;
            double worst = 0;
            for (int64_t a = 0; a < m; a++)
                for (int64_t r = 0; r < n; r++) {
                    double s = 0, nx = 0, nw = 0;
                    for (int64_t j = 0; j < k; j++) {
                        s += (double)xv[a * k + j] * wd[r * k + j];
                        nx += (double)xv[a * k + j] * xv[a * k + j];
                        nw += (double)wd[r * k + j] * wd[r * k + j];
                    }
                    const double e = fabs(yv[a * n + r] - s) / sqrt(nx * nw);
                    worst = e > worst ? e : worst;
                }
            KT_CHECK(worst <= rel, "%s m=%lld: error %g |x| |w| (allowed %g)", kiln_dtype_name(gq[i]), (long long)m,
                     worst, rel);
            /* threads: the same bits */
            float *y1 = malloc((size_t)(m * n) * 4), *y2 = malloc((size_t)(m * n) * 4);
            KT_OK(kiln__qmatmul_cpu(gq[i], m, n, k, xv, kiln_tensor_data(w), y1, 1));
            KT_OK(kiln__qmatmul_cpu(gq[i], m, n, k, xv, kiln_tensor_data(w), y2, 2));
            KT_CHECK(!memcmp(y1, y2, (size_t)(m * n) * 4), "%s m=%lld: 1 and 2 threads differ", kiln_dtype_name(gq[i]),
                     (long long)m);
            free(wd), free(xv), free(yv), free(y1), free(y2);
            kiln_ctx_free(ctx);
        }
    }
}

/* get_rows, views and refusals follow the quantized rules with the group
 * as the block. */
KT_TEST(gq_views_rows_and_refusals) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 6, 256), *idx = kiln_new_1d(ctx, KILN_I32, 3);
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 1.0));
    KT_OK(kiln_tensor_set_i32(idx, (int32_t[]){4, 0, 4}, 3));
    kiln_tensor *q = kiln_quantize(ctx, w, KILN_GQ3_128);
    KT_NOTNULL(q);
    KT_CHECK(kiln_tensor_nbytes(q) == 6 * 2 * 51, "nbytes %zu", kiln_tensor_nbytes(q));
    float all[6 * 256], got[3 * 256], sl[3 * 256];
    KT_OK(kiln_tensor_get_f32(q, all, 6 * 256));
    kiln_tensor *rows = kiln_get_rows(ctx, q, idx);
    KT_NOTNULL(rows);
    KT_OK(compute(ctx, rows));
    KT_OK(kiln_tensor_get_f32(rows, got, 3 * 256));
    KT_CHECK(!memcmp(got, all + 4 * 256, 1024) && !memcmp(got + 256, all, 1024) && !memcmp(got + 512, all + 1024, 1024),
             "get_rows of a gq3_128 table");
    kiln_tensor *s = kiln_dequantize(ctx, kiln_slice(ctx, q, 0, 1, 6, 2));
    KT_NOTNULL(s);
    KT_OK(compute(ctx, s));
    KT_OK(kiln_tensor_get_f32(s, sl, 3 * 256));
    for (int r = 0; r < 3; r++) KT_CHECK(!memcmp(sl + r * 256, all + (2 * r + 1) * 256, 1024), "row slice %d", r);
    KT_NOTNULL(kiln_slice(ctx, q, 1, 128, 256, 1)); /* the second group of each row */
    KT_NOTNULL(kiln_reshape(ctx, q, 2, (int64_t[]){12, 128}));
    KT_EXPECT_ERR(kiln_slice(ctx, q, 1, 0, 64, 1), KILN_ERR_SHAPE, "block");
    KT_EXPECT_ERR(kiln_reshape(ctx, q, 2, (int64_t[]){24, 64}), KILN_ERR_SHAPE, "split its blocks");
    KT_EXPECT_ERR(kiln_add(ctx, q, q), KILN_ERR_DTYPE, "does not take gq3_128");
    KT_EXPECT_ERR(kiln_quantize(ctx, kiln_new_2d(ctx, KILN_F32, 2, 96), KILN_GQ4_64), KILN_ERR_SHAPE,
                  "multiple of 64");
    KT_EXPECT_ERR(kiln_get_rows(ctx, kiln_reshape(ctx, q, 2, (int64_t[]){24, 64}), idx), KILN_ERR_SHAPE, "split");
    kiln_ctx_free(ctx);
}

#ifdef KILN_VULKAN
/* On a device backend a GQ layer runs on the device (vk_quant.c), no node
 * falling back; its QMATMUL stays in f32, so it is held to the CPU's f32
 * product with the dequantized weight (not to the CPU's batch-1 path,
 * which rounds x to int8). */
KT_TEST(gq_on_device_backend) {
    kiln_backend *vk = kt_device("vulkan");
    float yv[2][2 * 64];
    for (int dev = 0; dev < 2; dev++) {
        kiln_ctx *ctx = kiln_ctx_new();
        if (dev) KT_OK(kiln_ctx_set_backend(ctx, vk));
        kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 64, 256), *x = kiln_new_2d(ctx, KILN_F32, 2, 256);
        KT_OK(kiln_tensor_fill_randn(w, 1, 0.0, 0.1));
        KT_OK(kiln_tensor_fill_randn(x, 2, 0.0, 1.0));
        kiln_tensor *q = kiln_quantize(ctx, w, KILN_GQ3_64);
        kiln_tensor *y = kiln_relu(ctx, dev ? kiln_linear(ctx, x, q, NULL)
                                            : kiln_matmul(ctx, x, kiln_transpose(ctx, kiln_dequantize(ctx, q), 0, 1)));
        KT_NOTNULL(y);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_NOTNULL(g);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        KT_CHECK(kiln_graph_get_stats(g).nodes_fallback == 0, "%lld nodes ran on the CPU",
                 (long long)kiln_graph_get_stats(g).nodes_fallback);
        KT_OK(kiln_tensor_get_f32(y, yv[dev], 2 * 64));
        kiln_ctx_free(ctx);
    }
    for (int i = 0; i < 2 * 64; i++)
        KT_CHECK(fabsf(yv[0][i] - yv[1][i]) <= 1e-5f * (1 + fabsf(yv[0][i])), "%d: cpu %g device %g", i, yv[0][i],
                 yv[1][i]);
}
#endif
