/* test_llama_mix.c — kiln's writer makes llama-quantize's mixes
 * (models/llama_mix.h, llama_save_gguf_mix): the F32 reference llama of
 * tests/fixtures/gguf-ref/ written in each mix llama.cpp's files there
 * were made in gives every tensor llama.cpp's type and, kiln's quantizers
 * being ggml's, the same bytes; the rules on a TinyLlama-shaped config and
 * narrow widths; a random model made in its mix's types (generate
 * --make-random's way) loads back with them and gives the same logits; a
 * file loaded as stored is written back byte for byte; and the types or
 * mixes the writer cannot make are refused before a file exists. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#define REF "tests/fixtures/gguf-ref/llama-s1-"

/* Every tensor of want is in got with the same type and shape (and the
 * same bytes where same_bytes), both files the same tensor count and
 * general.file_type. */
static void same_file(const char *got_path, const char *want_path, bool same_bytes) {
    kiln_gguf *got = kiln_gguf_open(got_path), *want = kiln_gguf_open(want_path);
    KT_NOTNULL(got);
    KT_NOTNULL(want);
    int64_t ft_got = -1, ft_want = -2;
    KT_OK(kiln_gguf_get_int(got, "general.file_type", &ft_got));
    KT_OK(kiln_gguf_get_int(want, "general.file_type", &ft_want));
    KT_CHECK(ft_got == ft_want, "%s: general.file_type %lld, llama.cpp's %lld", want_path, (long long)ft_got,
             (long long)ft_want);
    KT_CHECK(kiln_gguf_tensor_count(got) == kiln_gguf_tensor_count(want), "%s: %d tensors, llama.cpp's %d", want_path,
             kiln_gguf_tensor_count(got), kiln_gguf_tensor_count(want));
    for (int i = 0; i < kiln_gguf_tensor_count(want); i++) {
        kiln_gguf_tensor_info w, g;
        KT_OK(kiln_gguf_tensor_info_at(want, i, &w));
        int j = kiln_gguf_find_tensor(got, w.name);
        KT_CHECK(j >= 0, "%s: no %s", want_path, w.name);
        if (j < 0) continue;
        KT_OK(kiln_gguf_tensor_info_at(got, j, &g));
        KT_CHECK(g.ggml_type == w.ggml_type && g.ne[0] == w.ne[0] && g.ne[1] == w.ne[1], "%s: %s is %s, llama.cpp's %s",
                 want_path, w.name, g.type_name, w.type_name);
        if (same_bytes && g.ggml_type == w.ggml_type && g.nbytes == w.nbytes)
            KT_CHECK(!memcmp(g.data, w.data, w.nbytes), "%s: %s (%s): other bytes than llama.cpp's", want_path, w.name,
                     w.type_name);
    }
    kiln_gguf_close(got);
    kiln_gguf_close(want);
}

/* The F32 reference written in each mix: llama-quantize's types, bytes
 * and file type (kiln's quantizers of these types are ggml's, byte for byte). */
KT_TEST(llama_mix_matches_llama_quantize) {
    const char *mixes[] = {"Q4_K_M", "Q5_K_M", "Q6_K", "IQ4_NL", "Q4_0", "Q8_0"};
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_from_gguf(ctx, REF "F32.gguf");
    KT_NOTNULL(m);
    for (int k = 0; k < 6; k++) {
        kt_set_context(mixes[k]);
        char want[128];
        snprintf(want, sizeof want, REF "%s.gguf", mixes[k]);
        const char *path = kt_tmp_path("mix.gguf");
        KT_OK(llama_save_gguf_mix(m, NULL, path, llama_ftype_parse(mixes[k])));
        same_file(path, want, true);
        unlink(path);
    }
    kt_set_context(NULL);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* A file loaded with each tensor as stored is written back as it was. */
KT_TEST(llama_mix_as_stored_round_trip) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_infer_from_gguf(ctx, REF "Q4_K_M.gguf", LLAMA_AS_STORED);
    KT_NOTNULL(m);
    const char *path = kt_tmp_path("stored.gguf");
    KT_OK(llama_save_gguf_mix(m, NULL, path, LLAMA_FTYPE_AS_STORED));
    same_file(path, REF "Q4_K_M.gguf", true);
    unlink(path);
    llama_free(m);
    kiln_ctx_free(ctx);
}

