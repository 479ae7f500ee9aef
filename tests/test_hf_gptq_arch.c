/* test_hf_gptq_arch.c — Hugging Face GPTQ checkpoints of the other
 * architectures (models/llama_arch.h's traits through llama_files.c's GPTQ
 * path): the tiny llama checkpoints of tests/fixtures/gptq/ rewritten as a
 * qwen2 (q/k/v_proj with float biases beside their GPTQ linears) and as a
 * phi3 (q, k, v fused into qkv_proj and gate, up into gate_up_proj, each
 * one GPTQ linear whose rows kiln splits), beside the same rewrite of
 * their float weights: dequantized, both are the float model exactly;
 * stored (GQ codes), their logits are the float model's within the int8
 * activations' error, and without the biases they are not. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FX "tests/fixtures/gptq/"
#define VOCAB 48

static const int32_t TOKENS[9] = {1, 47, 3, 3, 20, 0, 33, 12, 5};
static const char *const PARTS[4] = {"qweight", "qzeros", "scales", "g_idx"};

/* a and b one after the other along dim 0 (rows: a float weight's) or
 * along dim 1 (qweight, qzeros, scales: their output columns); 1-d
 * (g_idx, the same for both): a */
static kiln_tensor *join(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b, bool rows) {
    if (kiln_tensor_ndim(a) == 1) return a;
    const int64_t r = kiln_tensor_dim(a, 0), ca = kiln_tensor_dim(a, 1), cb = kiln_tensor_dim(b, 1);
    const size_t e = kiln_dtype_size(kiln_tensor_dtype(a));
    kiln_tensor *t = rows ? kiln_new_2d(ctx, kiln_tensor_dtype(a), r + kiln_tensor_dim(b, 0), ca)
                          : kiln_new_2d(ctx, kiln_tensor_dtype(a), r, ca + cb);
    char *o = kiln_tensor_data(t);
    const char *pa = kiln_tensor_data(a), *pb = kiln_tensor_data(b);
    if (rows) {
        memcpy(o, pa, kiln_tensor_nbytes(a)), memcpy(o + kiln_tensor_nbytes(a), pb, kiln_tensor_nbytes(b));
    } else {
        for (int64_t i = 0; i < r; i++) {
            memcpy(o + (size_t)(i * (ca + cb)) * e, pa + (size_t)(i * ca) * e, (size_t)ca * e);
            memcpy(o + (size_t)(i * (ca + cb) + ca) * e, pb + (size_t)(i * cb) * e, (size_t)cb * e);
        }
    }
    return t;
}

static void copy_text(const char *from, const char *to, const char *model_type) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n = a ? fread(buf, 1, sizeof buf - 1, a) : 0;
    buf[n] = '\0';
    char *m = model_type ? strstr(buf, "\"llama\"") : NULL;
    if (m) fprintf(b, "%.*s\"%s\"%s", (int)(m - buf), buf, model_type, m + 7);
    else fputs(buf, b);
    if (a) fclose(a);
    fclose(b);
}

/* src (a GPTQ directory, or its float ref/) rewritten into dir as
 * model_type arch: qwen2 adds q/k/v biases (seeded, the same for both);
 * phi3 fuses q|k|v and gate|up. */
static bool rewrite(const char *src, const char *dir, const char *arch) {
    static const char *const fuse[2][4] = {{"qkv_proj", "q_proj", "k_proj", "v_proj"},
                                           {"gate_up_proj", "gate_proj", "up_proj", NULL}};
    char p[300], q[300];
    snprintf(p, sizeof p, "%s/model.safetensors", src);
    kiln_safetensors *st = kiln_safetensors_open(p);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t[64];
    char names[64][96];
    int n = 0;
    const bool phi3 = !strcmp(arch, "phi3");
    for (int i = 0; st && i < kiln_safetensors_count(st) && n < 60; i++) {
        kiln_safetensors_info in;
        kiln_safetensors_info_at(st, i, &in);
        if (phi3 && (strstr(in.name, "_proj.") && !strstr(in.name, "o_proj") && !strstr(in.name, "down_proj")))
            continue; /* fused below */
        t[n] = kiln_safetensors_load(st, ctx, in.name);
        snprintf(names[n++], sizeof names[0], "%s", in.name);
    }
    const bool gptq = st && kiln_safetensors_find(st, "model.layers.0.self_attn.q_proj.qweight") >= 0;
    for (int f = 0; phi3 && f < 2; f++) {
        const char *at = f ? "mlp" : "self_attn";
        for (int k = 0; k < (gptq ? 4 : 1); k++) {
            kiln_tensor *x = NULL;
            for (int j = 1; j < 4 && fuse[f][j]; j++) {
                char nm[128];
                snprintf(nm, sizeof nm, "model.layers.0.%s.%s.%s", at, fuse[f][j], gptq ? PARTS[k] : "weight");
                kiln_tensor *y = kiln_safetensors_load(st, ctx, nm);
                if (!y) return false;
                if (x && gptq && k == 3 && memcmp(kiln_tensor_data(x), kiln_tensor_data(y), kiln_tensor_nbytes(x)))
                    return false; /* one g_idx for the fused linear */
                x = x ? join(ctx, x, y, !gptq) : y;
            }
            t[n] = x;
            snprintf(names[n++], sizeof names[0], "model.layers.0.%s.%s.%s", at, fuse[f][0],
                     gptq ? PARTS[k] : "weight");
        }
    }
    if (!strcmp(arch, "qwen2")) {
        static const char *const b[3] = {"q_proj", "k_proj", "v_proj"};
        const int64_t rows[3] = {64, 32, 32};
        for (int k = 0; k < 3; k++) {
            t[n] = kiln_new_1d(ctx, KILN_F32, rows[k]);
            if (kiln_tensor_fill_randn(t[n], 40 + (uint64_t)k, 0.0, 0.3)) return false;
            snprintf(names[n++], sizeof names[0], "model.layers.0.self_attn.%s.bias", b[k]);
        }
    }
    const char *nm[64];
    for (int i = 0; i < n; i++) nm[i] = names[i];
    snprintf(q, sizeof q, "%s/model.safetensors", dir);
    const bool ok = st && !kiln_safetensors_save(q, t, nm, n, NULL, 0);
    kiln_safetensors_close(st);
    kiln_ctx_free(ctx);
    snprintf(p, sizeof p, "%s/config.json", src);
    snprintf(q, sizeof q, "%s/config.json", dir);
    copy_text(p, q, arch);
    snprintf(p, sizeof p, "%s/quantize_config.json", src);
    snprintf(q, sizeof q, "%s/quantize_config.json", dir);
    if (access(p, F_OK) == 0) copy_text(p, q, NULL);
    return ok;
}

