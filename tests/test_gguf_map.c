/* test_gguf_map.c — weights mapped from a GGUF file (kiln_gguf_map,
 * llama_infer_from_gguf with LLAMA_AS_STORED): the same logits as the
 * copied model bit for bit, the weights really the file's pages, q|k|v and
 * gate|up mapped as one stack where the file keeps them together, writes
 * never reaching the file, the mapping gone with the context, and the
 * files that cannot be mapped said to be so by name. */
#include "kt.h"
#include "llama_files.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#define REF_DIR "tests/fixtures/gguf-ref/"

/* Whether p lies in a mapping of the file path (/proc/self/maps). */
static bool in_mapping_of(const void *p, const char *path) {
    char real[4096], line[4600];
    if (!realpath(path, real)) return false;
    FILE *f = fopen("/proc/self/maps", "r");
    bool hit = false;
    while (f && !hit && fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        int at = 0;
        if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %n", &lo, &hi, &at) < 2 || !at) continue;
        line[strcspn(line, "\n")] = '\0';
        hit = (uintptr_t)p >= lo && (uintptr_t)p < hi && !strcmp(line + at, real);
    }
    if (f) fclose(f);
    return hit;
}

/* Logits of 9 ids at once (the batched path) and of one more (a step). */
static float *logits_of(llama *m) {
    static const int32_t ids[10] = {1, 40, 77, 114, 151, 188, 225, 262, 299, 3};
    const int64_t V = m->cfg.vocab;
    llama_cache *c = llama_cache_new(m, 1, 10);
    float *z = malloc((size_t)(10 * V) * sizeof *z);
    if (!c || !z || llama_cache_step_all(m, c, ids, 9, z) || llama_cache_step(m, c, ids + 9, 1, z + 9 * V)) {
        free(z);
        z = NULL;
    }
    llama_cache_free(c);
    return z;
}

/* A mapped model of path against the copied one: equal logits, and each
 * weight kept in the file's type the file's own pages. */
static void mapped_equals_copied(const char *path, bool stacks_mapped) {
    kiln_ctx *cm = kiln_ctx_new(), *cc = kiln_ctx_new();
    llama *m = llama_infer_from_gguf(cm, path, LLAMA_AS_STORED);
    llama *c = llama_infer_from_gguf(cc, path, LLAMA_AS_STORED_COPY);
    KT_REQUIRE(m && c, "%s: %s", path, kiln_last_error());
    float *a = logits_of(m), *b = logits_of(c);
    KT_REQUIRE(a && b, "%s: %s", path, kiln_last_error());
    KT_CHECK(!memcmp(a, b, (size_t)(10 * m->cfg.vocab) * sizeof *a), "%s: mapped and copied logits differ", path);
    const llama_layer *y = &m->layers[m->cfg.layers - 1];
    KT_CHECK(in_mapping_of(kiln_tensor_data(y->w2), path), "%s: ffn_down is not the file's", path);
    KT_CHECK(in_mapping_of(kiln_tensor_data(m->norm), path), "%s: output_norm is not the file's", path);
    KT_CHECK(!in_mapping_of(kiln_tensor_data(c->layers[0].w2), path), "%s: the copied model maps", path);
    if (stacks_mapped)
        KT_CHECK(y->wqkv && y->w13 && in_mapping_of(kiln_tensor_data(y->wqkv), path) &&
                     in_mapping_of(kiln_tensor_data(y->w13), path),
                 "%s: q|k|v and gate|up are not stacks mapped from the file", path);
    free(a), free(b);
    llama_free(m), llama_free(c);
    kiln_ctx_free(cm), kiln_ctx_free(cc);
}

KT_TEST(gguf_map_reference_files_logits_equal_copied) {
    /* llama.cpp's files: one type per tensor or mixed, Phi-3's fused
     * attn_qkv / ffn_up, Qwen2's biases */
    static const char *const files[] = {"llama-s1-F32", "llama-s1-Q4_K_M", "llama-s1-Q4_0", "qwen2-s1-Q6_K",
                                        "phi3-s1-Q8_0", "phi3-s1-IQ4_NL"};
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        char path[256];
        snprintf(path, sizeof path, REF_DIR "%s.gguf", files[i]);
        mapped_equals_copied(path, !strncmp(files[i], "phi3", 4) && strcmp(files[i], "phi3-s1-IQ4_NL"));
    }
}

