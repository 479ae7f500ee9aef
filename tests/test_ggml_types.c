/* test_ggml_types.c — ggml's block types as kiln dtypes (quant/): each
 * type's dequantization against blocks decoded by a Python script of its
 * own (scripts/make_quant_fixtures.py, tests/fixtures/quant/), bit for
 * bit, on every SIMD level; llama-quantize's blocks from the reference
 * files' F32 values, byte for byte; round trips; and the CPU's scalar
 * integer dot products against f64 products of the dequantized operands. */
#include "kt.h"
#include "kt_device.h"
#include "kt_simd.h"
#include "../quant/quant.h"
#include "../backends/cpu/qmatmul.h"
#include "../backends/cpu/qmatmul_ggml.h"
#include "../backends/cpu/qmatmul_kgemm.h"
#include "../core/json.h"

#include <stdint.h>
#include <strings.h>
#include <unistd.h>

/* Every type of this file: its dtype, fixture, and the bound of its
 * round trip's rms error on N(0, 1) values (measured, with margin). */
static const struct {
    kiln_dtype t;
    const char *name;
    double rms;
} types[] = {
    {KILN_Q8_0, "q8_0", 0.007}, {KILN_Q4_0, "q4_0", 0.11}, {KILN_Q4_1, "q4_1", 0.1},
    {KILN_Q5_0, "q5_0", 0.055}, {KILN_Q5_1, "q5_1", 0.05}, {KILN_Q8_1, "q8_1", 0.007},
    {KILN_Q2_K, "q2_K", 0.37},  {KILN_Q3_K, "q3_K", 0.19}, {KILN_Q4_K, "q4_K", 0.09},
    {KILN_Q5_K, "q5_K", 0.045}, {KILN_Q6_K, "q6_K", 0.023}, {KILN_Q8_K, "q8_K", 0.0085},
    {KILN_IQ4_NL, "iq4_nl", 0.1}, {KILN_IQ4_XS, "iq4_xs", 0.1},
};
#define N_TYPES (int)(sizeof types / sizeof types[0])

typedef struct qfx {
    uint32_t nblocks, bsize, belems, has_source;
    uint8_t *blocks;
    float *values, *source; /* source NULL unless has_source */
} qfx;

static bool qfx_load(const char *name, qfx *f) {
    char path[96];
    snprintf(path, sizeof path, "tests/fixtures/quant/%s.bin", name);
    FILE *fp = fopen(path, "rb");
    char magic[4];
    memset(f, 0, sizeof *f);
    bool ok = fp && fread(magic, 1, 4, fp) == 4 && !memcmp(magic, "KQF1", 4) && fread(&f->nblocks, 4, 4, fp) == 4 &&
              f->nblocks && f->nblocks < 1024 && f->bsize < 1024 && f->belems <= 256;
    const size_t nv = ok ? (size_t)f->nblocks * f->belems : 0;
    if (ok) {
        f->blocks = malloc((size_t)f->nblocks * f->bsize);
        f->values = malloc(nv * 4);
        f->source = f->has_source ? malloc(nv * 4) : NULL;
        ok = f->blocks && f->values && (!f->has_source || f->source) &&
             fread(f->blocks, f->bsize, f->nblocks, fp) == f->nblocks && fread(f->values, 4, nv, fp) == nv &&
             (!f->has_source || fread(f->source, 4, nv, fp) == nv);
    }
    if (fp) fclose(fp);
    if (!ok) fprintf(stderr, "%s: missing or malformed\n", path);
    return ok;
}

static void qfx_free(qfx *f) { free(f->blocks), free(f->values), free(f->source); }

/* The fixture's blocks as a [nblocks, block] tensor of dtype t. */
static kiln_tensor *fixture_tensor(kiln_ctx *ctx, kiln_dtype t, const qfx *f) {
    kiln_tensor *q = kiln_new_2d(ctx, t, f->nblocks, f->belems);
    if (q) memcpy(kiln_tensor_data(q), f->blocks, (size_t)f->nblocks * f->bsize);
    return q;
}

