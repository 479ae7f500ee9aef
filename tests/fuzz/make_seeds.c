/* make_seeds.c — the seed corpora of the fuzz targets: small valid files
 * written by kiln's own writers (safetensors, GGUF, checkpoints, a llama)
 * or spelled here as the tests spell them (IDX, tokenizer.json), one
 * folder per target under the directory given. make fuzz runs it before
 * fuzzing; nothing here is committed as a binary.
 *
 *     make_seeds OUT     writes OUT/<target>/<name> */
#include "fuzz_util.h"
#include "llama_files.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef KILN_ZLIB
#include <zlib.h>
#endif

static const char *out;
static int failures;

static const char *path_of(const char *target, const char *name) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", out, target);
    if (mkdir(p, 0755) && errno != EEXIST) fprintf(stderr, "make_seeds: mkdir %s: %s\n", p, strerror(errno));
    snprintf(p, sizeof p, "%s/%s/%s", out, target, name);
    return p;
}

static void check(kiln_status s, const char *what) {
    if (!s) return;
    fprintf(stderr, "make_seeds: %s: %s\n", what, kiln_last_error());
    failures++;
}

static void write_bytes(const char *target, const char *name, const void *p, size_t n) {
    FILE *f = fopen(path_of(target, name), "wb");
    if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
        fprintf(stderr, "make_seeds: cannot write %s/%s\n", target, name);
        failures++;
    }
}

/* ---- safetensors: each dtype, a 0-d tensor, a quantized one, metadata ---- */

static void safetensors(void) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *t[5] = {
        kiln_new_2d(ctx, KILN_F32, 2, 3), kiln_new_1d(ctx, KILN_F16, 4), kiln_new_1d(ctx, KILN_BF16, 3),
        kiln_new_1d(ctx, KILN_I32, 2), kiln_new_2d(ctx, KILN_F32, 1, 32),
    };
    const char *names[5] = {"w", "h", "b", "i", "q"};
    for (int i = 0; i < 5; i++)
        if (kiln_tensor_dtype(t[i]) != KILN_I32) check(kiln_tensor_fill_uniform(t[i], 1 + (uint64_t)i, -1, 1), "fill");
    t[4] = kiln_quantize(ctx, t[4], KILN_Q8_0); /* U8 bytes + kiln.quantized.q metadata */
    const char *meta[] = {"format", "pt", "note", "seed"};
    check(kiln_safetensors_save(path_of("safetensors", "mixed"), t, names, 5, meta, 2), "safetensors mixed");
    check(kiln_safetensors_save(path_of("safetensors", "one"), t, names, 1, NULL, 0), "safetensors one");
    check(kiln_safetensors_save(path_of("safetensors", "empty"), t, names, 0, NULL, 0), "safetensors empty");
    kiln_ctx_free(ctx);
}

/* ---- GGUF: every value type, arrays, tensors of several ggml types ---- */

