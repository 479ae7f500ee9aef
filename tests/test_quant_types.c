/* test_quant_types.c — the quantized block dtypes (quant/): hand-worked
 * blocks of each format against the rules of their references (ggml's
 * quantize_row_q8_0_ref / quantize_row_q4_0_ref, bitsandbytes' NF4), round
 * trips, SIMD dequantize == scalar bit for bit, NF4's error against a
 * uniform 4-bit format, double quantization's cost, and the dtype rules
 * (views, refusals, shapes). */
#include "kt.h"
#include "kt_device.h"
#include "kt_simd.h"
#include "../backends/cpu/coders.h"
#include "../backends/cpu/cpu_features.h"

#include <stdint.h>

static kiln_status compute(kiln_ctx *ctx, kiln_tensor *t) {
    kiln_graph *g = kiln_graph_new(ctx);
    kiln_status s = g ? kiln_graph_add(g, t) : kiln_last_status();
    return s ? s : kiln_graph_compute(g);
}

KT_TEST(quant_dtype_traits) {
    KT_CHECK(kiln_dtype_block(KILN_F32) == 1 && kiln_dtype_size(KILN_F32) == 4, "f32 is one element of 4 bytes");
    KT_CHECK(!kiln_dtype_is_quantized(KILN_F16) && !kiln_dtype_is_quantized(KILN_I32), "plain types");
    struct { kiln_dtype t; int64_t blk; size_t bytes; const char *name; } want[] = {
        {KILN_Q8_0, 32, 34, "q8_0"}, {KILN_Q4_0, 32, 18, "q4_0"}, {KILN_NF4, 64, 36, "nf4"},
        {KILN_NF4_DQ, 16384, 8456, "nf4_dq"}};
    for (int i = 0; i < 4; i++) {
        KT_CHECK(kiln_dtype_is_quantized(want[i].t), "%s quantized", want[i].name);
        KT_CHECK(kiln_dtype_block(want[i].t) == want[i].blk && kiln_dtype_size(want[i].t) == want[i].bytes,
                 "%s: block %lld of %zu bytes", want[i].name, (long long)kiln_dtype_block(want[i].t),
                 kiln_dtype_size(want[i].t));
        KT_CHECK(!strcmp(kiln_dtype_name(want[i].t), want[i].name), "name %s", kiln_dtype_name(want[i].t));
    }
    /* bits per weight, scales included */
    KT_CHECK(fabs(8.0 * 8456 / 16384 - 4.12890625) < 1e-12, "NF4_DQ is 4.1289 bits/weight");
    /* the NF4 thresholds are the midpoints of the table (to an f32 ulp) */
    for (int k = 0; k < 15; k++) {
        float mid = (kiln__nf4_table[k] + kiln__nf4_table[k + 1]) * 0.5f;
        KT_CHECK(fabsf(mid - kiln__nf4_mids[k]) <= 1.5e-7f * fmaxf(1.0f, fabsf(mid)) || fabsf(mid - kiln__nf4_mids[k]) < 1e-8f,
                 "midpoint %d: %.9g vs %.9g", k, mid, kiln__nf4_mids[k]);
    }
}