/* Index of the first float whose bits differ, -1 if none. */
static int64_t first_diff(const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (memcmp(a + i, b + i, 4)) return i;
    return -1;
}

KT_TEST(ggml_types_rows) {
    for (int i = 0; i < N_TYPES; i++) {
        qfx f;
        KT_REQUIRE(qfx_load(types[i].name, &f), "%s", types[i].name);
        KT_CHECK(kiln_dtype_is_quantized(types[i].t) && !strcmp(kiln_dtype_name(types[i].t), types[i].name) &&
                     kiln_dtype_block(types[i].t) == f.belems && kiln_dtype_size(types[i].t) == f.bsize,
                 "%s: '%s', block %lld of %zu bytes", types[i].name, kiln_dtype_name(types[i].t),
                 (long long)kiln_dtype_block(types[i].t), kiln_dtype_size(types[i].t));
        qfx_free(&f);
    }
    /* the activations' dtypes, as ggml's vec_dot_type */
    KT_CHECK(kiln_dtype_dot_type(KILN_Q4_0) == KILN_Q8_0 && kiln_dtype_dot_type(KILN_Q5_0) == KILN_Q8_0 &&
                 kiln_dtype_dot_type(KILN_Q4_1) == KILN_Q8_1 && kiln_dtype_dot_type(KILN_Q5_1) == KILN_Q8_1 &&
                 kiln_dtype_dot_type(KILN_Q4_K) == KILN_Q8_K && kiln_dtype_dot_type(KILN_Q6_K) == KILN_Q8_K &&
                 kiln_dtype_dot_type(KILN_IQ4_NL) == KILN_Q8_0 && kiln_dtype_dot_type(KILN_IQ4_XS) == KILN_Q8_K &&
                 kiln_dtype_dot_type(KILN_NF4) == KILN_F32 && kiln_dtype_dot_type(KILN_F32) == KILN_F32,
             "dot types");
}

/* Each fixture through kiln_tensor_get_f32 (the CPU's preferred coders,
 * per SIMD level), the reference coder and the DEQUANTIZE op, bit for bit. */
KT_TEST(ggml_types_dequantize_as_the_python_decoders) {
    for (int i = 0; i < N_TYPES; i++) {
        qfx f;
        KT_REQUIRE(qfx_load(types[i].name, &f), "%s", types[i].name);
        const int64_t n = (int64_t)f.nblocks * f.belems;
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *q = fixture_tensor(ctx, types[i].t, &f);
        float *got = malloc((size_t)n * 4);
        KT_REQUIRE(q && got, "%s", types[i].name);
        KT_FOR_EACH_SIMD(v) {
            KT_OK(kiln_tensor_get_f32(q, got, n));
            int64_t d = first_diff(got, f.values, n);
            KT_CHECK(d < 0, "%s: value %lld is %.9g, not %.9g", types[i].name, (long long)d, got[d < 0 ? 0 : d],
                     f.values[d < 0 ? 0 : d]);
            kiln_tensor *y = kiln_dequantize(ctx, q);
            kiln_graph *g = kiln_graph_new(ctx);
            KT_OK(kiln_graph_add(g, y));
            KT_OK(kiln_graph_compute(g));
            KT_OK(kiln_tensor_get_f32(y, got, n));
            KT_CHECK(first_diff(got, f.values, n) < 0, "%s: the dequantize op differs", types[i].name);
        }
        memset(got, 0, (size_t)n * 4);
        kiln__types[types[i].t].to_f32(f.blocks, got, n);
        KT_CHECK(first_diff(got, f.values, n) < 0, "%s: the traits' to_f32 differs", types[i].name);
        for (int64_t e = 0; e < n; e += 7) {
            float g1 = (float)kiln__types[types[i].t].get(f.blocks, e);
            KT_CHECK(!memcmp(&g1, f.values + e, 4), "%s: get(%lld) %.9g", types[i].name, (long long)e, g1);
        }
        free(got);
        kiln_ctx_free(ctx);
        qfx_free(&f);
    }
}

/* The comparison above catches a wrong decoder: with the two nibbles of
 * every code byte swapped (the wrong element order of a 4-bit plane), the
 * values differ from the fixture's. */
