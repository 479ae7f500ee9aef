/* fuzz_gguf.c — kiln_gguf_open on the bytes, then every accessor on what
 * it accepted: each key's value (numbers, strings, array elements), each
 * tensor's info, load and read_into, and the tokenizer the metadata may
 * hold (kiln_tokenizer_from_gguf), which then encodes and decodes a line. */
#include "fuzz_util.h"

#include <string.h>

static void tokenizer(const kiln_gguf *g) {
    kiln_tokenizer *t = kiln_tokenizer_from_gguf(g);
    if (!t) return;
    static const char text[] = "Hello world <|endoftext|> \xc3\xa9\xff 123";
    int32_t ids[sizeof text + 1];
    int64_t n = 0;
    if (!kiln_tokenizer_encode(t, text, sizeof text - 1, true, ids, (int64_t)sizeof text + 1, &n)) {
        char out[4 * sizeof text + 64];
        size_t len;
        kiln_tokenizer_decode(t, ids, n, out, sizeof out, &len);
    }
    kiln_tokenizer_free(t);
}

kiln_status kiln_fuzz_gguf(const uint8_t *data, size_t size) {
    const char *path = kiln_fuzz_file(0, data, size);
    if (!path) return KILN_ERR_IO;
    kiln_gguf *g = kiln_gguf_open(path);
    if (!g) return kiln_last_status();
    (void)kiln_gguf_version(g);
    (void)kiln_gguf_alignment(g);
    for (int i = 0; i < kiln_gguf_kv_count(g); i++) {
        const char *key = kiln_gguf_kv_key(g, i);
        int64_t v;
        double f;
        size_t len;
        (void)kiln_gguf_find_key(g, key);
        kiln_gguf_get_int(g, key, &v);
        kiln_gguf_get_float(g, key, &f);
        (void)kiln_gguf_get_string(g, key, &len);
        kiln_gguf_type et;
        uint64_t n;
        if (kiln_gguf_kv_type(g, i) != KILN_GGUF_ARRAY || kiln_gguf_get_array(g, key, &et, &n)) continue;
        for (uint64_t k = 0; k < n && k < 64; k++) {
            kiln_gguf_array_int(g, key, k, &v);
            kiln_gguf_array_float(g, key, k, &f);
            (void)kiln_gguf_array_string(g, key, k, &len);
        }
        if (n) kiln_gguf_array_int(g, key, n - 1, &v), (void)kiln_gguf_array_string(g, key, n - 1, &len);
    }
    kiln_ctx *ctx = kiln_ctx_new();
    for (int i = 0; i < kiln_gguf_tensor_count(g) && ctx; i++) {
        kiln_gguf_tensor_info ti;
        if (kiln_gguf_tensor_info_at(g, i, &ti)) continue;
        (void)kiln_gguf_find_tensor(g, ti.name);
        kiln_tensor *t = kiln_gguf_load(g, ctx, ti.name);
        /* read_into an f32 tensor of the same shape: the dequantizing path */
        if (ti.ndim >= 1 && ti.ndim <= 4 && ti.nbytes <= (1u << 20)) {
            kiln_tensor *u = kiln_tensor_new(ctx, KILN_F32, (int)ti.ndim, ti.shape);
            if (u) kiln_gguf_read_into(g, ti.name, u);
        }
        (void)t;
    }
    kiln_ctx_free(ctx);
    tokenizer(g);
    kiln_gguf_close(g);
    return KILN_OK;
}

KILN_FUZZ_ENTRY(kiln_fuzz_gguf)
