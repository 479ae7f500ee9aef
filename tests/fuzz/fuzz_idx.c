/* fuzz_idx.c — kiln_idx_load on the bytes as images (f32, scaled) and
 * as labels (i32). zlib's gzread reads plain files as they are, so these
 * are the plain-file paths; fuzz_idx_gz.c gzips the bytes first. */
#include "fuzz_util.h"

kiln_status kiln_fuzz_idx(const uint8_t *data, size_t size) {
    const char *path = kiln_fuzz_file(0, data, size);
    if (!path) return KILN_ERR_IO;
    kiln_ctx *ctx = kiln_ctx_new();
    if (!ctx) return KILN_ERR_OOM;
    kiln_status s = kiln_idx_load(ctx, path, false, 1.0f / 255) ? KILN_OK : kiln_last_status();
    kiln_idx_load(ctx, path, true, 1.0f);
    kiln_ctx_free(ctx);
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_idx)