static kiln_dtype mix_of(llama_ftype f, const llama_config *c, const char *name, int64_t cols) {
    return llama_mix_dtype(f, c, false, name, cols);
}

/* The rules where the reference files cannot show them: TinyLlama's shape
 * (22 layers, 8 heads a kv head), tied heads, narrow widths. */
KT_TEST(llama_mix_rules) {
    llama_config c = llama_defaults();
    c.layers = 22, c.heads = 32, c.kv_heads = 4, c.dim = 2048, c.hidden = 5632, c.vocab = 32000;
    const llama_ftype q4m = LLAMA_FTYPE_MOSTLY_Q4_K_M;
    char name[64];
    /* Q4_K_M's "more bits" layers: 0, 1, 4, 7, 10, 13, 16, 19, 20, 21 */
    const int more[22] = {1, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 0, 0, 1, 1, 1};
    for (int l = 0; l < 22; l++) {
        snprintf(name, sizeof name, "blk.%d.attn_v.weight", l);
        KT_CHECK(mix_of(q4m, &c, name, 2048) == (more[l] ? KILN_Q6_K : KILN_Q4_K), "Q4_K_M %s", name);
        snprintf(name, sizeof name, "blk.%d.ffn_down.weight", l);
        KT_CHECK(mix_of(q4m, &c, name, 5632) == (more[l] ? KILN_Q6_K : KILN_Q4_K), "Q4_K_M %s", name);
        snprintf(name, sizeof name, "blk.%d.attn_q.weight", l);
        KT_CHECK(mix_of(q4m, &c, name, 2048) == KILN_Q4_K, "Q4_K_M %s", name);
    }
    KT_CHECK(mix_of(q4m, &c, "output.weight", 2048) == KILN_Q6_K, "Q4_K_M output");
    KT_CHECK(mix_of(q4m, &c, "token_embd.weight", 2048) == KILN_Q4_K, "Q4_K_M token_embd");
    KT_CHECK(llama_mix_dtype(q4m, &c, true, "token_embd.weight", 2048) == KILN_Q6_K, "tied token_embd");
    /* IQ4_XS with n_gqa 8: attn_v Q5_K; ffn_down Q5_K on the first eighth (layers 0, 1) */
    const llama_ftype iq = LLAMA_FTYPE_MOSTLY_IQ4_XS;
    KT_CHECK(mix_of(iq, &c, "blk.5.attn_v.weight", 2048) == KILN_Q5_K, "IQ4_XS attn_v");
    KT_CHECK(mix_of(iq, &c, "blk.1.ffn_down.weight", 5632) == KILN_Q5_K, "IQ4_XS ffn_down 1");
    KT_CHECK(mix_of(iq, &c, "blk.2.ffn_down.weight", 5632) == KILN_IQ4_XS, "IQ4_XS ffn_down 2");
    KT_CHECK(mix_of(iq, &c, "output.weight", 2048) == KILN_Q6_K, "IQ4_XS output");
    /* Q3_K_M, Q2_K, Q4_K_S */
    const llama_ftype q3m = LLAMA_FTYPE_MOSTLY_Q3_K_M, q2 = LLAMA_FTYPE_MOSTLY_Q2_K, q4s = LLAMA_FTYPE_MOSTLY_Q4_K_S;
    KT_CHECK(mix_of(q3m, &c, "blk.1.attn_v.weight", 2048) == KILN_Q5_K, "Q3_K_M attn_v 1");
    KT_CHECK(mix_of(q3m, &c, "blk.2.attn_v.weight", 2048) == KILN_Q4_K, "Q3_K_M attn_v 2");
    KT_CHECK(mix_of(q3m, &c, "blk.0.ffn_down.weight", 5632) == KILN_Q5_K, "Q3_K_M ffn_down 0");
    KT_CHECK(mix_of(q3m, &c, "blk.1.ffn_down.weight", 5632) == KILN_Q4_K, "Q3_K_M ffn_down 1");
    KT_CHECK(mix_of(q3m, &c, "blk.1.attn_output.weight", 2048) == KILN_Q4_K, "Q3_K_M attn_output");
    KT_CHECK(mix_of(q3m, &c, "blk.1.ffn_up.weight", 2048) == KILN_Q3_K, "Q3_K_M ffn_up");
    KT_CHECK(mix_of(q2, &c, "blk.9.attn_v.weight", 2048) == KILN_Q4_K, "Q2_K attn_v");
    KT_CHECK(mix_of(q2, &c, "blk.9.ffn_down.weight", 5632) == KILN_Q3_K, "Q2_K ffn_down");
    KT_CHECK(mix_of(q2, &c, "blk.9.attn_output.weight", 2048) == KILN_Q3_K, "Q2_K attn_output");
    KT_CHECK(mix_of(q4s, &c, "blk.3.attn_v.weight", 2048) == KILN_Q5_K, "Q4_K_S attn_v 3");
    KT_CHECK(mix_of(q4s, &c, "blk.4.attn_v.weight", 2048) == KILN_Q4_K, "Q4_K_S attn_v 4");
    KT_CHECK(mix_of(LLAMA_FTYPE_MOSTLY_Q8_0, &c, "output.weight", 2048) == KILN_Q8_0, "Q8_0 output");
    KT_CHECK(mix_of(LLAMA_FTYPE_MOSTLY_F16, &c, "output.weight", 2048) == KILN_F16, "F16 output");
    /* widths not whole blocks: llama.cpp's fallbacks */
    c.layers = 2, c.heads = 4, c.kv_heads = 2, c.dim = 64, c.hidden = 128;
    KT_CHECK(mix_of(q4m, &c, "blk.0.attn_q.weight", 64) == KILN_Q5_0, "Q4_K narrow");
    KT_CHECK(mix_of(q4m, &c, "blk.1.attn_v.weight", 64) == KILN_Q8_0, "Q6_K narrow");
    KT_CHECK(mix_of(q4m, &c, "output.weight", 64) == KILN_Q8_0, "output narrow");
    KT_CHECK(mix_of(LLAMA_FTYPE_MOSTLY_Q5_K_S, &c, "blk.0.ffn_up.weight", 64) == KILN_Q5_1, "Q5_K narrow");
    KT_CHECK(mix_of(q2, &c, "blk.0.ffn_gate.weight", 64) == KILN_Q4_0, "Q2_K narrow");
    KT_CHECK(mix_of(iq, &c, "blk.0.ffn_gate.weight", 64) == KILN_IQ4_NL, "IQ4_XS narrow");
    KT_CHECK(mix_of(LLAMA_FTYPE_MOSTLY_Q4_0, &c, "blk.0.ffn_gate.weight", 48) == KILN_F16, "Q4_0 width 48");
    /* names: llama_ftype_names lists each mix once, each parsed back */
    int listed = 0;
    for (const char *p = llama_ftype_names(); *p; listed++) {
        size_t len = strcspn(p, "|");
        char one[16] = {0};
        memcpy(one, p, len < 15 ? len : 15);
        llama_ftype f = llama_ftype_parse(one);
        KT_CHECK(f != LLAMA_FTYPE_UNKNOWN && !strcmp(llama_ftype_name(f), one), "listed mix %s", one);
        p += len + (p[len] == '|');
    }
    KT_CHECK(listed == 20, "%d mixes listed", listed);
    KT_CHECK(llama_ftype_parse("q4_k_m") == q4m && llama_ftype_parse("Q4_K_X") == LLAMA_FTYPE_UNKNOWN, "parse");
    KT_CHECK(!strcmp(llama_ftype_name(LLAMA_FTYPE_MOSTLY_IQ4_XS), "IQ4_XS") && !llama_ftype_name((llama_ftype)19),
             "names");
    KT_CHECK(llama_param_gguf_name("layers.3.feed_forward.w2.weight", name, sizeof name) &&
                 !strcmp(name, "blk.3.ffn_down.weight"),
             "param name %s", name);
    KT_CHECK(llama_param_gguf_name("tok_embeddings.weight", name, sizeof name) &&
                 !strcmp(name, "token_embd.weight") && !llama_param_gguf_name("layers.0.output.weight", name, 64),
             "param names");
}