KT_TEST(quant_nf4_hand_block) {
    /* absmax 1.0 (x[0]), so x * (1 / absmax) is x itself and the codes are
     * the counts of midpoints strictly below each x */
    float x[64] = {0};
    x[0] = 1.0f;                                  /* 15 */
    x[1] = -1.0f;                                 /* 0 */
    x[2] = 0.0f;                                  /* 7 */
    x[3] = -0.0f;                                 /* 7 */
    x[4] = 0.03979014977812767f;                  /* on the 0.0 | 0.0796 midpoint: the lower, 7 */
    x[5] = nextafterf(0.03979014977812767f, 1);   /* just above: 8 */
    x[6] = 0.8614784181118011f;                   /* on the 0.7230 | 1.0 midpoint: 14 */
    x[7] = -0.8480964004993439f;                  /* on the -1.0 | -0.6962 midpoint: 0 */
    x[8] = -0.84f;                                /* above it: 1 */
    x[9] = 0.5f;                                  /* 0.3893 < 0.5 <= 0.5017: 12 (0.4407) */
    x[10] = -0.3f;                                /* -0.3397 < -0.3 <= -0.2346: 4 (-0.2844) */
    x[11] = 0.1f;                                 /* 0.0398 < 0.1 <= 0.1203: 8 (0.0796) */
    /* the rest 0: 7 */
    const uint8_t want[32] = {0xF0, 0x77, 0x78, 0xE0, 0x1C, 0x48, 0x77, 0x77, 0x77, 0x77, 0x77,
                              0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77,
                              0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77, 0x77};
    kiln_block_nf4 b;
    kiln__quantize_nf4_ref(x, &b, 64);
    KT_CHECK(b.absmax == 1.0f, "absmax %g", b.absmax);
    for (int j = 0; j < 32; j++) KT_CHECK(b.codes[j] == want[j], "byte %d: %#04x, want %#04x", j, b.codes[j], want[j]);
    float y[64];
    kiln__dequantize_nf4_ref(&b, y, 64);
    KT_CHECK(y[9] == 0.44070982933044434f && y[10] == -0.28444138169288635f && y[0] == 1.0f && y[1] == -1.0f,
             "dequantized %g %g %g %g", y[9], y[10], y[0], y[1]);

    /* the same block times -2: absmax 2, x * 0.5 exact; the negated
     * midpoints are no longer ties in the other direction's table, so
     * derive: -2 -> -1 (0), 2 -> 1 (15), 0 (7), -0.0796 (x[4]) : -0.0398 >
     * -0.0455: 7; -0.0398 - ulp: 7; -0.8615: -0.8481 > it: 0; 0.8481: 14;
     * 0.84: 0.6428 < 0.84 <= 0.8615: 14; -0.5: -0.6106 < -0.5 <= -0.46: 2;
     * 0.3: 0.2920 < 0.3 <= 0.3893: 11; -0.1: -0.1379 < -0.1 <= -0.0455: 6 */
    float x2[64];
    for (int j = 0; j < 64; j++) x2[j] = -2.0f * x[j];
    const uint8_t want2[6] = {0x0F, 0x77, 0x77, 0x0E, 0xE2, 0xB6};
    kiln__quantize_nf4_ref(x2, &b, 64);
    KT_CHECK(b.absmax == 2.0f, "absmax %g", b.absmax);
    for (int j = 0; j < 6; j++) KT_CHECK(b.codes[j] == want2[j], "x2 byte %d: %#04x, want %#04x", j, b.codes[j], want2[j]);

    /* an all-zero block: absmax 0, code 7 (0.0) everywhere, dequantized +0 */
    float z[64] = {0};
    kiln__quantize_nf4_ref(z, &b, 64);
    KT_CHECK(b.absmax == 0.0f, "absmax %g", b.absmax);
    for (int j = 0; j < 32; j++) KT_CHECK(b.codes[j] == 0x77, "zero byte %d: %#04x", j, b.codes[j]);
    kiln__dequantize_nf4_ref(&b, y, 64);
    for (int j = 0; j < 64; j++) KT_CHECK(y[j] == 0.0f && !signbit(y[j]), "zero %d: %g", j, y[j]);
}

KT_TEST(quant_q8_0_hand_block) {
    /* absmax 127: d = 1, q = roundf(x) (halves away from zero, ggml's roundf) */
    float x[64] = {0};
    x[0] = 127.0f, x[1] = -127.0f, x[2] = 0.5f, x[3] = -0.5f, x[4] = 1.5f, x[5] = 2.49f, x[6] = -3.7f;
    /* second block: absmax 63.5, d = 0.5, q = roundf(2x) */
    x[32] = 63.5f, x[33] = -10.25f, x[34] = 0.3f, x[35] = -0.2f;
    kiln_block_q8_0 b[2];
    kiln__quantize_q8_0_ref(x, b, 64);
    const int8_t want0[7] = {127, -127, 1, -1, 2, 2, -4}, want1[4] = {127, -21, 1, 0};
    KT_CHECK(b[0].d == 0x3C00 && b[1].d == 0x3800, "d %#06x %#06x", b[0].d, b[1].d);
    for (int j = 0; j < 7; j++) KT_CHECK(b[0].qs[j] == want0[j], "q[%d] %d, want %d", j, b[0].qs[j], want0[j]);
    for (int j = 0; j < 4; j++) KT_CHECK(b[1].qs[j] == want1[j], "q[32+%d] %d, want %d", j, b[1].qs[j], want1[j]);
    for (int j = 7; j < 32; j++) KT_CHECK(b[0].qs[j] == 0, "q[%d] %d", j, b[0].qs[j]);
    const uint8_t *bytes = (const uint8_t *)b;
    KT_CHECK(bytes[0] == 0x00 && bytes[1] == 0x3C && bytes[2] == 127 && bytes[3] == 0x81, "byte layout d, qs");
    float y[64];
    kiln__dequantize_q8_0_ref(b, y, 64);
    KT_CHECK(y[33] == -10.5f && y[2] == 1.0f, "dequantized %g %g", y[33], y[2]);
    /* an all-zero block: d 0, q 0 */
    float z[32] = {0};
    kiln__quantize_q8_0_ref(z, b, 32);
    KT_CHECK(b[0].d == 0, "zero d");
    for (int j = 0; j < 32; j++) KT_CHECK(b[0].qs[j] == 0, "zero q %d", j);
}