/* A small llama written by kiln in a mix: q|k|v and gate|up follow each
 * other in the file, so each group is one mapped stack. */
static const char *kiln_written(const char *mix) {
    llama_config cfg = llama_defaults();
    cfg.vocab = 320, cfg.context = 32, cfg.layers = 2, cfg.heads = 4, cfg.kv_heads = 2, cfg.dim = 256,
    cfg.hidden = 512;
    const char *path = kt_tmp_path(mix);
    kiln_ctx *ctx = kiln_ctx_new();
    llama *m = llama_new_inference(ctx, &cfg, KILN_F32, false);
    bool ok = m && !llama_init_random(m, 5) && !llama_save_gguf_mix(m, NULL, path, llama_ftype_parse(mix));
    KT_CHECK(ok, "writing %s: %s", mix, kiln_last_error());
    llama_free(m);
    kiln_ctx_free(ctx);
    return path;
}

KT_TEST(gguf_map_kiln_files_map_stacks) {
    static const char *const mixes[] = {"Q4_0", "Q8_0", "Q6_K"};
    for (int i = 0; i < 3; i++) {
        const char *path = kiln_written(mixes[i]);
        mapped_equals_copied(path, true);
        remove(path);
    }
}

KT_TEST(gguf_map_outlives_reader_and_goes_with_ctx) {
    const char *path = REF_DIR "llama-s1-Q8_0.gguf";
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf *g = kiln_gguf_open(path);
    KT_REQUIRE(g != NULL, "%s", kiln_last_error());
    kiln_tensor *t = kiln_gguf_map(g, ctx, "blk.0.attn_q.weight"), *u = kiln_gguf_load(g, ctx, "blk.0.attn_q.weight");
    KT_REQUIRE(t && u, "%s", kiln_last_error());
    kiln_gguf_close(g);
    KT_CHECK(kiln_tensor_dtype(t) == KILN_Q8_0 && kiln_tensor_dim(t, 0) == 256 && kiln_tensor_dim(t, 1) == 256,
             "the mapped tensor's dtype or shape");
    const void *p = kiln_tensor_data(t);
    KT_CHECK(in_mapping_of(p, path), "mapped tensor not in the file's mapping once the reader is closed");
    KT_CHECK(!memcmp(p, kiln_tensor_data(u), kiln_tensor_nbytes(u)), "mapped bytes differ from loaded ones");
    kiln_ctx_free(ctx);
    KT_CHECK(!in_mapping_of(p, path), "the file is still mapped after kiln_ctx_free");
}

KT_TEST(gguf_map_writes_stay_in_the_process) {
    const char *path = kiln_written("Q8_0");
    FILE *f = fopen(path, "rb");
    long size = f && !fseek(f, 0, SEEK_END) ? ftell(f) : -1;
    unsigned char *before = size > 0 ? malloc((size_t)size) : NULL, *after = before ? malloc((size_t)size) : NULL;
    KT_REQUIRE(after && !fseek(f, 0, SEEK_SET) && fread(before, 1, (size_t)size, f) == (size_t)size, "reading %s",
               path);
    fclose(f);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf *g = kiln_gguf_open(path);
    kiln_tensor *t = g ? kiln_gguf_map(g, ctx, "output_norm.weight") : NULL;
    KT_REQUIRE(t != NULL, "%s", kiln_last_error());
    KT_OK(kiln_tensor_fill(t, 7.0));
    float v[256] = {0};
    KT_OK(kiln_tensor_get_f32(t, v, 256));
    KT_CHECK(v[0] == 7.0f && v[255] == 7.0f, "the written value reads back as %g", v[0]);
    kiln_gguf_close(g);
    kiln_ctx_free(ctx);
    f = fopen(path, "rb");
    KT_CHECK(f && fread(after, 1, (size_t)size, f) == (size_t)size && !memcmp(before, after, (size_t)size),
             "writing to a mapped tensor changed the file");
    if (f) fclose(f);
    free(before), free(after);
    remove(path);
}

