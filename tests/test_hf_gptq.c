/* test_hf_gptq.c — Hugging Face GPTQ checkpoints (models/hf_gptq.c through
 * llama_from_hf / llama_infer_from_hf) on the tiny checkpoints of
 * scripts/make_gptq_fixtures.py (tests/fixtures/gptq/: AutoGPTQ's v1 and
 * GPTQModel's v2 formats, 3, 4 and 8 bits, act order with shuffled g_idx,
 * per-channel): the codes are kiln's RTN codes of the script's weights,
 * the dequantized weights the script's, the stored model's logits those
 * of the float model within the fused products' error, and malformed
 * files are refused with a message naming what is wrong. */
#include "hf_gptq.h"
#include "kt.h"
#include "kt_simd.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FX "tests/fixtures/gptq/"

static const struct variant {
    const char *dir;
    int bits, group;      /* group -1: per channel */
    bool sym, act;
    kiln_dtype stored;    /* the dtype llama_infer_from_hf keeps */
} variants[] = {
    {FX "v1_4bit_g32_sym", 4, 32, true, false, KILN_GQ4_32},
    {FX "v2_4bit_g32_asym_act", 4, 32, false, true, KILN_GQ4_32},
    {FX "v1_8bit_g32_sym_act", 8, 32, true, true, KILN_Q8_0},
    {FX "v2_3bit_channel_asym", 3, -1, false, false, KILN_GQ3_64},
};
#define N_VARIANTS (int)(sizeof variants / sizeof variants[0])

static const char *const linears[7] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                       "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                       "mlp.down_proj"};
static const int32_t TOKENS[9] = {1, 47, 3, 3, 20, 0, 33, 12, 5};

/* The tensor called name of path, as f32 values (i32 ones converted). */
static float *load_f32(const char *path, const char *name, int64_t *n) {
    kiln_safetensors *st = kiln_safetensors_open(path);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t = st ? kiln_safetensors_load(st, ctx, name) : NULL;
    float *f = t ? malloc((size_t)kiln_tensor_numel(t) * sizeof *f) : NULL;
    if (f) {
        *n = kiln_tensor_numel(t);
        if (kiln_tensor_dtype(t) == KILN_I32)
            for (int64_t i = 0; i < *n; i++) f[i] = (float)((const int32_t *)kiln_tensor_data(t))[i];
        else if (kiln_tensor_get_f32(t, f, *n)) free(f), f = NULL;
    }
    kiln_ctx_free(ctx);
    kiln_safetensors_close(st);
    return f;
}

/* A linear of a variant read as hf_gptq_read reads it. */
static kiln_gptq_result *read_linear(const char *dir, const char *base, int64_t rows, int64_t cols) {
    hf_gptq q;
    bool found;
    char p[300];
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    if (hf_gptq_config("test", dir, &q, &found) || !found) return NULL;
    kiln_safetensors *st = kiln_safetensors_open(p);
    kiln_gptq_result *r = st ? hf_gptq_read(&q, "test", dir, base, &(hf_gptq_files){st, st, st, st}, rows, cols) : NULL;
    kiln_safetensors_close(st);
    return r;
}

/* The codes, zeros and (f16) scales are kiln_rtn_quantize's of the
 * script's weights taken in the script's quantization order; the
 * dequantized weights are the script's. */
