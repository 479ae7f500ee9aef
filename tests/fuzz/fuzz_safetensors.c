/* fuzz_safetensors.c — kiln_safetensors_open on the bytes, then every
 * accessor on what it accepted: each tensor's info and load, the
 * metadata, lookups by name. */
#include "fuzz_util.h"

kiln_status kiln_fuzz_safetensors(const uint8_t *data, size_t size) {
    const char *path = kiln_fuzz_file(0, data, size);
    if (!path) return KILN_ERR_IO;
    kiln_safetensors *st = kiln_safetensors_open(path);
    if (!st) return kiln_last_status();
    kiln_ctx *ctx = kiln_ctx_new();
    (void)kiln_safetensors_metadata(st, "format");
    for (int i = 0; i < kiln_safetensors_count(st); i++) {
        kiln_safetensors_info in;
        if (kiln_safetensors_info_at(st, i, &in)) continue;
        (void)kiln_safetensors_find(st, in.name);
        kiln_tensor *t = ctx ? kiln_safetensors_load(st, ctx, in.name) : NULL;
        /* read_into a fresh tensor of the same shape exercises the checked copy */
        if (t) {
            kiln_tensor *u = kiln_tensor_new(ctx, kiln_tensor_dtype(t), kiln_tensor_ndim(t), kiln_tensor_shape(t));
            if (u) kiln_safetensors_read_into(st, in.name, u);
        }
    }
    kiln_ctx_free(ctx);
    kiln_safetensors_close(st);
    return KILN_OK;
}

KILN_FUZZ_ENTRY(kiln_fuzz_safetensors)