KT_TEST(ggml_types_a_wrong_dequantization_fails) {
    static const struct { const char *name; kiln_dtype t; size_t qs, len; } swap[] = {
        {"q4_1", KILN_Q4_1, 4, 16}, {"q5_0", KILN_Q5_0, 6, 16}, {"q5_1", KILN_Q5_1, 8, 16},
        {"q4_K", KILN_Q4_K, 16, 128}, {"q5_K", KILN_Q5_K, 48, 128}, {"q6_K", KILN_Q6_K, 0, 128},
        {"iq4_nl", KILN_IQ4_NL, 2, 16}, {"iq4_xs", KILN_IQ4_XS, 8, 128}};
    for (size_t i = 0; i < sizeof swap / sizeof swap[0]; i++) {
        qfx f;
        KT_REQUIRE(qfx_load(swap[i].name, &f), "%s", swap[i].name);
        const int64_t n = (int64_t)f.nblocks * f.belems;
        for (uint32_t b = 0; b < f.nblocks; b++)
            for (size_t j = swap[i].qs; j < swap[i].qs + swap[i].len; j++) {
                uint8_t *c = f.blocks + (size_t)b * f.bsize + j;
                *c = (uint8_t)(*c << 4 | *c >> 4);
            }
        float *got = malloc((size_t)n * 4);
        kiln__types[swap[i].t].to_f32(f.blocks, got, n);
        int64_t wrong = 0;
        for (int64_t e = 0; e < n; e++) wrong += memcmp(got + e, f.values + e, 4) != 0;
        KT_CHECK(wrong > n / 2, "%s: only %lld of %lld values differ", swap[i].name, (long long)wrong, (long long)n);
        free(got);
        qfx_free(&f);
    }
}

/* Where the fixture holds llama-quantize's blocks of known f32 values,
 * kiln_quantize of those values gives the same bytes. */
KT_TEST(ggml_types_quantize_as_llama_quantize) {
    int checked = 0;
    for (int i = 0; i < N_TYPES; i++) {
        qfx f;
        KT_REQUIRE(qfx_load(types[i].name, &f), "%s", types[i].name);
        if (!f.has_source) {
            qfx_free(&f);
            continue;
        }
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, f.nblocks, f.belems);
        KT_OK(kiln_tensor_set_f32(x, f.source, (int64_t)f.nblocks * f.belems));
        kiln_tensor *q = kiln_quantize(ctx, x, types[i].t);
        KT_REQUIRE(q, "%s: %s", types[i].name, kiln_last_error());
        int bad = 0;
        for (uint32_t b = 0; b < f.nblocks; b++)
            bad += memcmp((uint8_t *)kiln_tensor_data(q) + (size_t)b * f.bsize, f.blocks + (size_t)b * f.bsize,
                          f.bsize) != 0;
        KT_CHECK(!bad, "%s: %d of %u blocks differ from llama-quantize's", types[i].name, bad, f.nblocks);
        checked++;
        kiln_ctx_free(ctx);
        qfx_free(&f);
    }
    KT_CHECK(checked >= 2, "only %d types with llama-quantize's blocks", checked);
}

KT_TEST(ggml_types_round_trips) {
    const int64_t n = 8192;
    float *x = kt_randn(n, 7, 1.0f), *y = malloc((size_t)n * 4);
    for (int i = 0; i < N_TYPES; i++) {
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *xt = kiln_new_2d(ctx, KILN_F32, 8, n / 8);
        KT_OK(kiln_tensor_set_f32(xt, x, n));
        kiln_tensor *q = kiln_quantize(ctx, xt, types[i].t);
        KT_REQUIRE(q, "%s: %s", types[i].name, kiln_last_error());
        KT_OK(kiln_tensor_get_f32(q, y, n));
        double se = 0;
        for (int64_t e = 0; e < n; e++) se += ((double)y[e] - x[e]) * ((double)y[e] - x[e]);
        const double rms = sqrt(se / (double)n);
        KT_CHECK(rms < types[i].rms && rms > types[i].rms / 4, "%s: rms error %.4g (bound %.4g)", types[i].name, rms,
                 types[i].rms);
        /* zeros stay zeros */
        kiln_tensor *zt = kiln_new_2d(ctx, KILN_F32, 1, 256);
        KT_OK(kiln_tensor_fill(zt, 0.0));
        kiln_tensor *z = kiln_quantize(ctx, zt, types[i].t);
        KT_OK(kiln_tensor_get_f32(z, y, 256));
        int nonzero = 0;
        for (int e = 0; e < 256; e++) nonzero += y[e] != 0;
        KT_CHECK(!nonzero, "%s: %d of 256 zeros come back nonzero", types[i].name, nonzero);
        kiln_ctx_free(ctx);
    }
    free(x), free(y);
}