KT_TEST(hf_gptq_codes_are_kiln_rtn_codes) {
    for (int v = 0; v < N_VARIANTS; v++) {
        const struct variant *x = &variants[v];
        char ref[300], base[96], name[128];
        snprintf(ref, sizeof ref, "%s/ref/model.safetensors", x->dir);
        for (int l = 0; l < 7; l++) {
            snprintf(base, sizeof base, "model.layers.0.%s", linears[l]);
            kt_set_context(base);
            int64_t n, np, nd;
            snprintf(name, sizeof name, "orig.%s", base);
            float *w = load_f32(ref, name, &n);
            snprintf(name, sizeof name, "perm.%s", base);
            float *pf = load_f32(ref, name, &np);
            snprintf(name, sizeof name, "%s.weight", base);
            float *deq = load_f32(ref, name, &nd);
            KT_REQUIRE(w && pf && deq && nd == n, "%s: reference tensors", x->dir);
            const int64_t cols = np, rows = n / cols;
            kiln_gptq_result *r = read_linear(x->dir, base, rows, cols);
            KT_REQUIRE(r, "%s: %s", x->dir, kiln_last_error());
            /* kiln's RTN on the columns in quantization order */
            float *wp = malloc((size_t)n * sizeof *wp), *got = malloc((size_t)n * sizeof *got);
            for (int64_t o = 0; o < rows; o++)
                for (int64_t k = 0; k < cols; k++) wp[o * cols + k] = w[o * cols + (int64_t)pf[k]];
            kiln_gptq_config c = kiln_gptq_defaults();
            c.bits = x->bits, c.group_size = x->group < 0 ? 0 : x->group, c.sym = x->sym;
            kiln_gptq_result *k = kiln_rtn_quantize(wp, rows, cols, &c);
            KT_REQUIRE(k, "rtn: %s", kiln_last_error());
            KT_CHECK(r->n_groups == k->n_groups && r->group_size == k->group_size, "%s: groups %lld of %lld",
                     x->dir, (long long)r->n_groups, (long long)r->group_size);
            int64_t bad = 0;
            for (int64_t o = 0; o < rows; o++) {
                for (int64_t i = 0; i < cols; i++) bad += r->codes[o * cols + (int64_t)pf[i]] != k->codes[o * cols + i];
                for (int64_t j = 0; j < k->n_groups; j++) {
                    /* the file's group j holds the columns the script quantized j-th */
                    const int64_t fj = r->g_idx[(int64_t)pf[j * k->group_size]];
                    bad += r->zeros[o * r->n_groups + fj] != k->zeros[o * k->n_groups + j];
                    const float s16 = r->scales[o * r->n_groups + fj], s = k->scales[o * k->n_groups + j];
                    bad += fabsf(s16 - s) > s * 0x1p-11f;
                }
            }
            KT_CHECK(!bad, "%s: %lld codes, zeros or scales differ from kiln_rtn_quantize's", x->dir, (long long)bad);
            KT_OK(kiln_gptq_dequantize(r, got));
            KT_CHECK(!memcmp(got, deq, (size_t)n * sizeof *got), "%s: dequantized weights differ from the script's",
                     x->dir);
            kiln_gptq_result_free(k), kiln_gptq_result_free(r);
            free(w), free(pf), free(deq), free(wp), free(got);
        }
    }
    kt_set_context(NULL);
}

/* llama_from_hf dequantizes a GPTQ checkpoint to the script's float
 * weights exactly: the same parameters as the float checkpoint beside it. */
KT_TEST(hf_gptq_dequantized_model_is_the_float_model) {
    for (int v = 0; v < N_VARIANTS; v++) {
        char ref[300];
        snprintf(ref, sizeof ref, "%s/ref", variants[v].dir);
        kiln_ctx *ctx = kiln_ctx_new(), *ctx2 = kiln_ctx_new();
        llama *a = llama_from_hf(ctx, variants[v].dir), *b = llama_from_hf(ctx2, ref);
        KT_REQUIRE(a && b, "%s: %s", variants[v].dir, kiln_last_error());
        for (int i = 0; i < a->n_params; i++) {
            const int64_t n = kiln_tensor_numel(a->params[i]);
            float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
            KT_OK(kiln_tensor_get_f32(a->params[i], x, n));
            KT_OK(kiln_tensor_get_f32(b->params[i], y, n));
            KT_CHECK(!memcmp(x, y, (size_t)n * 4), "%s: %s differs", variants[v].dir, kiln_tensor_name(a->params[i]));
            free(x), free(y);
        }
        llama_free(a), llama_free(b);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
    }
}

/* llama_infer_from_hf keeps the codes (a GQ dtype, Q8_0 for 8 bits, the
 * act-order permutation per weight, shared where a stack's are equal) and
 * its logits are the float model's within the int8 activations' error. */