static kiln_dtype chooser(void *user, const char *param, int64_t rows, int64_t cols) {
    const llama_config *c = user;
    (void)rows;
    char name[64];
    return llama_param_gguf_name(param, name, sizeof name)
               ? llama_mix_dtype(LLAMA_FTYPE_MOSTLY_Q4_K_M, c, false, name, cols)
               : KILN_F32;
}

/* generate --make-random's way: a model made in the mix's types, drawn,
 * written with the mix and loaded as stored, has each weight in its type
 * and the same logits. */
KT_TEST(llama_mix_random_q4_k_m_loads_back) {
    llama_config c = llama_defaults();
    c.vocab = 300, c.context = 16, c.layers = 2, c.heads = 4, c.kv_heads = 1, c.dim = 256, c.hidden = 512;
    kiln_ctx *ctx = kiln_ctx_new(), *ctx2 = kiln_ctx_new();
    llama *m = llama_new_inference_typed(ctx, &c, chooser, &c, false);
    KT_NOTNULL(m);
    KT_OK(llama_init_random(m, 7));
    const char *path = kt_tmp_path("random.gguf");
    KT_OK(llama_save_gguf_mix(m, NULL, path, LLAMA_FTYPE_MOSTLY_Q4_K_M));
    llama *b = llama_infer_from_gguf(ctx2, path, LLAMA_AS_STORED);
    KT_NOTNULL(b);
    KT_CHECK(kiln_tensor_dtype(b->output) == KILN_Q6_K && kiln_tensor_dtype(b->tok_embeddings) == KILN_Q4_K &&
                 kiln_tensor_dtype(b->layers[0].wv) == KILN_Q4_K && kiln_tensor_dtype(b->layers[1].wv) == KILN_Q6_K &&
                 kiln_tensor_dtype(b->layers[1].w2) == KILN_Q6_K && kiln_tensor_dtype(b->layers[1].wq) == KILN_Q4_K,
             "types %s %s %s %s", kiln_dtype_name(kiln_tensor_dtype(b->output)),
             kiln_dtype_name(kiln_tensor_dtype(b->tok_embeddings)), kiln_dtype_name(kiln_tensor_dtype(b->layers[0].wv)),
             kiln_dtype_name(kiln_tensor_dtype(b->layers[1].wv)));
    const int32_t ids[5] = {1, 17, 250, 3, 99};
    float *za = llama_test_logits(m, ids, 5), *zb = llama_test_logits(b, ids, 5);
    KT_NOTNULL(za);
    KT_NOTNULL(zb);
    double d = llama_test_max_diff(za, zb, 5 * c.vocab), big = llama_test_max_diff(za, NULL, 5 * c.vocab);
    KT_CHECK(d == 0 && big > 0 && isfinite(big), "logits differ by %g (max %g)", d, big);
    free(za), free(zb);
    unlink(path);
    llama_free(m), llama_free(b);
    kiln_ctx_free(ctx), kiln_ctx_free(ctx2);
}