/* The scalar dot product of each weight type with its activations equals
 * the f64 product of the dequantized operands to f32 rounding, and
 * kiln_linear's batch-1 product is that dot product on every level. */
KT_TEST(ggml_types_integer_dot_products) {
    const int64_t rows = 5, k = 1024;
    float *w = kt_randn(rows * k, 11, 1.0f), *x = kt_randn(k, 12, 1.0f);
    for (int i = 0; i < N_TYPES; i++) {
        const kiln_dtype t = types[i].t, p = kiln_dtype_dot_type(t);
        kiln_qmm_dot_ggml *dot = kiln__qmm_ggml_kernel(t);
        if (!dot) continue; /* Q8_0 / Q4_0: qmatmul.c's own (test_qmatmul.c) */
        kiln_ctx *ctx = kiln_ctx_new();
        kiln_tensor *wt = kiln_new_2d(ctx, KILN_F32, rows, k), *xt = kiln_new_2d(ctx, KILN_F32, 1, k);
        KT_OK(kiln_tensor_set_f32(wt, w, rows * k));
        KT_OK(kiln_tensor_set_f32(xt, x, k));
        kiln_tensor *wq = kiln_quantize(ctx, wt, t), *xq = kiln_quantize(ctx, xt, p);
        KT_REQUIRE(wq && xq, "%s: %s", types[i].name, kiln_last_error());
        float *wd = malloc((size_t)(rows * k) * 4), *xd = malloc((size_t)k * 4), want[8];
        KT_OK(kiln_tensor_get_f32(wq, wd, rows * k));
        KT_OK(kiln_tensor_get_f32(xq, xd, k));
        const size_t rb = kiln__elems_bytes(t, k);
        for (int64_t r = 0; r < rows; r++) {
            double exact = 0, mag = 0;
            for (int64_t e = 0; e < k; e++) exact += (double)wd[r * k + e] * xd[e], mag += fabs((double)wd[r * k + e] * xd[e]);
            for (int64_t b = 0; p == KILN_Q8_1 && b < k / 32; b++) { /* ggml's min term: m s, s = f16(d sum q) */
                const kiln_block_q8_1 *a = (const kiln_block_q8_1 *)kiln_tensor_data(xq) + b;
                kiln_qints wb;
                kiln__qints_unpack(t, (const char *)kiln_tensor_data(wq) + r * rb, b, &wb);
                double xs = 0;
                for (int e = 0; e < 32; e++) xs += xd[32 * b + e];
                exact += wb.dm * (kiln__f16_to_f32(a->s) - xs);
            }
            want[r] = kiln__qmm_dot_ggml_ref(t, (const char *)kiln_tensor_data(wq) + r * rb, kiln_tensor_data(xq),
                                            k / kiln_dtype_block(t));
            KT_CHECK(fabs(want[r] - exact) <= 2e-6 * mag, "%s row %lld: %.9g vs %.9g (sum |wx| %g)", types[i].name,
                     (long long)r, want[r], exact, mag);
        }
        KT_FOR_EACH_SIMD(v) {
            float got[8];
            kiln_tensor *y = kiln_linear(ctx, xt, wq, NULL);
            kiln_graph *g = kiln_graph_new(ctx);
            KT_OK(kiln_graph_add(g, y));
            KT_OK(kiln_graph_compute(g));
            KT_OK(kiln_tensor_get_f32(y, got, rows));
            KT_CHECK(first_diff(got, want, rows) < 0, "%s: kiln_linear's batch-1 product is not the reference's",
                     types[i].name);
        }
        /* prompts: 9 rows of x; where the integer GEMM or a few-rows
         * kernel runs t (qmatmul_kgemm.h, qmatmul_ggml.h: below
         * kiln__qmm_batched_min rows) they are quantized as in
         * generation (each row the batch-1 product), elsewhere the
         * dequantized W runs in f32 */
        const bool as_batch_1 = kiln__qmm_kgemm_handles(t) || 9 < kiln__qmm_batched_min(t);
        kiln_tensor *x9 = kiln_new_2d(ctx, KILN_F32, 9, k), *y9 = NULL;
        float *xs = kt_randn(9 * k, 13, 1.0f), got9[9 * 8];
        KT_OK(kiln_tensor_set_f32(x9, xs, 9 * k));
        kiln_graph *g = kiln_graph_new(ctx);
        KT_OK(kiln_graph_add(g, y9 = kiln_linear(ctx, x9, wq, NULL)));
        KT_OK(kiln_graph_compute(g));
        KT_OK(kiln_tensor_get_f32(y9, got9, 9 * rows));
        for (int64_t i9 = 0; i9 < 9; i9++)
            for (int64_t r = 0; r < rows; r++) {
                if (as_batch_1) {
                    kiln_block_q8_K xa[1024 / KILN_QK_K]; /* room for k of Q8_0 or Q8_1 too */
                    kiln__types[p].from_f32(xs + i9 * k, xa, k);
                    const float one = kiln__qmm_dot_ggml_ref(t, (const char *)kiln_tensor_data(wq) + r * rb, xa,
                                                             k / kiln_dtype_block(t));
                    KT_CHECK(!memcmp(&got9[i9 * rows + r], &one, 4), "%s: 9 rows, (%lld, %lld): %.9g, batch-1 %.9g",
                             types[i].name, (long long)i9, (long long)r, got9[i9 * rows + r], one);
                    continue;
                }
                double exact = 0, mag = 0;
                for (int64_t e = 0; e < k; e++)
                    exact += (double)wd[r * k + e] * xs[i9 * k + e], mag += fabs((double)wd[r * k + e] * xs[i9 * k + e]);
                KT_CHECK(fabs(got9[i9 * rows + r] - exact) <= 1e-5 * mag, "%s: 9 rows, (%lld, %lld): %.9g vs %.9g",
                         types[i].name, (long long)i9, (long long)r, got9[i9 * rows + r], exact);
            }
        free(xs), free(wd), free(xd);
        kiln_ctx_free(ctx);
    }
    free(w), free(x);
}