KT_TEST(hf_gptq_stored_model_matches_the_float_model) {
    const int T = 9;
    for (int v = 0; v < N_VARIANTS; v++) {
        const struct variant *x = &variants[v];
        char ref[300];
        snprintf(ref, sizeof ref, "%s/ref", x->dir);
        kiln_ctx *ctx = kiln_ctx_new(), *ctx2 = kiln_ctx_new();
        llama *q = llama_infer_from_hf(ctx, x->dir, LLAMA_AS_STORED);
        KT_REQUIRE(q, "%s: %s", x->dir, kiln_last_error());
        llama *f = llama_from_hf(ctx2, ref);
        KT_REQUIRE(f, "%s: %s", ref, kiln_last_error());
        const llama_layer *y = &q->layers[0];
        KT_CHECK(kiln_tensor_dtype(y->wq) == x->stored && kiln_tensor_dtype(y->w2) == x->stored &&
                     kiln_tensor_dtype(q->output) == KILN_F32 && kiln_tensor_dtype(q->tok_embeddings) == KILN_F32,
                 "%s: weights %s, head %s", x->dir, kiln_dtype_name(kiln_tensor_dtype(y->wq)),
                 kiln_dtype_name(kiln_tensor_dtype(q->output)));
        KT_CHECK(!y->wo_perm == !x->act && !y->w2_perm == !x->act, "%s: act-order permutations", x->dir);
        /* the script gives q, k and v one order (one Hessian), gate and up one each */
        KT_CHECK(!x->act || (y->wk_perm == y->wq_perm && y->stacked_perm[0] == y->wq_perm && y->w1_perm != y->w3_perm),
                 "%s: shared permutations", x->dir);
        float *a = llama_test_logits(q, TOKENS, T), *b = llama_test_logits(f, TOKENS, T);
        KT_REQUIRE(a && b, "logits: %s", kiln_last_error());
        double worst = llama_test_max_diff(a, b, T * 48), scale = llama_test_max_diff(b, NULL, T * 48);
        /* (a prompt's products may quantize x too: Q8_0's int8 GEMM) */
        KT_CHECK(worst <= 0.02 * scale && scale > 0.5, "%s: prompt logits differ by %g (largest %g)", x->dir, worst,
                 scale);
        /* token by token: batch-1 products with int8 activations */
        llama_cache *c = llama_cache_new(q, 1, T);
        KT_REQUIRE(c, "cache: %s", kiln_last_error());
        worst = 0;
        for (int t = 0; t < T; t++) {
            KT_OK(llama_cache_step(q, c, &TOKENS[t], 1, a));
            const double d = llama_test_max_diff(a, b + t * 48, 48);
            if (d > worst) worst = d;
        }
        KT_CHECK(worst <= 0.02 * scale, "%s: generation logits differ by %g (largest %g)", x->dir, worst, scale);
        llama_cache_free(c);
        free(a), free(b);
        llama_free(q), llama_free(f);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
    }
}

/* 8-bit GPTQ as Q8_0 holds code 0 as q = -128, which kiln's own Q8_0
 * quantizer never makes: every kernel level takes it as the scalar one. */
KT_TEST(hf_gptq_q8_0_minus_128_at_every_level) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *q = llama_infer_from_hf(ctx, variants[2].dir, LLAMA_AS_STORED);
    KT_REQUIRE(q, "%s", kiln_last_error());
    kiln_tensor *w = q->layers[0].w2; /* [64, 64] */
    const int8_t *b = kiln_tensor_data(w);
    int lows = 0;
    for (size_t i = 0; i < kiln_tensor_nbytes(w); i += 34)
        for (int j = 0; j < 32; j++) lows += b[i + 2 + j] == -128;
    KT_CHECK(lows > 0, "the fixture has no code 0 in down_proj");
    const int64_t n = kiln_tensor_dim(w, 0), k = kiln_tensor_dim(w, 1);
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 1, k);
    KT_OK(kiln_tensor_fill_randn(x, 5, 0.0, 1.0));
    float want[64], got[64];
    bool first = true;
    KT_FOR_EACH_SIMD(v) {
        kiln_ctx_mark mk = kiln_ctx_get_mark(ctx);
        kiln_tensor *y = kiln_linear(ctx, x, w, NULL);
        kiln_graph *g = kiln_graph_new(ctx);
        KT_CHECK(g && !kiln_graph_add(g, y) && !kiln_graph_compute(g), "%s", kiln_last_error());
        KT_CHECK(!kiln_tensor_get_f32(y, first ? want : got, n), "%s", kiln_last_error());
        KT_CHECK(first || !memcmp(want, got, sizeof got), "%s: the product differs from the scalar one", v.name);
        first = false;
        kiln_ctx_rewind(ctx, mk);
    }
    llama_free(q);
    kiln_ctx_free(ctx);
}