KT_TEST(gguf_map_refuses_by_name) {
    const char *path = REF_DIR "llama-s1-Q4_K_M.gguf";
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf *g = kiln_gguf_open(path);
    KT_REQUIRE(g != NULL, "%s", kiln_last_error());
    KT_EXPECT_ERR(kiln_gguf_map(g, ctx, "blk.0.nope.weight"), KILN_ERR_FORMAT, "no tensor 'blk.0.nope.weight'");
    /* attn_output is not next to attn_q in any file's order */
    const char *const apart[2] = {"blk.0.attn_q.weight", "blk.0.attn_output.weight"};
    const char *const unlike[2] = {"blk.0.attn_q.weight", "output_norm.weight"};
    KT_EXPECT_ERR(kiln_gguf_map_rows(g, ctx, apart, 2), KILN_ERR_UNSUPPORTED, "does not follow 'blk.0.attn_q.weight'");
    KT_EXPECT_ERR(kiln_gguf_map_rows(g, ctx, unlike, 2), KILN_ERR_SHAPE, "cannot be stacked");
    kiln_gguf_close(g);
    kiln_ctx_free(ctx);
}

/* general.alignment 16: of two tensors 16 bytes apart one starts off 32
 * bytes, which kiln_gguf_map refuses by name (kiln_gguf_load copies it). */
KT_TEST(gguf_map_refuses_data_off_32_bytes) {
    const char *path = kt_tmp_path("a16.gguf");
    kiln_gguf_writer *w = kiln_gguf_writer_new();
    const float v[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    KT_OK(kiln_gguf_set_int(w, "general.alignment", KILN_GGUF_UINT32, 16));
    KT_OK(kiln_gguf_add_raw(w, "a", KILN_GGML_F32, 1, (int64_t[]){4}, v, 16));
    KT_OK(kiln_gguf_add_raw(w, "b", KILN_GGML_F32, 1, (int64_t[]){8}, v + 4, 32));
    KT_OK(kiln_gguf_writer_save(w, path));
    kiln_gguf_writer_free(w);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_gguf *g = kiln_gguf_open(path);
    KT_REQUIRE(g != NULL, "%s", kiln_last_error());
    kiln_tensor *a = kiln_gguf_map(g, ctx, "a");
    const char *why = a ? "" : kiln_last_error();
    kiln_tensor *b = kiln_gguf_map(g, ctx, "b");
    if (!b) why = kiln_last_error();
    KT_CHECK(!a != !b, "exactly one of two tensors 16 bytes apart starts off 32 bytes");
    KT_CHECK(strstr(why, "not a multiple of 32 (general.alignment 16)") && strstr(why, path), "message: %s", why);
    float got[8] = {0};
    const bool a_ok = a && !kiln_tensor_get_f32(a, got, 4) && got[3] == 4,
               b_ok = b && !kiln_tensor_get_f32(b, got, 8) && got[7] == 12;
    KT_CHECK(a_ok || b_ok, "the mapped one's values");
    kiln_gguf_close(g);
    kiln_ctx_free(ctx);
    remove(path);
}

/* A file cut short is refused when it is opened, naming the tensor that
 * runs past its end: nothing is mapped past the file. */
KT_TEST(gguf_map_truncated_file_is_an_error) {
    const char *src = kiln_written("Q4_0"), *path = kt_tmp_path("cut.gguf");
    FILE *f = fopen(src, "rb"), *o = fopen(path, "wb");
    KT_REQUIRE(f && o, "copying %s", src);
    fseek(f, 0, SEEK_END);
    long n = ftell(f) - 100;
    fseek(f, 0, SEEK_SET);
    for (long i = 0; i < n; i++) fputc(fgetc(f), o);
    fclose(f), fclose(o);
    kiln_ctx *ctx = kiln_ctx_new();
    KT_EXPECT_ERR(llama_infer_from_gguf(ctx, path, LLAMA_AS_STORED), KILN_ERR_FORMAT, "runs past the data");
    KT_CHECK(strstr(kiln_last_error(), "'output.weight'") != NULL, "message: %s", kiln_last_error());
    kiln_ctx_free(ctx);
    remove(src), remove(path);
}