/* A GGUF of every type above and an f32 tensor, written and read back:
 * each tensor keeps its own type and its bytes. */
KT_TEST(ggml_types_gguf_keeps_each_tensors_type) {
    char path[] = "/tmp/kiln_ggml_types_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    kiln_ctx *ctx = kiln_ctx_new();
    float *x = kt_randn(4 * 512, 3, 1.0f);
    kiln_tensor *xt = kiln_new_2d(ctx, KILN_F32, 4, 512), *ts[N_TYPES + 1];
    KT_OK(kiln_tensor_set_f32(xt, x, 4 * 512));
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_NOTNULL(w);
    for (int i = 0; i <= N_TYPES; i++) {
        ts[i] = i < N_TYPES ? kiln_quantize(ctx, xt, types[i].t) : xt;
        KT_REQUIRE(ts[i], "%s", kiln_last_error());
        KT_OK(kiln_gguf_add_tensor(w, i < N_TYPES ? types[i].name : "f32", ts[i]));
    }
    KT_OK(kiln_gguf_writer_save(w, path));
    kiln_gguf_writer_free(w);
    kiln_gguf *g = kiln_gguf_open(path);
    KT_REQUIRE(g, "%s", kiln_last_error());
    for (int i = 0; i <= N_TYPES; i++) {
        const char *nm = i < N_TYPES ? types[i].name : "f32";
        kiln_gguf_tensor_info in;
        KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, nm), &in));
        KT_CHECK(in.kiln_dtype == (int)kiln_tensor_dtype(ts[i]) && !strcasecmp(in.type_name, kiln_dtype_name(kiln_tensor_dtype(ts[i]))),
                 "%s: stored as %s", nm, in.type_name);
        kiln_tensor *l = kiln_gguf_load(g, ctx, nm);
        KT_REQUIRE(l, "%s: %s", nm, kiln_last_error());
        KT_CHECK(kiln_tensor_dtype(l) == kiln_tensor_dtype(ts[i]) && kiln_tensor_nbytes(l) == kiln_tensor_nbytes(ts[i]) &&
                     !memcmp(kiln_tensor_data(l), kiln_tensor_data(ts[i]), kiln_tensor_nbytes(l)),
                 "%s: not the bytes written", nm);
    }
    kiln_gguf_close(g);
    unlink(path);
    free(x);
    kiln_ctx_free(ctx);
}