KT_TEST(quant_q4_0_hand_block) {
    /* the largest magnitude is -8: d = -8 / -8 = 1, q = min(15, (int)(x + 8.5)) */
    float x[64] = {0};
    x[0] = -8.0f;  /* 0 */
    x[1] = 7.9f;   /* 16.4 -> 15 (clamped) */
    x[2] = 0.5f;   /* 9 */
    x[3] = -0.5f;  /* 8 */
    x[4] = -0.6f;  /* 7.9 -> 7 */
    x[5] = 3.2f;   /* 11.7 -> 11 */
    x[16] = 7.0f;  /* 15 */
    x[17] = -7.5f; /* 1 */
    /* second block: +8 largest: d = -1, q = min(15, (int)(8.5 - x)) */
    x[32] = 8.0f;  /* 0 -> dequantized (0 - 8) * -1 = 8 */
    x[33] = -8.0f; /* 16.5 -> 15 -> -7: the other end clips */
    x[34] = 2.2f;  /* 6.3 -> 6 */
    kiln_block_q4_0 b[2];
    kiln__quantize_q4_0_ref(x, b, 64);
    /* byte j: element j low, element j + 16 high */
    const uint8_t want0[16] = {0xF0, 0x1F, 0x89, 0x88, 0x87, 0x8B, 0x88, 0x88,
                               0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88, 0x88};
    KT_CHECK(b[0].d == 0x3C00 && b[1].d == 0xBC00, "d %#06x %#06x", b[0].d, b[1].d);
    for (int j = 0; j < 16; j++) KT_CHECK(b[0].qs[j] == want0[j], "qs[%d] %#04x, want %#04x", j, b[0].qs[j], want0[j]);
    KT_CHECK(b[1].qs[0] == 0x80 && b[1].qs[1] == 0x8F && b[1].qs[2] == 0x86, "block 1: %#04x %#04x %#04x", b[1].qs[0],
             b[1].qs[1], b[1].qs[2]);
    float y[64];
    kiln__dequantize_q4_0_ref(b, y, 64);
    KT_CHECK(y[0] == -8.0f && y[1] == 7.0f && y[2] == 1.0f && y[16] == 7.0f && y[17] == -7.0f,
             "dequantized %g %g %g %g %g", y[0], y[1], y[2], y[16], y[17]);
    KT_CHECK(y[32] == 8.0f && y[33] == -7.0f && y[34] == 2.0f, "block 1 dequantized %g %g %g", y[32], y[33], y[34]);
}

static double rmse(const float *a, const float *b, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
    return sqrt(s / (double)n);
}

/* Q4_0's rule (d = m / -8, 16 uniform levels) at block bs: the uniform
 * 4-bit baseline NF4 is compared with (f32 scale, as NF4's). */
static void uniform4(const float *x, float *y, int64_t n, int bs) {
    for (int64_t b = 0; b < n / bs; b++) {
        const float *xb = x + b * bs;
        float amax = 0, max = 0;
        for (int j = 0; j < bs; j++)
            if (amax < fabsf(xb[j])) amax = fabsf(xb[j]), max = xb[j];
        float d = max / -8, id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < bs; j++) {
            int q = (int8_t)(xb[j] * id + 8.5f);
            y[b * bs + j] = (float)((q < 15 ? q : 15) - 8) * d;
        }
    }
}

