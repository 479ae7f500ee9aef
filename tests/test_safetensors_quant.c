/* test_safetensors_quant.c — quantized tensors in safetensors files
 * (core/safetensors.c): every quantized dtype of the traits table round
 * trips as U8 [bytes] with its dtype and logical shape in __metadata__,
 * through kiln_safetensors_save/load/read_into and kiln_save/load_params;
 * hostile or inconsistent metadata is refused with a message. */
#include "kt.h"

#include <dirent.h>
#include <unistd.h>

static char qdir_[64];

static const char *qtmpdir(void) {
    snprintf(qdir_, sizeof qdir_, "/tmp/kiln_stq_XXXXXX");
    return mkdtemp(qdir_) ? qdir_ : NULL;
}

static void qrm_dir(const char *dir) {
    DIR *d = opendir(dir);
    char p[400];
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.') {
            snprintf(p, sizeof p, "%.64s/%.300s", dir, e->d_name);
            unlink(p);
        }
    if (d) closedir(d);
    rmdir(dir);
}

/* A quantized tensor of dtype t: f32 [rows, cols] of a ramp, quantized;
 * rows x cols a whole number of t's blocks (NF4_DQ's super-block too). */
static kiln_tensor *quantized(kiln_ctx *ctx, kiln_dtype t, int64_t *rows, int64_t *cols) {
    int64_t blk = kiln_dtype_block(t);
    *cols = blk <= 128 ? 128 : 512;
    *rows = blk <= 128 ? 3 : blk / 512;
    kiln_tensor *w = kiln_new_2d(ctx, KILN_F32, *rows, *cols);
    if (!w) return NULL;
    float *v = kiln_tensor_data(w);
    for (int64_t i = 0; i < *rows * *cols; i++) v[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    kiln_tensor_set_name(w, kiln_dtype_name(t));
    return kiln_quantize(ctx, w, t);
}

KT_TEST(safetensors_quantized_roundtrip_every_dtype) {
    const char *dir = qtmpdir();
    KT_NOTNULL(dir);
    char path[128];
    snprintf(path, sizeof path, "%s/q.safetensors", dir);
    kiln_ctx *ctx = kiln_ctx_new();
    kiln_tensor *ts[KILN_DTYPE_COUNT + 1];
    int n = 0;
    for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
        if (!kiln_dtype_is_quantized((kiln_dtype)t)) continue;
        int64_t r, c;
        KT_NOTNULL(ts[n] = quantized(ctx, (kiln_dtype)t, &r, &c));
        n++;
    }
    KT_REQUIRE(n >= 4, "only %d quantized dtypes", n);
    ts[n] = kiln_new_1d(ctx, KILN_F32, 3); /* a plain tensor beside them */
    kiln_tensor_set_name(ts[n], "plain");
    KT_OK(kiln_tensor_fill(ts[n], 2.0));
    KT_OK(kiln_safetensors_save(path, ts, NULL, n + 1, (const char *[]){"format", "pt"}, 1));
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_NOTNULL(st);
    KT_CHECK(!strcmp(kiln_safetensors_metadata(st, "format"), "pt"), "user metadata kept");
    for (int i = 0; i < n; i++) {
        const char *nm = kiln_tensor_name(ts[i]);
        kiln_safetensors_info in;
        KT_OK(kiln_safetensors_info_at(st, kiln_safetensors_find(st, nm), &in));
        KT_CHECK(!strcmp(in.dtype, "U8") && in.kiln_dtype == (int)kiln_tensor_dtype(ts[i]) && in.ndim == 2 &&
                     in.shape[0] == kiln_tensor_dim(ts[i], 0) && in.shape[1] == kiln_tensor_dim(ts[i], 1) &&
                     in.nbytes == kiln_tensor_nbytes(ts[i]),
                 "%s listed as %s %d [%lld ...] %zu bytes", nm, in.dtype, in.kiln_dtype, (long long)in.shape[0],
                 in.nbytes);
        char key[64];
        snprintf(key, sizeof key, "kiln.quantized.%s", nm);
        KT_CHECK(kiln_safetensors_metadata(st, key) != NULL, "no metadata %s", key);
        kiln_tensor *l = kiln_safetensors_load(st, ctx, nm);
        KT_NOTNULL(l);
        KT_CHECK(kiln_tensor_dtype(l) == kiln_tensor_dtype(ts[i]) && kiln_tensor_nbytes(l) == kiln_tensor_nbytes(ts[i]) &&
                     !memcmp(kiln_tensor_data(l), kiln_tensor_data(ts[i]), kiln_tensor_nbytes(l)),
                 "%s: loaded blocks differ", nm);
        kiln_tensor *into = kiln_tensor_new(ctx, kiln_tensor_dtype(ts[i]), 2,
                                            (int64_t[]){kiln_tensor_dim(ts[i], 0), kiln_tensor_dim(ts[i], 1)});
        KT_OK(kiln_safetensors_read_into(st, nm, into));
        KT_CHECK(!memcmp(kiln_tensor_data(into), kiln_tensor_data(ts[i]), kiln_tensor_nbytes(into)), "%s into", nm);
        /* a plain tensor of the same shape is not the quantized one */
        kiln_tensor *f = kiln_new_2d(ctx, KILN_F32, kiln_tensor_dim(ts[i], 0), kiln_tensor_dim(ts[i], 1));
        KT_CHECK(kiln_safetensors_read_into(st, nm, f) == KILN_ERR_DTYPE && strstr(kiln_last_error(), nm),
                 "%s into f32: %s", nm, kiln_last_error());
    }
    float pv[3];
    KT_OK(kiln_tensor_get_f32(kiln_safetensors_load(st, ctx, "plain"), pv, 3));
    KT_CHECK(pv[0] == 2.0f && pv[2] == 2.0f, "plain values");
    kiln_safetensors_close(st);
    /* kiln's own keys are refused from the caller */
    KT_CHECK(kiln_safetensors_save(path, ts, NULL, 1, (const char *[]){"kiln.quantized.x", "{}"}, 1) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "kiln's own"), "%s", kiln_last_error());
    kiln_ctx_free(ctx);
    qrm_dir(dir);
}

