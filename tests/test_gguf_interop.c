/* test_gguf_interop.c — what kiln writes into a GGUF is what llama.cpp
 * needs to load it (llama.cpp itself cannot run here; it was run by hand,
 * see the branch's report): the llama writer's hyperparameter keys, and a
 * tokenizer whose arrays agree with each other and with the embedding
 * (one token per row, unique spellings, in-range special ids whose tokens
 * are control tokens, the newline's byte token); a tokenizer's special
 * ids and flags through GGUF; the end-of-turn tokens found by spelling. */
#include "kt.h"
#include "llama_files.h"
#include "test_llama_util.h"

#include <unistd.h>

static llama *tiny(kiln_ctx *ctx, int64_t vocab) {
    llama_config c = llama_defaults();
    c.vocab = vocab, c.context = 16, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.dim = 32, c.hidden = 64;
    llama *m = llama_new(ctx, &c, 1);
    if (m) llama_test_randomize(m, 3, 0.1);
    return m;
}

/* llama.cpp's llama_model_loader refuses a llama file without these. */
static void expect_llama_keys(kiln_gguf *g, int64_t vocab) {
    static const char *keys[] = {"llama.context_length", "llama.embedding_length", "llama.block_count",
                                 "llama.feed_forward_length", "llama.attention.head_count",
                                 "llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon",
                                 "llama.rope.dimension_count", "llama.rope.freq_base", "llama.vocab_size"};
    KT_CHECK(!strcmp(kiln_gguf_get_string(g, "general.architecture", NULL), "llama"), "architecture");
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        KT_CHECK(kiln_gguf_find_key(g, keys[i]) >= 0, "%s", keys[i]);
    int64_t v;
    KT_OK(kiln_gguf_get_int(g, "llama.vocab_size", &v));
    KT_CHECK(v == vocab, "vocab_size %lld", (long long)v);
}