KT_TEST(quant_round_trips_and_rmse) {
    const int64_t n = 4 * KILN_QKNF4_DQ; /* 65536 */
    float *x = kt_randn(n, 7, 1.0f), *y = malloc((size_t)n * sizeof *y);
    void *q = malloc(kiln_dtype_size(KILN_Q8_0) * (size_t)n / 32 + kiln_dtype_size(KILN_NF4_DQ) * 8);
    double r[5];
    const kiln_dtype ts[4] = {KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};
    for (int i = 0; i < 4; i++) {
        kiln__types[ts[i]].from_f32(x, q, n);
        kiln__types[ts[i]].to_f32(q, y, n);
        r[i] = rmse(x, y, n);
        /* every value within half a step of its block's scale */
        for (int64_t k = 0; k < n; k++)
            if (!(fabsf(y[k] - x[k]) <= (ts[i] == KILN_Q8_0 ? 0.04f : 0.8f))) {
                KT_CHECK(0, "%s: x[%lld] %g came back %g", kiln_dtype_name(ts[i]), (long long)k, x[k], y[k]);
                break;
            }
    }
    uniform4(x, y, n, 64);
    r[4] = rmse(x, y, n);
    /* and the plainer symmetric int4: d = absmax / 7, q in [-7, 7] */
    double sym = 0;
    for (int64_t b = 0; b < n / 64; b++) {
        float amax = 0;
        for (int j = 0; j < 64; j++) amax = fmaxf(amax, fabsf(x[b * 64 + j]));
        float d = amax / 7, id = d ? 1.0f / d : 0.0f;
        for (int j = 0; j < 64; j++) {
            double e = roundf(x[b * 64 + j] * id) * d - (double)x[b * 64 + j];
            sym += e * e;
        }
    }
    sym = sqrt(sym / (double)n);
    if (getenv("KILN_TEST_VERBOSE"))
        printf("round-trip RMSE on N(0,1), %lld values: q8_0 %.5f  q4_0(32) %.5f  nf4(64) %.5f  nf4_dq %.5f  "
               "uniform 4-bit (Q4_0 rule, block 64) %.5f  symmetric int4 (absmax/7, block 64) %.5f\n",
               (long long)n, r[0], r[1], r[2], r[3], r[4], sym);
    KT_CHECK(r[0] < 0.01, "q8_0 RMSE %g", r[0]);
    KT_CHECK(r[2] < r[4] && r[2] < sym, "NF4 RMSE %g is not below uniform 4-bit's %g / %g at block 64", r[2], r[4], sym);
    KT_CHECK(r[3] > r[2] * 0.99 && r[3] < r[2] * 1.01, "double quantization costs %g over NF4's %g", r[3], r[2]);
    free(x), free(y), free(q);
}

KT_TEST(quant_simd_matches_scalar) {
    const int64_t n = 2 * KILN_QKNF4_DQ;
    float *x = kt_randn(n, 11, 1.0f), *ref = malloc((size_t)n * 4), *got = malloc((size_t)n * 4);
    void *q = malloc((size_t)n * 2);
    const kiln_dtype ts[4] = {KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};
    for (int i = 0; i < 4; i++) {
        kiln__types[ts[i]].from_f32(x, q, n);
        switch (ts[i]) {
        case KILN_Q8_0: kiln__dequantize_q8_0_ref(q, ref, n); break;
        case KILN_Q4_0: kiln__dequantize_q4_0_ref(q, ref, n); break;
        case KILN_NF4: kiln__dequantize_nf4_ref(q, ref, n); break;
        default: kiln__dequantize_nf4_dq_ref(q, ref, n);
        }
        KT_FOR_EACH_SIMD(v) {
            kiln__dequantize_row(ts[i], q, got, n);
            KT_CHECK(!memcmp(ref, got, (size_t)n * 4), "%s differs from the scalar reference", kiln_dtype_name(ts[i]));
        }
    }
    free(x), free(ref), free(got), free(q);
}