/* What the writer cannot make is refused before a file exists. */
KT_TEST(llama_mix_refused) {
    llama_config c = llama_defaults();
    c.vocab = 64, c.context = 8, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.dim = 64, c.hidden = 96;
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_new(ctx, &c, 3);
    KT_NOTNULL(m);
    const char *path = kt_tmp_path("refused.gguf");
    unlink(path);
    KT_CHECK(llama_save_gguf(m, path, KILN_NF4) == KILN_ERR_DTYPE && strstr(kiln_last_error(), "nf4") &&
                 strstr(kiln_last_error(), path),
             "NF4: %s", kiln_last_error());
    KT_CHECK(llama_save_gguf(m, path, KILN_Q8_K) == KILN_ERR_DTYPE, "Q8_K: %s", kiln_last_error());
    KT_CHECK(llama_save_gguf_mix(m, NULL, path, (llama_ftype)19) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "llama_ftype 19"),
             "ftype 19: %s", kiln_last_error());
    /* pure Q4_K needs widths of whole 256-blocks; the mix falls back instead */
    KT_CHECK(llama_save_gguf(m, path, KILN_Q4_K) == KILN_ERR_SHAPE && strstr(kiln_last_error(), "token_embd.weight"),
             "Q4_K: %s", kiln_last_error());
    KT_CHECK(access(path, F_OK) != 0, "%s was written", path);
    KT_OK(llama_save_gguf_mix(m, NULL, path, LLAMA_FTYPE_MOSTLY_Q4_K_M));
    kiln_gguf *g = kiln_gguf_open(path);
    KT_NOTNULL(g);
    kiln_gguf_tensor_info ti;
    KT_OK(kiln_gguf_tensor_info_at(g, kiln_gguf_find_tensor(g, "blk.0.ffn_down.weight"), &ti));
    KT_CHECK(ti.kiln_dtype == KILN_Q8_0, "ffn_down (96 wide, Q6_K's fallback): %s", ti.type_name);
    kiln_gguf_close(g);
    unlink(path);
    llama_free(m);
    kiln_ctx_free(ctx);
}