/* llama.cpp's Q4_K_M reference file (tests/fixtures/gguf-ref, from
 * ../shared/gguf-ref): every tensor has the ggml type of the manifest
 * (one file mixes F32, Q4_K and Q6_K) and loads as that kiln dtype; the
 * tensors saved again and read back keep their types and bytes. */
KT_TEST(ggml_types_reference_file_types) {
    static const char file[] = "llama-s1-Q4_K_M.gguf";
    FILE *fp = fopen("tests/fixtures/gguf-ref/manifest.json", "rb");
    KT_REQUIRE(fp, "the manifest");
    static char buf[1 << 17];
    size_t len = fread(buf, 1, sizeof buf, fp);
    fclose(fp);
    kiln__json_doc *doc = kiln__json_parse(buf, len, 8, "manifest");
    KT_REQUIRE(doc, "%s", kiln_last_error());
    const kiln__json *tensors = kiln__json_get(kiln__json_get(kiln__json_root(doc), file), "tensors");
    KT_REQUIRE(tensors && tensors->len > 10, "the manifest lists %s", file);
    kiln_gguf *g = kiln_gguf_open("tests/fixtures/gguf-ref/llama-s1-Q4_K_M.gguf");
    KT_REQUIRE(g, "%s", kiln_last_error());
    KT_CHECK(kiln_gguf_tensor_count(g) == (int)tensors->len, "%d tensors, the manifest %zu", kiln_gguf_tensor_count(g),
             tensors->len);
    char path[] = "/tmp/kiln_ggml_ref_XXXXXX";
    int fd = mkstemp(path);
    KT_REQUIRE(fd >= 0, "mkstemp");
    close(fd);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    int kinds[KILN_DTYPE_COUNT] = {0}, n = 0;
    kiln_tensor *ts[64];
    for (const kiln__json *e = tensors->child; e && n < 64; e = e->next, n++) {
        const kiln__json *type = kiln__json_get(e, "type");
        kiln_gguf_tensor_info in;
        KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, e->key), &in));
        KT_CHECK(type && in.type_name && !strcmp(in.type_name, type->str), "%s: %s, the manifest %s", e->key,
                 in.type_name, type ? type->str : "?");
        ts[n] = kiln_gguf_load(g, ctx, e->key);
        KT_REQUIRE(ts[n], "%s: %s", e->key, kiln_last_error());
        KT_CHECK(!strcasecmp(kiln_dtype_name(kiln_tensor_dtype(ts[n])), type->str), "%s loads as %s", e->key,
                 kiln_dtype_name(kiln_tensor_dtype(ts[n])));
        kinds[kiln_tensor_dtype(ts[n])]++;
        KT_OK(kiln_gguf_add_tensor(w, e->key, ts[n]));
    }
    KT_CHECK(kinds[KILN_F32] && kinds[KILN_Q4_K] && kinds[KILN_Q6_K], "the file mixes F32, Q4_K and Q6_K");
    KT_OK(kiln_gguf_writer_save(w, path));
    kiln_gguf_writer_free(w);
    kiln_gguf *g2 = kiln_gguf_open(path);
    KT_REQUIRE(g2, "%s", kiln_last_error());
    for (int i = 0; i < n; i++) {
        kiln_tensor *l = kiln_gguf_load(g2, ctx, kiln_tensor_name(ts[i]));
        KT_REQUIRE(l, "%s", kiln_last_error());
        KT_CHECK(kiln_tensor_dtype(l) == kiln_tensor_dtype(ts[i]) && kiln_tensor_nbytes(l) == kiln_tensor_nbytes(ts[i]) &&
                     !memcmp(kiln_tensor_data(l), kiln_tensor_data(ts[i]), kiln_tensor_nbytes(l)),
                 "%s: not the bytes read", kiln_tensor_name(ts[i]));
    }
    kiln_gguf_close(g2);
    kiln_gguf_close(g);
    unlink(path);
    kiln__json_free(doc);
    kiln_ctx_free(ctx);
}