KT_TEST(quant_tensors_ops_and_views) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 6, 128);
    KT_OK(kiln_tensor_fill_randn(w, 3, 0.0, 1.0));
    kiln_tensor_set_name(w, "w");
    kiln_tensor *wq = kiln_quantize(ctx, w, KILN_NF4);
    KT_NOTNULL(wq);
    KT_CHECK(kiln_tensor_dtype(wq) == KILN_NF4 && kiln_tensor_nbytes(wq) == 6 * 2 * 36, "nbytes %zu",
             kiln_tensor_nbytes(wq));
    KT_CHECK(kiln_ctx_storage_bytes(ctx) >= 6 * 128 * 4 + 6 * 2 * 36, "storage counted");
    /* host reads dequantize */
    float wv[768], wd[768], ref[768];
    KT_OK(kiln_tensor_get_f32(w, wv, 768));
    KT_OK(kiln_tensor_get_f32(wq, wd, 768));
    kiln__dequantize_nf4_ref(kiln_tensor_data(wq), ref, 768);
    KT_CHECK(!memcmp(wd, ref, sizeof ref), "get_f32 is the dequantized values");
    double d0;
    KT_OK(kiln_tensor_get_f64(wq, &(double[768]){0}[0], 768));
    d0 = kiln_tensor_item(wq);
    KT_CHECK(d0 == ref[0], "item %g vs %g", d0, ref[0]);
    /* the dequantize op */
    kiln_tensor *f = kiln_dequantize(ctx, wq);
    KT_NOTNULL(f);
    KT_OK(compute(ctx, f));
    float fv[768];
    KT_OK(kiln_tensor_get_f32(f, fv, 768));
    KT_CHECK(!memcmp(fv, ref, sizeof ref), "dequantize node");
    /* rows: a slice of rows (step 2) and a reshape keep whole blocks */
    kiln_tensor *rows = kiln_slice(ctx, wq, 0, 1, 6, 2);
    KT_NOTNULL(rows);
    kiln_tensor *fr = kiln_dequantize(ctx, rows);
    KT_OK(compute(ctx, fr));
    float rv[3 * 128];
    KT_OK(kiln_tensor_get_f32(fr, rv, 384));
    for (int r = 0; r < 3; r++) KT_CHECK(!memcmp(rv + r * 128, ref + (2 * r + 1) * 128, 512), "row %d", 2 * r + 1);
    float rv2[384];
    KT_OK(kiln_tensor_get_f32(rows, rv2, 384)); /* a strided quantized view, read element-wise */
    KT_CHECK(!memcmp(rv, rv2, sizeof rv), "get_f32 of the row view");
    KT_NOTNULL(kiln_reshape(ctx, wq, 2, (int64_t[]){12, 64}));
    KT_NOTNULL(kiln_slice(ctx, wq, 1, 64, 128, 1)); /* the second block of each row */
    /* refused: inside a block, a split block, other ops */
    KT_EXPECT_ERR(kiln_slice(ctx, wq, 1, 0, 32, 1), KILN_ERR_SHAPE, "block");
    KT_EXPECT_ERR(kiln_slice(ctx, wq, 1, 32, 128, 1), KILN_ERR_SHAPE, "inside a block");
    KT_EXPECT_ERR(kiln_reshape(ctx, wq, 2, (int64_t[]){24, 32}), KILN_ERR_SHAPE, "split its blocks");
    KT_EXPECT_ERR(kiln_add(ctx, wq, wq), KILN_ERR_DTYPE, "does not take nf4");
    KT_EXPECT_ERR(kiln_add(ctx, wq, wq), KILN_ERR_DTYPE, "dequantize first");
    KT_EXPECT_ERR(kiln_transpose(ctx, wq, 0, 1), KILN_ERR_DTYPE, "dequantize first");
    KT_EXPECT_ERR(kiln_cast(ctx, wq, KILN_F32), KILN_ERR_DTYPE, "dequantize first");
    KT_EXPECT_ERR(kiln_sum_all(ctx, wq), KILN_ERR_DTYPE, "dequantize first");
    KT_EXPECT_ERR(kiln_dequantize(ctx, w), KILN_ERR_DTYPE, "not a quantized dtype");
    KT_CHECK(kiln_tensor_set_f32(wq, wv, 768) == KILN_ERR_DTYPE, "set_f32 refused");
    KT_CHECK(kiln_tensor_fill(wq, 1.0) == KILN_ERR_DTYPE, "fill refused");
    KT_CHECK(kiln_tensor_set_requires_grad(wq, true) == KILN_ERR_DTYPE, "no gradient");
    /* kiln_linear with a quantized weight: x @ dequantize(w)^T */
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 3, 128);
    KT_OK(kiln_tensor_fill_randn(x, 5, 0.0, 1.0));
    kiln_tensor *y = kiln_linear(ctx, x, wq, NULL), *y2 = kiln_matmul_t(ctx, x, false, f, true);
    KT_NOTNULL(y);
    KT_NOTNULL(y2);
    KT_OK(compute(ctx, y));
    KT_OK(compute(ctx, y2));
    float yv[18], y2v[18];
    KT_OK(kiln_tensor_get_f32(y, yv, 18));
    KT_OK(kiln_tensor_get_f32(y2, y2v, 18));
    for (int i = 0; i < 18; i++) KT_CHECK(fabsf(yv[i] - y2v[i]) <= 1e-4f * (1 + fabsf(y2v[i])), "linear %d", i);
    kiln_ctx_free(ctx);
}