static void gguf(void) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    check(kiln_gguf_set_string(w, "general.architecture", "llama"), "gguf");
    check(kiln_gguf_set_int(w, "u8", KILN_GGUF_UINT8, 200), "gguf");
    check(kiln_gguf_set_int(w, "i16", KILN_GGUF_INT16, -3), "gguf");
    check(kiln_gguf_set_int(w, "u32", KILN_GGUF_UINT32, 7), "gguf");
    check(kiln_gguf_set_int(w, "i64", KILN_GGUF_INT64, -1), "gguf");
    check(kiln_gguf_set_int(w, "b", KILN_GGUF_BOOL, 1), "gguf");
    check(kiln_gguf_set_float(w, "f32", KILN_GGUF_FLOAT32, 0.5), "gguf");
    check(kiln_gguf_set_float(w, "f64", KILN_GGUF_FLOAT64, -2.25), "gguf");
    const int32_t ints[3] = {1, -2, 3};
    const float floats[2] = {1.5f, -0.25f};
    const char *strs[3] = {"a", "", "ccc"};
    check(kiln_gguf_set_array(w, "ai", KILN_GGUF_INT32, ints, 3), "gguf");
    check(kiln_gguf_set_array(w, "af", KILN_GGUF_FLOAT32, floats, 2), "gguf");
    check(kiln_gguf_set_array(w, "as", KILN_GGUF_STRING, strs, 3), "gguf");
    kiln_tensor *t[4] = {kiln_new_2d(ctx, KILN_F32, 2, 3), kiln_new_1d(ctx, KILN_F16, 5),
                         kiln_new_2d(ctx, KILN_F32, 1, 32), kiln_new_2d(ctx, KILN_F32, 2, 32)};
    const char *names[4] = {"w", "h", "q8", "q4"};
    for (int i = 0; i < 4; i++) check(kiln_tensor_fill_uniform(t[i], 5 + (uint64_t)i, -1, 1), "fill");
    t[2] = kiln_quantize(ctx, t[2], KILN_Q8_0);
    t[3] = kiln_quantize(ctx, t[3], KILN_Q4_0);
    for (int i = 0; i < 4; i++) check(kiln_gguf_add_tensor(w, names[i], t[i]), "gguf tensor");
    check(kiln_gguf_writer_save(w, path_of("gguf", "mixed")), "gguf save");
    kiln_gguf_writer_free(w);
    w = kiln_gguf_writer_new();
    check(kiln_gguf_writer_save(w, path_of("gguf", "empty")), "gguf empty");
    kiln_gguf_writer_free(w);
    kiln_ctx_free(ctx);
}

/* ---- tokenizer.json: byte-level BPE (GPT-2, Llama 3 split) and the
 * SentencePiece form; GGUF copies of both go to the gguf corpus ---- */

static int byte_cp(int b) { /* GPT-2's bytes_to_unicode */
    int n = 0;
    for (int x = 0; x < 256; x++) {
        bool p = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174 && x <= 255);
        if (x == b) return p ? x : 256 + n;
        if (!p) n++;
    }
    return -1;
}

static void put_cp(char **o, int cp) {
    if (cp == '"' || cp == '\\') *(*o)++ = '\\', *(*o)++ = (char)cp;
    else if (cp < 0x80) *(*o)++ = (char)cp;
    else *(*o)++ = (char)(0xC0 | cp >> 6), *(*o)++ = (char)(0x80 | (cp & 63));
}

static void bpe_json(const char *name, const char *pre) {
    char *buf = malloc(65536), *o = buf;
    o += sprintf(o, "{\"added_tokens\": [{\"id\": 261, \"content\": \"<|endoftext|>\", \"special\": true}], "
                    "\"normalizer\": null, \"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", \"vocab\": {", pre);
    for (int b = 0; b < 256; b++) {
        *o++ = '"';
        put_cp(&o, byte_cp(b));
        o += sprintf(o, "\": %d, ", b);
    }
    o += sprintf(o, "\"he\": 256, \"\\u0120t\": 257, \"\\u0120the\": 258, \"ll\": 259, \"llo\": 260, "
                    "\"\\u0120\\u0120\": 262}, \"merges\": [\"h e\", \"\\u0120 t\", \"\\u0120t he\", [\"l\", \"l\"], "
                    "\"ll o\", \"\\u0120 \\u0120\"]}}");
    write_bytes("tokenizer_json", name, buf, (size_t)(o - buf));
    free(buf);
}

static void spm_json(const char *name, bool metaspace) {
    char *buf = malloc(65536), *o = buf;
    o += sprintf(o, "{\"added_tokens\": [{\"id\": 0, \"content\": \"<unk>\", \"special\": true}, {\"id\": 1, "
                    "\"content\": \"<s>\", \"special\": true}, {\"id\": 2, \"content\": \"</s>\", \"special\": true}],\n");
    if (metaspace)
        o += sprintf(o, "\"normalizer\": null, \"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": "
                        "\"\\u2581\", \"prepend_scheme\": \"first\", \"split\": false},\n");
    else
        o += sprintf(o, "\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Prepend\", "
                        "\"prepend\": \"\\u2581\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, "
                        "\"content\": \"\\u2581\"}]}, \"pre_tokenizer\": null,\n");
    o += sprintf(o, "\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"vocab\": "
                    "{\"<unk>\": 0, \"<s>\": 1, \"</s>\": 2");
    for (int b = 0; b < 256; b++) o += sprintf(o, ", \"<0x%02X>\": %d", b, 3 + b);
    o += sprintf(o, ", \"\\u2581\": 259, \"h\": 260, \"e\": 261, \"l\": 262, \"o\": 263, \"he\": 264, \"ll\": 265, "
                    "\"llo\": 266, \"\\u2581he\": 267}, \"merges\": [\"l l\", \"ll o\", \"h e\", \"\\u2581 he\"]}}\n");
    write_bytes("tokenizer_json", name, buf, (size_t)(o - buf));
    free(buf);
}

