/* test_file_errors.c — what a file call says when it fails: the call the
 * user made (not the inner one that failed: kiln_load_params, not
 * kiln_safetensors_open), the file, and for a tensor its name and which
 * side of a mismatch is the file's. Loading a tensor from safetensors,
 * GGUF or IDX names the file and the tensor whatever fails, down to each
 * allocation (kiln_debug.h). */
#include "kt.h"
#include "kiln_debug.h"

#include <unistd.h>

static char dir_[64];

static const char *in_dir(const char *name) {
    static char buf[4][160];
    static int k;
    if (!dir_[0]) {
        snprintf(dir_, sizeof dir_, "/tmp/kiln_ferr_XXXXXX");
        if (!mkdtemp(dir_)) return NULL;
    }
    char *p = buf[k++ % 4];
    snprintf(p, 160, "%s/%s", dir_, name);
    return p;
}

static void rm_files(const char *const *names, int n) {
    for (int i = 0; i < n; i++) unlink(in_dir(names[i]));
    rmdir(dir_);
}

/* The call failed with this status and its message holds every text. */
static void expect(kiln_status got, kiln_status want, const char *what, const char *const *texts, int n) {
    KT_CHECK(got == want, "%s: status %s, expected %s: %s", what, kiln_status_name(got), kiln_status_name(want),
             kiln_last_error());
    for (int i = 0; i < n; i++)
        KT_CHECK(strstr(kiln_last_error(), texts[i]), "%s: '%s' lacks '%s'", what, kiln_last_error(), texts[i]);
}
#define EXPECT(call, want, ...)                                                                            \
    do {                                                                                                   \
        const char *texts_[] = {__VA_ARGS__};                                                              \
        kiln_clear_error();                                                                                \
        expect((call), want, #call, texts_, (int)(sizeof texts_ / sizeof *texts_));                        \
    } while (0)

/* A safetensors file whose header is given (8-byte length, the header, data bytes of zeros). */
static void write_st(const char *path, const char *header, size_t data) {
    FILE *f = fopen(path, "wb");
    uint64_t n = strlen(header);
    unsigned char len[8];
    for (int i = 0; i < 8; i++) len[i] = (unsigned char)(n >> (8 * i));
    fwrite(len, 1, 8, f);
    fwrite(header, 1, n, f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    fclose(f);
}

KT_TEST(file_errors_name_the_users_call) {
    const char *missing = in_dir("missing.safetensors"), *p = in_dir("p.safetensors"), *bad = in_dir("bad.safetensors");
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *fc1 = kiln_param(ctx, "fc1.weight", KILN_F32, 2, (int64_t[]){4, 3});
    KT_NOTNULL(fc1);
    kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
    KT_NOTNULL(opt);
    EXPECT(kiln_load_params(ctx, missing), KILN_ERR_IO, "kiln_load_params: cannot open ", missing);
    EXPECT(kiln_checkpoint_load(opt, missing), KILN_ERR_IO, "kiln_checkpoint_load: cannot open ", missing);
    EXPECT(kiln_optim_load(opt, missing), KILN_ERR_IO, "kiln_optim_load: cannot open ", missing);
    const char *nodir = "/nonexistent-kiln-dir/p.safetensors";
    EXPECT(kiln_save_params(ctx, nodir), KILN_ERR_IO, "kiln_save_params: cannot create a temporary file beside", nodir);
    EXPECT(kiln_checkpoint_save(opt, nodir), KILN_ERR_IO, "kiln_checkpoint_save: cannot create");
    /* the file's side and the model's, by name */
    kiln_ctx *other = kiln_ctx_new();
    KT_NOTNULL(kiln_param(other, "fc1.weight", KILN_F32, 2, (int64_t[]){2, 3}));
    KT_OK(kiln_save_params(other, p));
    EXPECT(kiln_load_params(ctx, p), KILN_ERR_SHAPE, "kiln_load_params: ", p,
           ": 'fc1.weight' is [2, 3] in the file, [4, 3] in the model");
    /* a byte count that disagrees with the shape, found when the file is opened */
    write_st(bad, "{\"fc1.weight\":{\"dtype\":\"F32\",\"shape\":[4,3],\"data_offsets\":[0,40]}}", 40);
    EXPECT(kiln_load_params(ctx, bad), KILN_ERR_FORMAT, "kiln_load_params: ", bad, "tensor 'fc1.weight'",
           "is 48 bytes but data_offsets [0, 40] hold 40");
    EXPECT(kiln_checkpoint_load(opt, bad), KILN_ERR_FORMAT, "kiln_checkpoint_load: ", bad, "'fc1.weight'");
    kiln_ctx_free(other);
    kiln_ctx_free(ctx);
    rm_files((const char *[]){"p.safetensors", "bad.safetensors"}, 2);
}

/* Every way of failing to load one tensor, each allocation failing in
 * turn included, names the file and the tensor. */
static void sweep_load(const char *what, const char *path, const char *tensor, kiln_tensor *(*load)(kiln_ctx *ctx)) {
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_debug_fail_alloc_after(-1);
    KT_NOTNULL(load(ctx));
    long n = kiln_debug_alloc_count();
    kiln_ctx_free(ctx);
    for (long i = 0; i < n; i++) {
        ctx = kiln_ctx_new();
        kiln_clear_error();
        kiln_debug_fail_alloc_after(i);
        kiln_tensor *t = load(ctx);
        kiln_debug_fail_alloc_after(-1);
        KT_CHECK(!t && strstr(kiln_last_error(), path) && strstr(kiln_last_error(), tensor),
                 "%s, allocation %ld of %ld failing: %s", what, i, n, t ? "loaded" : kiln_last_error());
        kiln_ctx_free(ctx);
    }
}

static kiln_safetensors *st_file;
static kiln_gguf *gguf_file;
static const char *idx_path;
static kiln_tensor *load_st(kiln_ctx *ctx) { return kiln_safetensors_load(st_file, ctx, "emb.weight"); }
static kiln_tensor *load_gguf(kiln_ctx *ctx) { return kiln_gguf_load(gguf_file, ctx, "token_embd.weight"); }
static kiln_tensor *load_idx(kiln_ctx *ctx) { return kiln_idx_load(ctx, idx_path, false, 1.0f); }

KT_TEST(file_errors_loading_a_tensor_name_file_and_tensor) {
    const char *stp = in_dir("m.safetensors"), *gp = in_dir("m.gguf"), *ip = in_dir("m.idx");
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, 64, 32);
    KT_OK(kiln_tensor_fill_uniform(w, 1, -1, 1));
    KT_OK(kiln_safetensors_save(stp, (kiln_tensor *[]){w}, (const char *[]){"emb.weight"}, 1, NULL, 0));
    kiln_gguf_writer *gw = kiln_gguf_writer_new();
    KT_NOTNULL(gw);
    unsigned char iq2[66] = {0}; /* one IQ2_XXS block (ggml type 16): a type kiln has no dtype for */
    KT_OK(kiln_gguf_add_tensor(gw, "token_embd.weight", w));
    KT_OK(kiln_gguf_add_raw(gw, "blk.0.ffn.weight", 16, 1, (int64_t[]){256}, iq2, sizeof iq2));
    KT_OK(kiln_gguf_writer_save(gw, gp));
    kiln_gguf_writer_free(gw);
    FILE *f = fopen(ip, "wb");
    fwrite((unsigned char[]){0, 0, 8, 2, 0, 0, 0, 16, 0, 0, 0, 16}, 1, 12, f);
    for (int i = 0; i < 256; i++) fputc(i, f);
    fclose(f);
    KT_NOTNULL(st_file = kiln_safetensors_open(stp));
    KT_NOTNULL(gguf_file = kiln_gguf_open(gp));
    idx_path = ip;
    EXPECT(kiln_gguf_load(gguf_file, ctx, "blk.0.ffn.weight") ? KILN_OK : kiln_last_status(), KILN_ERR_DTYPE,
           "kiln_gguf_load: ", gp, "tensor 'blk.0.ffn.weight' is IQ2_XXS");
    sweep_load("kiln_safetensors_load", stp, "'emb.weight'", load_st);
    sweep_load("kiln_gguf_load", gp, "'token_embd.weight'", load_gguf);
    sweep_load("kiln_idx_load", ip, "", load_idx);
    kiln_safetensors_close(st_file);
    kiln_gguf_close(gguf_file);
    kiln_ctx_free(ctx);
    rm_files((const char *[]){"m.safetensors", "m.gguf", "m.idx"}, 3);
}
