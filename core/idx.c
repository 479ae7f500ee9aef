/* idx.c — kiln_idx_load(): read an IDX file (the format of MNIST and
 * Fashion-MNIST) into a new leaf tensor.
 *
 * Layout: two zero bytes, a type byte (only 0x08, unsigned byte, is
 * supported), a byte with the number of dims, that many big-endian u32
 * dims, then the data in row-major order. zlib's gzread() reads gzipped and
 * plain files alike; a build without zlib (make ZLIB=0) reads plain files
 * only and names the reason when given a gzipped one. The whole payload is read and checked before the
 * tensor is made, so a bad file leaves nothing behind in the context.
 *
 * What a file may make kiln allocate is bounded by what it holds: the
 * buffer grows with the data that actually arrives, and a gzipped file
 * whose header claims more than IDX_MAX_RATIO times its own size is
 * refused before anything is inflated (deflate reaches 1032:1 on zeros, so
 * a 2 MB file could otherwise claim and deliver 2 GB, 8 GB as f32; the
 * gzip trailer's ISIZE cannot bound it: it is the size mod 2^32, of the
 * last member only, and written by whoever made the file).
 */
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef KILN_ZLIB
#include <zlib.h>
#else
/* stdio stand-ins for the zlib calls used here */
typedef FILE *gzFile;
#define Z_OK 0
#define Z_ERRNO (-1)
#define gzdopen fdopen
#define gzclose fclose
#define gzdirect(f) 1
static int gzread(gzFile f, void *buf, unsigned n) {
    size_t r = fread(buf, 1, n, f);
    return r == 0 && ferror(f) ? -1 : (int)r;
}
static const char *gzerror(gzFile f, int *code) {
    (void)f;
    *code = Z_ERRNO;
    return "";
}
#endif

/* Refuse absurd headers before allocating: 16 Gi elements is far beyond
 * any IDX data set, and every product below it fits in int64_t. */
#define IDX_MAX_ELEMS ((int64_t)1 << 34)
/* The data buffer's first size; it doubles as data keeps coming. */
#define IDX_FIRST_READ ((int64_t)1 << 20)
/* Real IDX data sets inflate 2-5x (MNIST's images 4.8x, Fashion-MNIST's
 * 1.8x); a claim beyond this ratio, or beyond IDX_SMALL for tiny files,
 * is refused. */
#define IDX_MAX_RATIO 64
#define IDX_SMALL ((int64_t)1 << 20)
/* gzread() takes an unsigned int length, so big reads go in pieces. */
#define IDX_CHUNK ((int64_t)1 << 30)

/* Read up to n bytes; returns the count read (short at end of file), or -1
 * on a read error. */
static int64_t read_full(gzFile f, unsigned char *buf, int64_t n) {
    int64_t got = 0;
    while (got < n) {
        int64_t want = n - got < IDX_CHUNK ? n - got : IDX_CHUNK;
        int r = gzread(f, buf + got, (unsigned)want);
        if (r < 0) return -1;
        if (r == 0) break;
        got += r;
    }
    return got;
}

static const char *gz_message(gzFile f) {
    int code = Z_OK;
    const char *msg = gzerror(f, &code);
    return code == Z_ERRNO ? strerror(errno) : msg;
}