/* The json seed name's tokenizer, written to GGUF for the gguf corpus. */
static void tokenizer_gguf(const char *json_name, const char *gguf_name) {
    char p[512];
    snprintf(p, sizeof p, "%s/tokenizer_json/%s", out, json_name);
    kiln_tokenizer *t = kiln_tokenizer_from_json(p);
    if (!t) return check(kiln_last_status(), p);
    kiln_tokenizer_set_bos_eos(t, 1, 2);
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    check(kiln_tokenizer_to_gguf(t, w), "tokenizer to gguf");
    check(kiln_gguf_writer_save(w, path_of("gguf", gguf_name)), "tokenizer gguf save");
    kiln_gguf_writer_free(w);
    kiln_tokenizer_free(t);
}

/* GGUF's "llama" SentencePiece tokenizer, as tests/test_tokenizer.c's. */
static void spm_gguf(void) {
    const char *pieces[] = {"\xe2\x96\x81", "h", "e", "l", "o", "he", "ll", "llo", "\xe2\x96\x81he"};
    const float pscore[] = {-10, -10, -10, -10, -10, -5, -3, -4, -6};
    enum { N = 3 + 256 + 9 };
    static char bytes[256][8];
    const char *toks[N];
    float scores[N];
    int32_t types[N];
    toks[0] = "<unk>", toks[1] = "<s>", toks[2] = "</s>";
    types[0] = 2, types[1] = types[2] = 3;
    for (int b = 0; b < 256; b++) {
        snprintf(bytes[b], 8, "<0x%02X>", b);
        toks[3 + b] = bytes[b];
        types[3 + b] = 6;
    }
    for (int i = 0; i < 9; i++) toks[259 + i] = pieces[i], types[259 + i] = 1, scores[259 + i] = pscore[i];
    for (int i = 0; i < 259; i++) scores[i] = 0;
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    check(kiln_gguf_set_string(w, "tokenizer.ggml.model", "llama"), "spm gguf");
    check(kiln_gguf_set_array(w, "tokenizer.ggml.tokens", KILN_GGUF_STRING, toks, N), "spm gguf");
    check(kiln_gguf_set_array(w, "tokenizer.ggml.scores", KILN_GGUF_FLOAT32, scores, N), "spm gguf");
    check(kiln_gguf_set_array(w, "tokenizer.ggml.token_type", KILN_GGUF_INT32, types, N), "spm gguf");
    check(kiln_gguf_set_int(w, "tokenizer.ggml.bos_token_id", KILN_GGUF_UINT32, 1), "spm gguf");
    check(kiln_gguf_set_int(w, "tokenizer.ggml.eos_token_id", KILN_GGUF_UINT32, 2), "spm gguf");
    check(kiln_gguf_set_int(w, "tokenizer.ggml.unknown_token_id", KILN_GGUF_UINT32, 0), "spm gguf");
    check(kiln_gguf_writer_save(w, path_of("gguf", "tokenizer_spm")), "spm gguf save");
    kiln_gguf_writer_free(w);
}