/* ---- malformed checkpoints ---- */

enum edit { KEEP, DROP, RESHAPE, SET_I32, SET_F32, AS_F32 };

/* dir/model.safetensors with tensor name edited, the variant's configs
 * (quantize_config.json replaced by qcfg where given). */
static void write_edited(const char *from, const char *dir, const char *name, enum edit e, int64_t at, double value,
                         const char *qcfg) {
    char p[300], q[300];
    snprintf(p, sizeof p, "%s/model.safetensors", from);
    kiln_safetensors *st = kiln_safetensors_open(p);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t[64];
    const char *names[64];
    int n = 0;
    for (int i = 0; st && i < kiln_safetensors_count(st) && n < 64; i++) {
        kiln_safetensors_info in;
        kiln_safetensors_info_at(st, i, &in);
        kiln_tensor *x = kiln_safetensors_load(st, ctx, in.name);
        if (!strcmp(in.name, name)) {
            if (e == DROP) continue;
            if (e == RESHAPE) x = kiln_new_2d(ctx, kiln_tensor_dtype(x), kiln_tensor_dim(x, 0), kiln_tensor_dim(x, 1) + at);
            if (e == SET_I32) ((int32_t *)kiln_tensor_data(x))[at] = (int32_t)(int64_t)value;
            if (e == SET_F32 || e == AS_F32) {
                const int64_t k = kiln_tensor_numel(x);
                float *f = malloc((size_t)k * sizeof *f);
                kiln_tensor_get_f32(x, f, k);
                if (e == AS_F32) x = kiln_tensor_new(ctx, KILN_F32, kiln_tensor_ndim(x), kiln_tensor_shape(x));
                if (e == SET_F32) f[at] = (float)value;
                kiln_tensor_set_f32(x, f, k);
                free(f);
            }
        }
        t[n] = x, names[n++] = in.name;
    }
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    kiln_safetensors_save(q, t, names, n, NULL, 0);
    kiln_safetensors_close(st);
    kiln_ctx_free(ctx);
    const char *files[2] = {"config.json", "quantize_config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", from, files[i]);
        snprintf(q, sizeof q, "%s/%s", dir, files[i]);
        FILE *a = fopen(p, "rb"), *b = fopen(q, "wb");
        if (i == 1 && qcfg) fputs(qcfg, b);
        else if (a)
            for (int ch; (ch = fgetc(a)) != EOF;) fputc(ch, b);
        if (a) fclose(a);
        fclose(b);
        if (i == 1 && !a && !qcfg) unlink(q);
    }
}