/* parameters are float (they have gradients): a quantized tensor of the
 * file does not load into one, and the message says both dtypes */
KT_TEST(safetensors_quantized_not_into_params) {
    const char *dir = qtmpdir();
    KT_NOTNULL(dir);
    char path[128];
    snprintf(path, sizeof path, "%s/p.safetensors", dir);
    kiln_ctx *ctx = kiln_ctx_new();
    int64_t r, c;
    kiln_tensor *q = quantized(ctx, KILN_Q8_0, &r, &c);
    KT_NOTNULL(q);
    KT_OK(kiln_safetensors_save(path, (kiln_tensor *[]){q}, (const char *[]){"w"}, 1, NULL, 0));
    KT_NOTNULL(kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){r, c}));
    KT_CHECK(kiln_load_params(ctx, path) == KILN_ERR_DTYPE && strstr(kiln_last_error(), "'w' is q8_0 in the file, f32 in the model"),
             "%s", kiln_last_error());
    kiln_ctx_free(ctx);
    qrm_dir(dir);
}

/* A file of one U8 tensor of nbytes zero bytes with metadata meta. */
static void write_q(const char *path, const char *meta, int64_t nbytes) {
    char hdr[1024];
    int h = snprintf(hdr, sizeof hdr, "{\"__metadata__\":{%s},\"w\":{\"dtype\":\"U8\",\"shape\":[%lld],"
                                     "\"data_offsets\":[0,%lld]}}", meta, (long long)nbytes, (long long)nbytes);
    FILE *f = fopen(path, "wb");
    if (!f) return;
    for (int i = 0; i < 8; i++) fputc((int)(((uint64_t)h >> (8 * i)) & 255), f);
    fwrite(hdr, 1, (size_t)h, f);
    for (int64_t i = 0; i < nbytes; i++) fputc(0, f);
    fclose(f);
}

KT_TEST(safetensors_quantized_rejects_hostile_metadata) {
    static const struct { const char *meta; int64_t bytes; const char *msg; } bad[] = {
        /* Q8_0 [2, 32] is 2 blocks of 34 bytes */
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[2,32]}\"", 67, "is 68 bytes but the tensor holds 67"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[2,31]}\"", 68, "multiple of 32"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"f32\\\",\\\"shape\\\":[17]}\"", 68, "a quantized kiln dtype"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q9\\\",\\\"shape\\\":[32]}\"", 68, "a quantized kiln dtype"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[]}\"", 68, "1 to"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[1,1,1,1,1,1,1,1,1,1,32]}\"", 34, "too many values"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[-1,32]}\"", 68, "shape[0] is not"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[4294967296,4294967296,32]}\"", 68, "overflows"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[9007199254740992,32]}\"", 68,
         "but the tensor holds 68"},
        {"\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\"\"", 68, "JSON"},
        {"\"kiln.quantized.v\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[2,32]}\"", 68, "no tensor of the file"},
    };
    const char *dir = qtmpdir();
    KT_NOTNULL(dir);
    char path[128];
    snprintf(path, sizeof path, "%s/h.safetensors", dir);
    write_q(path, "\"kiln.quantized.w\":\"{\\\"dtype\\\":\\\"q8_0\\\",\\\"shape\\\":[2,32]}\"", 68);
    kiln_safetensors *st = kiln_safetensors_open(path);
    KT_CHECK(st != NULL, "the well-formed file: %s", kiln_last_error());
    kiln_safetensors_close(st);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        write_q(path, bad[i].meta, bad[i].bytes);
        kiln_clear_error();
        st = kiln_safetensors_open(path);
        KT_CHECK(!st && kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), bad[i].msg),
                 "case %zu: %s (want '%s')", i, kiln_last_error(), bad[i].msg);
        kiln_safetensors_close(st);
    }
    qrm_dir(dir);
}