/* The tokenizer arrays: one per embedding row, agreeing with each other. */
static void expect_tokenizer(kiln_gguf *g, int64_t vocab, const char *model) {
    const char *m = kiln_gguf_get_string(g, "tokenizer.ggml.model", NULL);
    KT_CHECK(m && !strcmp(m, model), "tokenizer.ggml.model '%s'", m ? m : "(none)");
    kiln_gguf_type et;
    uint64_t n = 0, nt = 0, ns = 0;
    KT_OK(kiln_gguf_get_array(g, "tokenizer.ggml.tokens", &et, &n));
    KT_CHECK(et == KILN_GGUF_STRING && (int64_t)n == vocab, "%llu tokens for %lld rows", (unsigned long long)n,
             (long long)vocab);
    KT_OK(kiln_gguf_get_array(g, "tokenizer.ggml.token_type", &et, &nt));
    KT_CHECK(nt == n, "%llu token types", (unsigned long long)nt);
    if (!strcmp(model, "llama")) {
        KT_OK(kiln_gguf_get_array(g, "tokenizer.ggml.scores", &et, &ns));
        KT_CHECK(ns == n, "%llu scores", (unsigned long long)ns);
    } else {
        KT_CHECK(kiln_gguf_find_key(g, "tokenizer.ggml.merges") >= 0 &&
                     kiln_gguf_get_string(g, "tokenizer.ggml.pre", NULL), "BPE: merges and pre");
    }
    for (uint64_t i = 0; i < n; i++) /* unique spellings: llama.cpp maps each to one id */
        for (uint64_t j = i + 1; j < n; j++) {
            size_t a, b;
            const char *x = kiln_gguf_array_string(g, "tokenizer.ggml.tokens", i, &a),
                       *y = kiln_gguf_array_string(g, "tokenizer.ggml.tokens", j, &b);
            KT_REQUIRE(a != b || memcmp(x, y, a), "ids %llu and %llu are both '%s'", (unsigned long long)i,
                       (unsigned long long)j, x);
        }
    const char *ids[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
    for (int k = 0; k < 2; k++) {
        int64_t id, ty;
        KT_OK(kiln_gguf_get_int(g, ids[k], &id));
        KT_REQUIRE(id >= 0 && id < vocab, "%s %lld", ids[k], (long long)id);
        KT_OK(kiln_gguf_array_int(g, "tokenizer.ggml.token_type", (uint64_t)id, &ty));
        KT_CHECK(ty == 3, "%s's token is of type %lld, not control", ids[k], (long long)ty);
    }
}

KT_TEST(gguf_interop_llama_writer_carries_a_tokenizer) {
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = tiny(ctx, 300);
    KT_NOTNULL(m);
    const char *p = kt_tmp_path("bytes.gguf");
    KT_OK(llama_save_gguf(m, p, KILN_Q8_0));
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    expect_llama_keys(g, 300);
    expect_tokenizer(g, 300, "llama");
    size_t len;
    const char *nl = kiln_gguf_array_string(g, "tokenizer.ggml.tokens", 3 + '\n', &len);
    KT_REQUIRE(nl && !strcmp(nl, "<0x0A>"), "the newline's byte token"); /* llama.cpp looks it up on load */
    kiln_tokenizer *t = kiln_tokenizer_from_gguf(g);
    KT_NOTNULL(t);
    KT_CHECK(kiln_tokenizer_bos(t) == 1 && kiln_tokenizer_eos(t) == 2 && kiln_tokenizer_add_bos(t), "bos/eos");
    int32_t ids[64];
    int64_t n;
    char back[64];
    KT_OK(kiln_tokenizer_encode(t, "a b\n", 4, false, ids, 64, &n));
    KT_CHECK(n == 5 && ids[0] == 259 && ids[1] == 3 + 'a' && ids[2] == 259 && ids[4] == 3 + '\n', "%lld ids",
             (long long)n);
    ids[n++] = 299; /* unused: spells nothing */
    KT_OK(kiln_tokenizer_decode(t, ids, n, back, sizeof back, &len));
    KT_CHECK(len == 4 && !memcmp(back, "a b\n", 4), "decode '%.*s'", (int)len, back);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
    unlink(p);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* A byte-level BPE tokenizer of 260 ids on a model of 300 rows: padded. */
KT_TEST(gguf_interop_tokenizer_padded_to_the_model) {
    char json[40000], *o = json;
    o += sprintf(o, "{\"added_tokens\": [{\"id\": 256, \"content\": \"<|begin_of_text|>\", \"special\": true}, {\"id\": "
                    "257, \"content\": \"<|eot_id|>\", \"special\": true}, {\"id\": 259, \"content\": \"<x>\"}], "
                    "\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {");
    for (int b = 0, k = 0; b < 256; b++) { /* GPT-2's byte alphabet */
        bool pr = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
        int cp = pr ? b : 256 + k++;
        o += sprintf(o, "\"\\u%04x\": %d, ", cp, b);
    }
    o += sprintf(o, "\"ab\": 258}, \"merges\": [\"a b\"]}}");
    const char *pj = kt_tmp_path("tok.json");
    FILE *f = fopen(pj, "w");
    fputs(json, f);
    fclose(f);
    kiln_tokenizer *t = kiln_tokenizer_from_json(pj);
    unlink(pj);
    KT_NOTNULL(t);
    kiln_tokenizer_set_bos_eos(t, 256, 257);
    KT_CHECK(kiln_tokenizer_special(t, KILN_TOK_EOT) == -1 && kiln_tokenizer_is_eog(t, 257), "eog by eos");
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = tiny(ctx, 300);
    const char *p = kt_tmp_path("bpe.gguf");
    KT_OK(llama_save_gguf_tok(m, t, p, KILN_F32));
    kiln_gguf *g = kiln_gguf_open(p);
    KT_NOTNULL(g);
    expect_llama_keys(g, 300);
    expect_tokenizer(g, 300, "gpt2");
    int64_t ty;
    size_t len;
    KT_OK(kiln_gguf_array_int(g, "tokenizer.ggml.token_type", 299, &ty));
    KT_CHECK(ty == 5 && !strcmp(kiln_gguf_array_string(g, "tokenizer.ggml.tokens", 299, &len), "[PAD299]"), "pad");
    kiln_tokenizer *u = kiln_tokenizer_from_gguf(g);
    KT_NOTNULL(u);
    int32_t ids[16];
    int64_t n;
    KT_OK(kiln_tokenizer_encode(u, "ab<|eot_id|>", 12, true, ids, 16, &n));
    KT_CHECK(n == 2 && ids[0] == 258 && ids[1] == 257 && kiln_tokenizer_is_eog(u, 257), "%lld ids", (long long)n);
    /* a user-defined token (an added token not marked special) is found in text even without special */
    KT_OK(kiln_gguf_array_int(g, "tokenizer.ggml.token_type", 259, &ty));
    KT_OK(kiln_tokenizer_encode(u, "<x>a<|eot_id|>", 14, false, ids, 16, &n));
    KT_CHECK(ty == 4 && n == 12 && ids[0] == 259 && ids[1] == 'a' && ids[2] == '<', "type %lld, %lld ids", (long long)ty,
             (long long)n);
    kiln_tokenizer *big = kiln_tokenizer_bytes(400); /* more ids than the model has rows */
    KT_CHECK(llama_save_gguf_tok(m, big, p, KILN_F32) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "more than the vocabulary of 300"), "%s", kiln_last_error());
    KT_EXPECT_ERR(kiln_tokenizer_bytes(2), KILN_ERR_ARG, "3 or more");
    kiln_tokenizer_free(big);
    kiln_tokenizer_free(u);
    kiln_tokenizer_free(t);
    kiln_gguf_close(g);
    unlink(p);
    llama_free(m);
    kiln_ctx_free(ctx);
}

/* The special ids GGUF names, and the flags, through the writer and back;
 * llama.cpp's SentencePiece defaults (unk 0, bos 1, eos 2) where a key is
 * absent; the end of a turn found by its spelling where no id names it
 * (or one out of range, which llama.cpp ignores too). */
KT_TEST(gguf_interop_special_ids_round_trip) {
    const char *toks[] = {"<unk>", "<s>", "</s>", "<|im_end|>", "<pad>", "<0x0A>", "a"};
    int32_t types[] = {2, 3, 3, 3, 3, 6, 1};
    float scores[7] = {0};
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    KT_OK(kiln_gguf_set_string(w, "tokenizer.ggml.model", "llama"));
    KT_OK(kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, 7));
    KT_OK(kiln_gguf_set_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, 7));
    KT_OK(kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, 7));
    KT_OK(kiln_gguf_set_int(w, "tokenizer.ggml.padding_token_id", KILN_GGUF_UINT32, 4));
    KT_OK(kiln_gguf_set_int(w, "tokenizer.ggml.add_bos_token", KILN_GGUF_BOOL, 0));
    KT_OK(kiln_gguf_set_int(w, "tokenizer.ggml.add_eos_token", KILN_GGUF_BOOL, 1));
    KT_OK(kiln_gguf_set_int(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, 2));
    KT_OK(kiln_gguf_set_int(w, "tokenizer.ggml.eot_token_id", KILN_GGUF_UINT32, 1000)); /* no such id: ignored */
    const char *p = kt_tmp_path("special.gguf");
    KT_OK(kiln_gguf_writer_save(w, p));
    kiln_gguf_writer_free(w);
    for (int pass = 0; pass < 2; pass++) { /* as written by hand, then as kiln writes it back */
        kiln_gguf *g = kiln_gguf_open(p);
        KT_NOTNULL(g);
        kiln_tokenizer *t = kiln_tokenizer_from_gguf(g);
        kiln_gguf_close(g);
        KT_NOTNULL(t);
        KT_CHECK(kiln_tokenizer_special(t, KILN_TOK_PAD) == 4 && kiln_tokenizer_special(t, KILN_TOK_UNK) == 0 &&
                     kiln_tokenizer_special(t, KILN_TOK_BOS) == 1 && kiln_tokenizer_special(t, KILN_TOK_EOT) == 3,
                 "pass %d: pad %d unk %d bos %d eot %d", pass, kiln_tokenizer_special(t, KILN_TOK_PAD),
                 kiln_tokenizer_special(t, KILN_TOK_UNK), kiln_tokenizer_special(t, KILN_TOK_BOS),
                 kiln_tokenizer_special(t, KILN_TOK_EOT));
        KT_CHECK(!kiln_tokenizer_add_bos(t) && kiln_tokenizer_add_eos(t), "pass %d: flags", pass);
        KT_CHECK(kiln_tokenizer_is_eog(t, 2) && kiln_tokenizer_is_eog(t, 3) && !kiln_tokenizer_is_eog(t, 1),
                 "pass %d: eog", pass);
        w = kiln_gguf_writer_new();
        KT_OK(kiln_tokenizer_to_gguf(t, w));
        KT_OK(kiln_gguf_writer_save(w, p));
        kiln_gguf_writer_free(w);
        kiln_tokenizer_free(t);
    }
    unlink(p);
}