kiln_tensor *kiln_idx_load(kiln_ctx *ctx, const char *path, bool as_labels, float scale) {
    kiln_tensor *out = NULL;
    unsigned char *bytes = NULL;
    gzFile f = NULL;
    /* declared up front so no goto jumps over an initialization */
    unsigned char head[4 + 4 * KILN_MAX_DIMS];
    int64_t shape[KILN_MAX_DIMS];
    int64_t got, n = 1, file_bytes;
    int ndim;
    struct stat sb;

    if (!ctx || !path) return kiln__err(KILN_ERR_ARG, "kiln_idx_load: ctx and path must not be NULL");

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__err(KILN_ERR_IO, "kiln_idx_load: cannot open %s: %s", path, strerror(errno));
    /* a pipe's size is unknown: its claims are bounded by the element cap only */
    file_bytes = fstat(fd, &sb) == 0 && S_ISREG(sb.st_mode) ? (int64_t)sb.st_size : -1;
    errno = 0;
    f = gzdopen(fd, "rb");
    if (!f) {
        /* gzdopen leaves errno at 0 when only its own allocation failed */
        if (errno == 0) kiln__err(KILN_ERR_OOM, "kiln_idx_load: %s: out of memory opening the file", path);
        else kiln__err(KILN_ERR_IO, "kiln_idx_load: cannot open %s: %s", path, strerror(errno));
        close(fd);
        goto cleanup;
    }

    got = read_full(f, head, 4);
    if (got < 0) {
        kiln__err(KILN_ERR_IO, "kiln_idx_load: reading %s: %s", path, gz_message(f));
        goto cleanup;
    }
#ifndef KILN_ZLIB
    if (got >= 2 && head[0] == 0x1f && head[1] == 0x8b) {
        kiln__err(KILN_ERR_UNSUPPORTED, "kiln_idx_load: %s is gzipped, and this kiln was built without zlib (ZLIB=0)",
                  path);
        goto cleanup;
    }
#endif
    if (got < 4 || head[0] != 0 || head[1] != 0) {
        kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s is not an IDX file (no 00 00 magic at the start)", path);
        goto cleanup;
    }
    if (head[2] != 0x08) {
        kiln__err(KILN_ERR_FORMAT,
                  "kiln_idx_load: %s: data type 0x%02x is not supported (only 0x08, unsigned byte)", path,
                  head[2]);
        goto cleanup;
    }
    ndim = head[3];
    if (ndim < 1 || ndim > KILN_MAX_DIMS) {
        kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s: %d dims (expected 1..%d)", path, ndim, KILN_MAX_DIMS);
        goto cleanup;
    }

    got = read_full(f, head + 4, 4 * (int64_t)ndim);
    if (got < 0) {
        kiln__err(KILN_ERR_IO, "kiln_idx_load: reading %s: %s", path, gz_message(f));
        goto cleanup;
    }
    if (got < 4 * ndim) {
        kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s: header truncated: expected %d dims, file ends after %d bytes",
                  path, ndim, (int)(4 + got));
        goto cleanup;
    }

    for (int i = 0; i < ndim; i++) {
        const unsigned char *p = head + 4 + 4 * i;
        shape[i] = (int64_t)p[0] << 24 | (int64_t)p[1] << 16 | (int64_t)p[2] << 8 | (int64_t)p[3];
    }
    for (int i = 0; i < ndim; i++) {
        if (shape[i] == 0) {
            kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s: dim %d is 0", path, i);
            goto cleanup;
        }
        /* divide instead of multiplying so the check itself cannot overflow */
        if (n > IDX_MAX_ELEMS / shape[i]) {
            char dims[96];
            kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s: shape %s has more than %lld elements", path,
                      kiln__dims_str(ndim, shape, dims), (long long)IDX_MAX_ELEMS);
            goto cleanup;
        }
        n *= shape[i];
    }
    if (!gzdirect(f) && file_bytes >= 0 && n > IDX_SMALL && n > IDX_MAX_RATIO * file_bytes) {
        kiln__err(KILN_ERR_FORMAT,
                  "kiln_idx_load: %s: the header claims %lld bytes of data, more than %d times the %lld bytes of the "
                  "gzipped file (a gzip bomb?); gunzip it to load it anyway", path, (long long)n, IDX_MAX_RATIO,
                  (long long)file_bytes);
        goto cleanup;
    }
    if ((uint64_t)n > SIZE_MAX / sizeof(float)) {
        kiln__err(KILN_ERR_OOM, "kiln_idx_load: %s: %lld elements do not fit in memory here", path, (long long)n);
        goto cleanup;
    }

    /* The buffer grows with the data actually read, up to the header's n:
     * a small (or gzipped) file whose header claims gigabytes is refused as
     * truncated after allocating about what it holds, not what it claims. */
    got = 0;
    for (int64_t cap = 0; got == cap && cap < n;) {
        int64_t next = cap ? (cap > n / 2 ? n : 2 * cap) : (n < IDX_FIRST_READ ? n : IDX_FIRST_READ);
        unsigned char *grown = kiln__realloc(bytes, (size_t)next);
        if (!grown) {
            kiln__err(KILN_ERR_OOM, "kiln_idx_load: %s: cannot allocate %lld bytes", path, (long long)next);
            goto cleanup;
        }
        bytes = grown;
        int64_t r = read_full(f, bytes + cap, next - cap);
        if (r < 0) {
            kiln__err(KILN_ERR_IO, "kiln_idx_load: reading %s: %s", path, gz_message(f));
            goto cleanup;
        }
        got = cap + r;
        cap = next;
    }
    if (got < n) {
        kiln__err(KILN_ERR_FORMAT, "kiln_idx_load: %s is truncated: expected %lld bytes of data, got %lld", path,
                  (long long)n, (long long)got);
        goto cleanup;
    }

    out = kiln_tensor_new(ctx, as_labels ? KILN_I32 : KILN_F32, ndim, shape);
    if (!out) {
        kiln__err_context("kiln_idx_load: %s", path);
        goto cleanup;
    }
    if (as_labels) {
        int32_t *dst = kiln_tensor_data(out);
        for (int64_t i = 0; i < n; i++) dst[i] = bytes[i];
    } else {
        float *dst = kiln_tensor_data(out);
        for (int64_t i = 0; i < n; i++) dst[i] = (float)bytes[i] * scale;
    }

cleanup:
    if (f) gzclose(f);
    free(bytes);
    return out;
}