static void remove_dir(const char *dir) {
    static const char *const files[3] = {"model.safetensors", "config.json", "quantize_config.json"};
    char p[300];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, files[i]);
        unlink(p);
    }
    rmdir(dir);
}

KT_TEST(hf_gptq_qwen2_and_phi3_checkpoints) {
    static const struct { const char *variant, *arch; } cases[] = {
        {FX "v1_4bit_g32_sym", "qwen2"},
        {FX "v2_4bit_g32_asym_act", "qwen2"},
        {FX "v1_4bit_g32_sym", "phi3"},
    };
    const int T = 9;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char qdir[64], fdir[64], ref[300];
        snprintf(qdir, sizeof qdir, "/tmp/kiln_gptq_arch_XXXXXX");
        snprintf(fdir, sizeof fdir, "/tmp/kiln_gptq_arch_XXXXXX");
        KT_REQUIRE(mkdtemp(qdir) && mkdtemp(fdir), "mkdtemp");
        snprintf(ref, sizeof ref, "%s/ref", cases[c].variant);
        kt_set_context(cases[c].arch);
        KT_REQUIRE(rewrite(cases[c].variant, qdir, cases[c].arch) && rewrite(ref, fdir, cases[c].arch),
                   "%s: rewriting as %s: %s", cases[c].variant, cases[c].arch, kiln_last_error());
        kiln_ctx *ctx = kiln_ctx_new(), *ctx2 = kiln_ctx_new(), *ctx3 = kiln_ctx_new();
        /* dequantized: the float model's parameters exactly */
        llama *d = llama_from_hf(ctx, qdir), *f = llama_from_hf(ctx2, fdir);
        KT_REQUIRE(d && f, "%s: %s", cases[c].variant, kiln_last_error());
        KT_CHECK(d->n_params == f->n_params, "%d parameters, not %d", d->n_params, f->n_params);
        for (int i = 0; i < d->n_params && i < f->n_params; i++) {
            const int64_t n = kiln_tensor_numel(d->params[i]);
            float *x = malloc((size_t)n * 4), *y = malloc((size_t)n * 4);
            KT_OK(kiln_tensor_get_f32(d->params[i], x, n));
            KT_OK(kiln_tensor_get_f32(f->params[i], y, n));
            KT_CHECK(!memcmp(x, y, (size_t)n * 4), "%s: %s differs", cases[c].variant, kiln_tensor_name(d->params[i]));
            free(x), free(y);
        }
        /* stored: GQ codes (a fused linear's rows split), logits within the int8 activations' error */
        llama *q = llama_infer_from_hf(ctx3, qdir, LLAMA_AS_STORED);
        KT_REQUIRE(q, "%s: %s", cases[c].variant, kiln_last_error());
        const llama_layer *y = &q->layers[0];
        KT_CHECK(kiln_tensor_dtype(y->wk) == KILN_GQ4_32 && kiln_tensor_dtype(y->w3) == KILN_GQ4_32,
                 "weights %s", kiln_dtype_name(kiln_tensor_dtype(y->wk)));
        float *a = llama_test_logits(q, TOKENS, T), *b = llama_test_logits(f, TOKENS, T);
        KT_REQUIRE(a && b, "logits: %s", kiln_last_error());
        const double worst = llama_test_max_diff(a, b, T * VOCAB);
        const double scale = llama_test_max_diff(b, NULL, T * VOCAB);
        KT_CHECK(worst <= 0.02 * scale && scale > 0.5, "%s: logits differ by %g (largest %g)", cases[c].variant, worst,
                 scale);
        if (y->bqkv) { /* the biases count */
            kiln_tensor_fill(y->bqkv, 0.0);
            float *z = llama_test_logits(q, TOKENS, T);
            KT_CHECK(z && llama_test_max_diff(z, b, T * VOCAB) > 0.05 * scale,
                     "%s: the logits without biases match too", cases[c].variant);
            free(z);
        }
        KT_CHECK(!strcmp(cases[c].arch, "qwen2") == (y->bqkv != NULL), "%s: biases", cases[c].arch);
        free(a), free(b);
        llama_free(q), llama_free(d), llama_free(f);
        kiln_ctx_free(ctx), kiln_ctx_free(ctx2), kiln_ctx_free(ctx3);
        remove_dir(qdir), remove_dir(fdir);
    }
    kt_set_context(NULL);
}