KT_TEST(quant_bad_shapes) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *a = kiln_new_2d(ctx, KILN_F32, 4, 48), *h = kiln_new_2d(ctx, KILN_F16, 4, 64);
    kiln_tensor *b = kiln_new_2d(ctx, KILN_F32, 4, 64);
    KT_EXPECT_ERR(kiln_quantize(ctx, a, KILN_Q8_0), KILN_ERR_SHAPE, "multiple of 32");
    KT_EXPECT_ERR(kiln_quantize(ctx, a, KILN_NF4), KILN_ERR_SHAPE, "multiple of 64");
    KT_EXPECT_ERR(kiln_quantize(ctx, b, KILN_NF4_DQ), KILN_ERR_SHAPE, "multiple of 16384");
    KT_EXPECT_ERR(kiln_quantize(ctx, h, KILN_Q4_0), KILN_ERR_DTYPE, "must be f32");
    KT_EXPECT_ERR(kiln_quantize(ctx, b, KILN_F16), KILN_ERR_DTYPE, "not a quantized dtype");
    KT_EXPECT_ERR(kiln_quantize(ctx, kiln_transpose(ctx, b, 0, 1), KILN_Q4_0), KILN_ERR_SHAPE, "not contiguous");
    KT_EXPECT_ERR(kiln_cast(ctx, b, KILN_NF4), KILN_ERR_DTYPE, "kiln_quantize");
    KT_EXPECT_ERR(kiln_quantize(ctx, kiln_relu(ctx, b), KILN_Q4_0), KILN_ERR_STATE, "compute it first");
    KT_EXPECT_ERR(kiln_tensor_new(ctx, KILN_Q4_0, 1, (int64_t[]){40}), KILN_ERR_SHAPE, "multiple of 32");
    /* NF4_DQ: a [4, 4096] weight is 16384 elements, one super-block */
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 4, 4096);
    KT_OK(kiln_tensor_fill_randn(w, 9, 0.0, 0.02));
    kiln_tensor *wq = kiln_quantize(ctx, w, KILN_NF4_DQ);
    KT_NOTNULL(wq);
    KT_CHECK(kiln_tensor_nbytes(wq) == 8456, "nbytes %zu", kiln_tensor_nbytes(wq));
    KT_EXPECT_ERR(kiln_slice(ctx, wq, 0, 1, 2, 1), KILN_ERR_SHAPE, "block");
    kiln_tensor *f = kiln_dequantize(ctx, wq);
    KT_OK(compute(ctx, f));
    float *fv = malloc(16384 * 4), *wv = malloc(16384 * 4);
    KT_OK(kiln_tensor_get_f32(f, fv, 16384));
    KT_OK(kiln_tensor_get_f32(w, wv, 16384));
    KT_CHECK(rmse(fv, wv, 16384) < 0.1 * 0.02 * 1.2, "NF4_DQ RMSE %g at std 0.02", rmse(fv, wv, 16384));
    free(fv), free(wv);
    kiln_ctx_free(ctx);
}