/* llama.cpp's Q4_K and Q6_K tensors loaded in their own type into a
 * Vulkan context: kiln_linear of 3 rows runs on the device, no node on
 * the CPU, equal to the CPU's fused product bit for bit (both round x to
 * Q8_K and take integer dot products in the same order). */
KT_TEST(ggml_types_vulkan_runs_gguf_weights) {
    kiln_backend *vk = kt_device("vulkan");
    static const char *names[] = {"blk.0.attn_q.weight", "blk.1.ffn_down.weight"};
    static const kiln_dtype dts[] = {KILN_Q4_K, KILN_Q6_K};
    kiln_gguf *g = kiln_gguf_open("tests/fixtures/gguf-ref/llama-s1-Q4_K_M.gguf");
    KT_REQUIRE(g, "%s", kiln_last_error());
    for (int i = 0; i < 2; i++) {
        float *want = NULL, *got = NULL, *x = NULL;
        int64_t n = 0, k = 0;
        for (int dev = 0; dev < 2; dev++) {
            kiln_ctx *ctx = kiln_ctx_new();
            KT_REQUIRE(ctx && (!dev || !kiln_ctx_set_backend(ctx, vk)), "context");
            kiln_tensor *w = kiln_gguf_load(g, ctx, names[i]);
            KT_REQUIRE(w && kiln_tensor_dtype(w) == dts[i], "%s: %s", names[i], kiln_last_error());
            n = kiln_tensor_shape(w)[0], k = kiln_tensor_shape(w)[1];
            if (!dev) {
                x = kt_randn(3 * k, 30 + i, 1.0f);
                want = malloc((size_t)(3 * n) * sizeof *want), got = malloc((size_t)(3 * n) * sizeof *got);
            }
            KT_REQUIRE(x && want && got, "memory");
            kiln_tensor *xt = kiln_new_2d(ctx, KILN_F32, 3, k);
            KT_OK(kiln_tensor_set_f32(xt, x, 3 * k));
            kiln_tensor *y = kiln_linear(ctx, xt, w, NULL);
            kiln_graph *gr = kiln_graph_new(ctx);
            KT_REQUIRE(y && gr && !kiln_graph_add(gr, y) && !kiln_graph_compute(gr), "%s", kiln_last_error());
            KT_OK(kiln_tensor_get_f32(y, dev ? got : want, 3 * n));
            if (dev) KT_CHECK(kiln_graph_get_stats(gr).nodes_fallback == 0, "%s: a node ran on the CPU", names[i]);
            kiln_ctx_free(ctx);
        }
        double scale = 0, worst = 0;
        for (int64_t j = 0; j < 3 * n; j++) { /* plain compares: see the round trip's loops */
            if (fabs(want[j]) > scale) scale = fabs(want[j]);
            if (fabs(got[j] - want[j]) > worst) worst = fabs(got[j] - want[j]);
        }
        KT_CHECK(scale > 0 && worst == 0, "%s: the device's product differs by %g (scale %g)", names[i], worst, scale);
        free(x), free(want), free(got);
    }
    kiln_gguf_close(g);
}