KT_TEST(hf_gptq_refuses_malformed_checkpoints) {
    static const char L[] = "model.layers.0.self_attn.";
    static const struct {
        int variant;
        const char *tensor; /* after L */
        enum edit e;
        int64_t at;
        double value;
        const char *qcfg;
        kiln_status status;
        const char *msg;
    } cases[] = {
        {1, "q_proj.qweight", RESHAPE, 1, 0, NULL, KILN_ERR_SHAPE, "q_proj.qweight' is [8, 65], not [8, 64]"},
        {1, "k_proj.qzeros", RESHAPE, 1, 0, NULL, KILN_ERR_SHAPE, "k_proj.qzeros' is [2, 5], not [2, 4]"},
        {1, "k_proj.qweight", RESHAPE, -1, 0, NULL, KILN_ERR_SHAPE, "k_proj.qweight' is not [8, 32]"},
        {1, "q_proj.qweight", AS_F32, 0, 0, NULL, KILN_ERR_FORMAT, "q_proj.qweight' is F32, not I32"},
        {1, "v_proj.g_idx", SET_I32, 3, 2, NULL, KILN_ERR_FORMAT, "v_proj.g_idx[3] = 2 is not a group (0 to 1)"},
        {1, "v_proj.g_idx", SET_I32, 5, -1, NULL, KILN_ERR_FORMAT, "v_proj.g_idx[5] = -1 is not a group"},
        {1, "o_proj.g_idx", SET_I32, 0, 0, NULL, KILN_ERR_UNSUPPORTED, "columns in group"},
        {1, "o_proj.g_idx", DROP, 0, 0, NULL, KILN_ERR_FORMAT, "o_proj' has desc_act"},
        {1, "o_proj.qzeros", DROP, 0, 0, NULL, KILN_ERR_FORMAT, "no tensor 'model.layers.0.self_attn.o_proj.qzeros'"},
        {1, "q_proj.scales", SET_F32, 7, 0, NULL, KILN_ERR_FORMAT, "q_proj.scales[0, 7] = 0 is not a positive scale"},
        {1, "q_proj.scales", SET_F32, 64, -1, NULL, KILN_ERR_FORMAT, "q_proj.scales[1, 0] = -1"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 5, \"group_size\": 32}", KILN_ERR_UNSUPPORTED, "bits = 5"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"group_size\": 32, \"checkpoint_format\": \"marlin\"}",
         KILN_ERR_UNSUPPORTED, "checkpoint_format 'marlin'"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"quant_method\": \"awq\"}", KILN_ERR_UNSUPPORTED,
         "quant_method 'awq'"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"group_size\": 0}", KILN_ERR_FORMAT, "group_size = 0"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"group_size\": 16, \"desc_act\": false}",
         KILN_ERR_UNSUPPORTED, "multiples of 32"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"group_size\": 32, \"dynamic\": {\"-:.*\": {}}}",
         KILN_ERR_UNSUPPORTED, "dynamic"},
        {1, "q_proj.qweight", KEEP, 0, 0, "{\"bits\": 4, \"sym\": [1]}", KILN_ERR_FORMAT, "sym is not"},
        /* v1: a stored 15 is zero 16, what AutoGPTQ writes for zero 0 */
        {0, "k_proj.qzeros", SET_I32, 1, (double)0x7777777f, NULL, KILN_ERR_FORMAT,
         "zero point 16 (group 0, column 8) is out of range for 4 bits"},
        /* 8 bits: Q8_0 has no zero point */
        {2, "k_proj.qzeros", SET_I32, 0, (double)0x7f7f7f7e, NULL, KILN_ERR_UNSUPPORTED, "8-bit zero point 127"},
    };
    char dir[64];
    snprintf(dir, sizeof dir, "/tmp/kiln_gptq_XXXXXX");
    KT_REQUIRE(mkdtemp(dir), "mkdtemp");
    char name[128];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(name, sizeof name, "%s%s", L, cases[i].tensor);
        kt_set_context(cases[i].msg);
        write_edited(variants[cases[i].variant].dir, dir, name, cases[i].e, cases[i].at, cases[i].value,
                     cases[i].qcfg);
        kiln_ctx *ctx = kiln_ctx_new();
        KT_EXPECT_ERR(llama_infer_from_hf(ctx, dir, LLAMA_AS_STORED), cases[i].status, cases[i].msg);
        /* (8 bits dequantize whatever their zero, any group size) */
        if (cases[i].variant != 2 && !strstr(cases[i].msg, "multiples of 32"))
            KT_EXPECT_ERR(llama_from_hf(ctx, dir), cases[i].status, cases[i].msg);
        kiln_ctx_free(ctx);
    }
    kt_set_context(NULL);
    /* 8-bit asymmetric, declared in config.json's quantization_config */
    write_edited(variants[2].dir, dir, "", KEEP, 0, 0, NULL);
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    FILE *f = fopen(p, "w");
    KT_REQUIRE(f, "config.json");
    fprintf(f, "{\"hidden_size\": 64, \"intermediate_size\": 64, \"num_hidden_layers\": 1, \"num_attention_heads\": 4, "
               "\"num_key_value_heads\": 2, \"vocab_size\": 48, \"quantization_config\": {\"quant_method\": \"gptq\", "
               "\"bits\": 8, \"group_size\": 32, \"sym\": false}}");
    fclose(f);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(llama_infer_from_hf(ctx, dir, LLAMA_AS_STORED), KILN_ERR_UNSUPPORTED, "8 bits with sym = false");
    kiln_ctx_free(ctx);
    const char *files[3] = {"model.safetensors", "config.json", "quantize_config.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}