#ifdef KILN_VULKAN
/* On a device backend the quantized matmul runs there (vk_quant.c; the
 * quantized leaf goes up as blocks): Q4_0 at 4 rows of x as the CPU's
 * QMATMUL does it, x rounded to int8 and integer products, bit for bit.
 * tests/test_backend_quant.c covers every dtype. */
KT_TEST(quant_on_device_backend) {
    kiln_backend *vk = kt_device("vulkan");
    float yv[2][4 * 64];
    for (int dev = 0; dev < 2; dev++) {
        kiln_ctx *ctx = kiln_ctx_new();
        if (dev) KT_OK(kiln_ctx_set_backend(ctx, vk));
        kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 64, 128), *x = kiln_new_2d(ctx, KILN_F32, 4, 128);
        KT_OK(kiln_tensor_fill_randn(w, 1, 0.0, 0.1));
        KT_OK(kiln_tensor_fill_randn(x, 2, 0.0, 1.0));
        kiln_tensor *wq = kiln_quantize(ctx, w, KILN_Q4_0);
        kiln_tensor *y = kiln_relu(ctx, kiln_linear(ctx, x, wq, NULL));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_NOTNULL(y);
        KT_OK(kiln_graph_add(g, y));
        KT_OK(kiln_graph_compute(g));
        KT_CHECK(kiln_graph_get_stats(g).nodes_fallback == 0, "%lld nodes ran on the CPU",
                 (long long)kiln_graph_get_stats(g).nodes_fallback);
        KT_OK(kiln_tensor_get_f32(y, yv[dev], 4 * 64));
        kiln_ctx_free(ctx);
    }
    for (int i = 0; i < 4 * 64; i++)
        KT_CHECK(yv[0][i] == yv[1][i], "%d: cpu %.9g device %.9g", i, yv[0][i], yv[1][i]);
}
#endif

/* Every op but the views, dequantize, the quantized matmul and get_rows'
 * table refuses a quantized source when the graph is built, saying what
 * to do. */
KT_TEST(quant_ops_refuse_quantized_sources) {
    kiln_ctx *ctx = kiln_ctx_new();
    const int64_t sh[4] = {2, 2, 2, 64};
    kiln_tensor *f = kiln_tensor_new(ctx, KILN_F32, 4, sh);
    KT_OK(kiln_tensor_fill_randn(f, 1, 0.0, 1.0));
    kiln_tensor *q = kiln_quantize(ctx, f, KILN_NF4);
    KT_NOTNULL(q);
    kiln_tensor *lab = kiln_new_2d(ctx, KILN_I32, 2, 2), *w = kiln_new_1d(ctx, KILN_F32, 64);
    kiln_tensor *cw = kiln_tensor_new(ctx, KILN_F32, 4, (int64_t[]){2, 2, 1, 1});
    const int64_t pads[8] = {0, 0, 0, 0, 0, 0, 0, 64};
#define REFUSES(what, expr)                                                                                \
    do {                                                                                                   \
        kiln_clear_error();                                                                                \
        kiln_tensor *r_ = (expr);                                                                          \
        KT_CHECK(!r_ && kiln_last_status() == KILN_ERR_DTYPE && strstr(kiln_last_error(), "dequantize first"), \
                 "%s: %s", what, r_ ? "accepted" : kiln_last_error());                                     \
    } while (0)
    REFUSES("exp", kiln_exp(ctx, q));
    REFUSES("mul", kiln_mul(ctx, f, q));
    REFUSES("cmp", kiln_cmp(ctx, q, f, KILN_CMP_LT));
    REFUSES("where cond", kiln_where(ctx, q, f, f));
    REFUSES("masked_fill", kiln_masked_fill(ctx, f, q, 0.0));
    REFUSES("mean", kiln_mean(ctx, q, -1, false));
    REFUSES("argmax", kiln_argmax(ctx, q, -1, false));
    REFUSES("max_all", kiln_max_all(ctx, q));
    REFUSES("permute", kiln_permute(ctx, q, (int[]){0, 1, 3, 2}));
    REFUSES("broadcast_to", kiln_broadcast_to(ctx, q, 5, (int64_t[]){3, 2, 2, 2, 64}));
    REFUSES("concat", kiln_concat(ctx, (kiln_tensor *[]){q, q}, 2, 0));
    REFUSES("pad", kiln_pad(ctx, q, pads, 0.0));
    REFUSES("repeat", kiln_repeat(ctx, q, (int64_t[]){1, 1, 1, 2}));
    REFUSES("contiguous", kiln_contiguous(ctx, kiln_slice(ctx, q, 1, 0, 2, 2)));
    REFUSES("get_rows index", kiln_get_rows(ctx, kiln_reshape(ctx, f, 2, (int64_t[]){8, 64}), q)); /* tables: quant_get_rows */
    REFUSES("one_hot", kiln_one_hot(ctx, q, 4, KILN_F32));
    REFUSES("softmax", kiln_softmax(ctx, q, false));
    REFUSES("log_softmax", kiln_log_softmax(ctx, q, false));
    REFUSES("cross_entropy", kiln_cross_entropy(ctx, kiln_reshape(ctx, q, 2, (int64_t[]){8, 64}), lab, -100));
    REFUSES("mse", kiln_mse(ctx, f, q));
    REFUSES("layer_norm", kiln_layer_norm(ctx, q, w, NULL, 1e-5));
    REFUSES("rms_norm", kiln_rms_norm(ctx, q, w, 1e-5));
    REFUSES("rope", kiln_rope(ctx, q, NULL, 10000.0, (kiln_rope_mode)0));
    REFUSES("attention", kiln_attention(ctx, q, f, f, true, 0.125));
    REFUSES("conv2d", kiln_conv2d(ctx, q, cw, NULL, NULL));
    REFUSES("max_pool2d", kiln_max_pool2d(ctx, q, 2, 2, 2, 0));
    REFUSES("dropout", kiln_dropout(ctx, q, 0.5, 1));
    REFUSES("slice_assign", kiln_slice_assign(ctx, q, f, 0, 0));
#undef REFUSES
    kiln_ctx_free(ctx);
}

