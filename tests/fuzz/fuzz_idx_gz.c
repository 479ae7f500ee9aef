/* fuzz_idx_gz.c — kiln_idx_load on a gzipped file: the bytes are the
 * IDX content, compressed here, so mutations land in the header and data
 * rather than in the deflate stream (fuzz_idx.c sees raw gzip bytes too,
 * as its inputs may start with gzip's magic). Without zlib (ZLIB=0) the
 * bytes are loaded as they are. */
#include "fuzz_util.h"

#include <stdlib.h>
#ifdef KILN_ZLIB
#include <zlib.h>
#endif

kiln_status kiln_fuzz_idx_gz(const uint8_t *data, size_t size) {
    const uint8_t *file = data;
    size_t n = size;
#ifdef KILN_ZLIB
    /* a gzip member: 10-byte header, deflate, 8-byte trailer */
    uLongf cap = compressBound((uLong)size) + 32;
    uint8_t *gz = malloc(cap);
    if (!gz) return KILN_ERR_OOM;
    z_stream z = {0};
    if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
        free(gz);
        return KILN_ERR_OOM;
    }
    z.next_in = (Bytef *)data;
    z.avail_in = (uInt)size;
    z.next_out = gz;
    z.avail_out = (uInt)cap;
    int r = deflate(&z, Z_FINISH);
    n = z.total_out;
    deflateEnd(&z);
    if (r != Z_STREAM_END) {
        free(gz);
        return KILN_ERR_OOM;
    }
    file = gz;
#endif
    const char *path = kiln_fuzz_file(0, file, n);
    kiln_status s = KILN_ERR_IO;
    kiln_ctx *ctx = path ? kiln_ctx_new() : NULL;
    if (ctx) {
        s = kiln_idx_load(ctx, path, false, 1.0f / 255) ? KILN_OK : kiln_last_status();
        kiln_idx_load(ctx, path, true, 1.0f);
        kiln_ctx_free(ctx);
    }
    if (file != data) free((void *)file);
    return s;
}

KILN_FUZZ_ENTRY(kiln_fuzz_idx_gz)
