/* test_idx.c — the IDX (MNIST) reader on files written here: valid gzip
 * and plain files, and corrupt, truncated and hostile headers. */
#include "kt.h"

#include <string.h>
#include <unistd.h>
#ifdef KILN_ZLIB
#include <zlib.h>
#define HAVE_GZ 1
#else
#define HAVE_GZ 0 /* built with ZLIB=0: plain files only */
#endif

static void write_file(const char *path, const unsigned char *b, size_t n, bool gz) {
    if (gz) {
#ifdef KILN_ZLIB
        gzFile f = gzopen(path, "wb");
        gzwrite(f, b, (unsigned)n);
        gzclose(f);
#endif
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(b, 1, n, f);
        fclose(f);
    }
}

KT_TEST(idx_reads_images_and_labels) {
    char path[] = "/tmp/kiln-idx-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    const unsigned char img[] = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 1, 0, 51, 102, 255, 1, 2};
    kiln_ctx *ctx = kiln_ctx_new();
    for (int gz = 0; gz <= HAVE_GZ; gz++) {
        write_file(path, img, sizeof img, gz);
        kiln_tensor *t = kiln_idx_load(ctx, path, false, 1.0f / 255);
        KT_NOTNULL(t);
        KT_CHECK(kiln_tensor_ndim(t) == 3 && kiln_tensor_dim(t, 0) == 2 && kiln_tensor_dim(t, 2) == 1, "shape");
        float v[4];
        KT_OK(kiln_tensor_get_f32(t, v, 4));
        KT_CHECK(v[0] == 0 && fabsf(v[1] - 0.2f) < 1e-6f && fabsf(v[3] - 1.0f) < 1e-6f, "values %g %g", v[1], v[3]);
    }
    const unsigned char lab[] = {0, 0, 8, 1, 0, 0, 0, 3, 9, 0, 4};
    write_file(path, lab, sizeof lab, HAVE_GZ);
    kiln_tensor *l = kiln_idx_load(ctx, path, true, 1.0f);
    KT_NOTNULL(l);
    int32_t iv[3];
    KT_OK(kiln_tensor_get_i32(l, iv, 3));
    KT_CHECK(kiln_tensor_dtype(l) == KILN_I32 && iv[0] == 9 && iv[2] == 4, "labels");
    unlink(path);
    kiln_ctx_free(ctx);
}

KT_TEST(idx_rejects_bad_files) {
    char path[] = "/tmp/kiln-idx-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    const struct {
        const char *what;
        unsigned char b[24];
        size_t n;
    } bad[] = {
        {"bad magic", {1, 0, 8, 1, 0, 0, 0, 1, 5}, 9},
        {"int32 data type", {0, 0, 0x0c, 1, 0, 0, 0, 1, 5, 0, 0, 0}, 12},
        {"zero dims", {0, 0, 8, 0}, 4},
        {"too many dims", {0, 0, 8, 9, 0, 0, 0, 1}, 8},
        {"a zero dim", {0, 0, 8, 2, 0, 0, 0, 0, 0, 0, 0, 1}, 12},
        {"truncated header", {0, 0, 8, 2, 0, 0}, 6},
        {"truncated data", {0, 0, 8, 1, 0, 0, 0, 5, 1, 2}, 10},
        {"hostile dims", {0, 0, 8, 3, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255, 255}, 16},
        {"empty file", {0}, 0},
    };
    kiln_ctx *ctx = kiln_ctx_new();
    size_t before = kiln_ctx_storage_bytes(ctx);
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        write_file(path, bad[i].b, bad[i].n, i % 2);
        kiln_tensor *t = kiln_idx_load(ctx, path, false, 1.0f);
        KT_CHECK(!t && kiln_last_status() == KILN_ERR_FORMAT, "%s: status %s", bad[i].what,
                 kiln_status_name(kiln_last_status()));
        KT_CHECK(strstr(kiln_last_error(), "kiln_idx_load"), "%s: message %s", bad[i].what, kiln_last_error());
    }
    KT_CHECK(kiln_ctx_storage_bytes(ctx) == before, "a rejected file allocated storage");
    unlink(path);
    KT_CHECK(!kiln_idx_load(ctx, "/nonexistent/kiln.idx", false, 1) && kiln_last_status() == KILN_ERR_IO &&
                 strstr(kiln_last_error(), "/nonexistent/kiln.idx"),
             "missing file: %s", kiln_last_error());
    kiln_ctx_free(ctx);
}

#ifdef KILN_ZLIB
/* An IDX file of [d0, 1024, 1024] bytes whose gzip stream holds `zeros`
 * zero bytes of data (all of it when zeros = d0 MiB, else a truncated
 * bomb): deflate packs a MiB of zeros in about 1 KiB. */
static void write_bomb(const char *path, int d0, int64_t zeros) {
    unsigned char head[16] = {0, 0, 8, 3, 0, 0, (unsigned char)(d0 >> 8), (unsigned char)d0, 0, 0, 4, 0, 0, 0, 4, 0};
    static unsigned char mib[1 << 20];
    gzFile f = gzopen(path, "wb9");
    gzwrite(f, head, sizeof head);
    for (int64_t left = zeros; left > 0; left -= sizeof mib)
        gzwrite(f, mib, (unsigned)(left < (int64_t)sizeof mib ? left : (int64_t)sizeof mib));
    gzclose(f);
}

/* A gzipped file may not make kiln allocate more than 64 times its size:
 * a whole bomb (16 MiB of zeros in ~17 KiB, loaded as 64 MiB of f32) and
 * a truncated one (claiming 2 GiB, holding 16 MiB) are refused from the
 * header, before anything is inflated. */
KT_TEST(idx_gzip_bombs_refused_before_inflating) {
    char path[] = "/tmp/kiln-idx-bomb-XXXXXX";
    int fd = mkstemp(path);
    close(fd);
    kiln_ctx *ctx = kiln_ctx_new();
    const struct {
        const char *what;
        int d0;
    } bombs[] = {{"whole bomb", 16}, {"truncated bomb", 2048}};
    for (int i = 0; i < 2; i++) {
        write_bomb(path, bombs[i].d0, (int64_t)16 << 20);
        kiln_clear_error();
        KT_CHECK(!kiln_idx_load(ctx, path, false, 1.0f), "%s loaded", bombs[i].what);
        KT_CHECK(kiln_last_status() == KILN_ERR_FORMAT && strstr(kiln_last_error(), "more than 64 times") &&
                     strstr(kiln_last_error(), path),
                 "%s: %s: %s", bombs[i].what, kiln_status_name(kiln_last_status()), kiln_last_error());
    }
    KT_CHECK(kiln_ctx_storage_bytes(ctx) == 0, "a refused file allocated storage");
    /* data that inflates as real data sets do (MNIST's images 4.8x) loads */
    enum { N = 3 << 20 };
    unsigned char *img = malloc(16 + N);
    memcpy(img, (unsigned char[16]){0, 0, 8, 3, 0, 0, 0, 3, 0, 0, 4, 0, 0, 0, 4, 0}, 16);
    uint32_t r = 1;
    for (int i = 0; i < N; i++) {
        r = r * 1664525u + 1013904223u;
        img[16 + i] = (r >> 24) < 200 ? 0 : (unsigned char)(r >> 16);
    }
    write_file(path, img, 16 + N, true);
    kiln_tensor *t = kiln_idx_load(ctx, path, false, 1.0f);
    KT_CHECK(t && kiln_tensor_numel(t) == N, "compressible data: %s", kiln_last_error());
    free(img);
    unlink(path);
    kiln_ctx_free(ctx);
}
#endif