/* A quantized embedding table: kiln_get_rows dequantizes just the rows it
 * reads, giving the dequantized table's rows bit for bit; a table whose
 * rows are not whole blocks (nf4_dq's super-block of 16384) is refused. */
KT_TEST(quant_get_rows) {
    const kiln_dtype types[] = {KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ};
    const int32_t ids[5] = {3, 0, 3, 6, 1};
    for (size_t k = 0; k < sizeof types / sizeof *types; k++) {
        const int64_t v = 7, d = types[k] == KILN_NF4_DQ ? 16384 : 192;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, v, d), *idx = kiln_new_1d(ctx, KILN_I32, 5);
        KT_OK(kiln_tensor_fill_randn(w, 3 + k, 0.0, 0.5));
        KT_OK(kiln_tensor_set_i32(idx, ids, 5));
        kiln_tensor *q = kiln_quantize(ctx, w, types[k]);
        kiln_tensor *rows = kiln_get_rows(ctx, q, idx), *full = kiln_dequantize(ctx, q);
        KT_NOTNULL(rows && full);
        KT_OK(compute(ctx, rows));
        KT_OK(compute(ctx, full));
        float *got = malloc(sizeof(float) * 5 * d), *all = malloc(sizeof(float) * v * d);
        KT_OK(kiln_tensor_get_f32(rows, got, 5 * d));
        KT_OK(kiln_tensor_get_f32(full, all, v * d));
        int bad = 0;
        for (int p = 0; p < 5; p++) bad += memcmp(got + p * d, all + ids[p] * d, sizeof(float) * d) != 0;
        KT_CHECK(bad == 0, "%s: %d rows differ from the dequantized table's", kiln_dtype_name(types[k]), bad);
        free(got), free(all);
        kiln_ctx_free(ctx);
    }
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 4, 4096), *idx = kiln_new_1d(ctx, KILN_I32, 1);
    KT_OK(kiln_tensor_fill_randn(w, 1, 0.0, 1.0));
    kiln_tensor *q = kiln_quantize(ctx, w, KILN_NF4_DQ);
    KT_NOTNULL(q);
    KT_CHECK(!kiln_get_rows(ctx, q, idx) && strstr(kiln_last_error(), "multiple of 16384"),
             "an nf4_dq table of rows of 4096 is refused: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}