static void tokenizers(void) {
    bpe_json("gpt2", "{\"type\": \"ByteLevel\", \"add_prefix_space\": false, \"use_regex\": true}");
    bpe_json("llama3",
             "{\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": \"Split\", \"pattern\": {\"Regex\": "
             "\"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\\\r\\\\n\\\\p{L}\\\\p{N}]?\\\\p{L}+|\\\\p{N}{1,3}| "
             "?[^\\\\s\\\\p{L}\\\\p{N}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"}, \"behavior\": "
             "\"Isolated\", \"invert\": false}, {\"type\": \"ByteLevel\", \"add_prefix_space\": false, "
             "\"use_regex\": false}]}");
    spm_json("spm_normalizer", false);
    spm_json("spm_metaspace", true);
    tokenizer_gguf("gpt2", "tokenizer_gpt2");
    spm_gguf();
}

/* ---- IDX: images and labels, plain and gzipped ---- */

static void idx(void) {
    const unsigned char img[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 2, 0, 51, 102, 255, 1, 2, 3, 4};
    const unsigned char lab[] = {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9};
    write_bytes("idx", "images", img, sizeof img);
    write_bytes("idx", "labels", lab, sizeof lab);
    write_bytes("idx_gz", "images", img, sizeof img); /* fuzz_idx_gz compresses them itself */
    write_bytes("idx_gz", "labels", lab, sizeof lab);
#ifdef KILN_ZLIB
    gzFile f = gzopen(path_of("idx", "images.gz"), "wb");
    if (!f || gzwrite(f, img, sizeof img) != (int)sizeof img || gzclose(f) != Z_OK) {
        fprintf(stderr, "make_seeds: cannot write idx/images.gz\n");
        failures++;
    }
#endif
}

/* ---- checkpoints: parameters alone, optimizer state, both ---- */

static void checkpoints(void) {
    kiln_ctx *ctx;
    kiln_optim *opt = kiln_fuzz_checkpoint_model(&ctx);
    if (!opt) return check(kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM, "checkpoint model");
    check(kiln_checkpoint_save(opt, path_of("checkpoint", "checkpoint")), "checkpoint save");
    check(kiln_optim_save(opt, path_of("checkpoint", "optim")), "optim save");
    check(kiln_save_params(ctx, path_of("checkpoint", "params")), "params save");
}

/* ---- llama: a tiny model in GGUF, and its config.json ---- */

static void llamas(void) {
    llama_config c = llama_defaults();
    c.vocab = 8, c.context = 8, c.layers = 1, c.heads = 2, c.kv_heads = 1, c.dim = 8, c.hidden = 12;
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_new(ctx, &c, 1);
    if (!m) return check(kiln_last_status(), "llama_new");
    check(llama_save_gguf(m, path_of("llama_gguf", "f32"), KILN_F32), "llama gguf f32");
    check(llama_save_gguf(m, path_of("llama_gguf", "f16"), KILN_F16), "llama gguf f16");
    llama_free(m);
    kiln_ctx_free(ctx);
    const char *cfg = kiln_fuzz_llama_config_json();
    write_bytes("llama_config", "config", cfg, strlen(cfg));
    /* the index of one shard: every tensor of the tiny llama in model.safetensors */
    const char *names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight",
                           "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                           "self_attn.o_proj", "post_attention_layernorm", "mlp.gate_proj", "mlp.up_proj",
                           "mlp.down_proj"};
    char idx[2048];
    int n = snprintf(idx, sizeof idx, "{\"metadata\": {\"total_size\": 1408}, \"weight_map\": {");
    for (int i = 0; i < 12; i++)
        n += snprintf(idx + n, sizeof idx - (size_t)n, "%s\"%s%s%s\": \"model.safetensors\"", i ? ", " : "",
                      i < 3 ? "" : "model.layers.0.", names[i], i < 3 ? "" : ".weight");
    n += snprintf(idx + n, sizeof idx - (size_t)n, "}}\n");
    write_bytes("llama_index", "index", idx, (size_t)n);
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: make_seeds OUT\n");
        return 2;
    }
    out = argv[1];
    if (mkdir(out, 0755) && errno != EEXIST) {
        fprintf(stderr, "make_seeds: mkdir %s: %s\n", out, strerror(errno));
        return 1;
    }
    safetensors();
    gguf();
    tokenizers();
    idx();
    checkpoints();
    llamas();
    return failures ? 1 : 0;
}
