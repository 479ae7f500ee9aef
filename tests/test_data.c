/* test_data.c — models/data: Fashion-MNIST from its package, the fortunes
 * corpus and its split, and the seeded batch iterators. */
#include "data.h"
#include "kt.h"

#include <dirent.h>
#include <sys/stat.h>

KT_TEST(data_fashion_loads_both_splits) {
    kiln_ctx *ctx = kiln_ctx_new();
    data_images train, test;
    kiln_status st = data_fashion_load(ctx, NULL, DATA_TRAIN, DATA_FLAT, &train);
#ifndef KILN_ZLIB
    /* built with ZLIB=0: the packaged .gz files are refused, saying why */
    KT_CHECK(st == KILN_ERR_UNSUPPORTED && strstr(data_last_error(), "zlib"), "%s", data_last_error());
    kiln_ctx_free(ctx);
    (void)test;
    return;
#endif
    KT_REQUIRE(st == KILN_OK, "%s (make test installs it: scripts/deps.sh data)", data_last_error());
    KT_OK(data_fashion_load(ctx, NULL, DATA_TEST, DATA_NCHW, &test));
    KT_CHECK(train.n == 60000 && test.n == 10000, "sizes %lld %lld", (long long)train.n, (long long)test.n);
    KT_CHECK(kiln_tensor_ndim(train.images) == 2 && kiln_tensor_dim(train.images, 1) == 784, "flat shape");
    KT_CHECK(kiln_tensor_ndim(test.images) == 4 && kiln_tensor_dim(test.images, 1) == 1 &&
                 kiln_tensor_dim(test.images, 2) == 28 && kiln_tensor_dim(test.images, 3) == 28,
             "NCHW shape");
    KT_CHECK(kiln_tensor_dtype(train.labels) == KILN_I32 && kiln_tensor_numel(train.labels) == 60000, "labels");
    /* the first labels, as torchvision's FashionMNIST reads them */
    static const int32_t first_train[10] = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}, first_test[10] = {9, 2, 1, 1, 6, 1, 4, 6, 5, 7};
    const int32_t *l = kiln_tensor_data(train.labels), *lt = kiln_tensor_data(test.labels);
    KT_CHECK(!memcmp(l, first_train, sizeof first_train) && !memcmp(lt, first_test, sizeof first_test),
             "first labels %d %d %d / %d %d %d", l[0], l[1], l[2], lt[0], lt[1], lt[2]);
    int64_t count[10] = {0};
    for (int64_t i = 0; i < train.n; i++) count[l[i] >= 0 && l[i] < 10 ? l[i] : 0] += l[i] >= 0 && l[i] < 10;
    for (int k = 0; k < 10; k++) KT_CHECK(count[k] == 6000, "class %d: %lld images", k, (long long)count[k]);
    const float *px = kiln_tensor_data(train.images);
    double sum0 = 0, lo = 1, hi = 0;
    for (int64_t i = 0; i < 784; i++) sum0 += px[i];
    for (int64_t i = 0; i < train.n * 784; i += 7) lo = fmin(lo, px[i]), hi = fmax(hi, px[i]);
    /* image 0's bytes sum to 76247 */
    KT_CHECK(fabs(sum0 - 76247.0 / 255) < 1e-3, "image 0 sums to %g", sum0);
    KT_CHECK(lo == 0 && hi == 1, "pixels in [%g, %g]", lo, hi);
    KT_CHECK(!strcmp(data_fashion_class_name(9), "Ankle boot"), "class name");
    kiln_ctx_free(ctx);
}

KT_TEST(data_missing_files_say_what_to_install) {
    kiln_ctx *ctx = kiln_ctx_new();
    data_images d;
    KT_CHECK(data_fashion_load(ctx, "/nonexistent/fm", DATA_TRAIN, DATA_FLAT, &d) == KILN_ERR_IO, "status");
    KT_CHECK(strstr(data_last_error(), "/nonexistent/fm/train-images") && strstr(data_last_error(), "dataset-fashion-mnist") &&
                 strstr(data_last_error(), "deps.sh data"),
             "message: %s", data_last_error());
    data_corpus c;
    KT_CHECK(data_fortunes_load("/nonexistent/fortunes", &c) == KILN_ERR_IO, "status");
    KT_CHECK(strstr(data_last_error(), "/nonexistent/fortunes") && strstr(data_last_error(), "package fortunes"),
             "message: %s", data_last_error());
    kiln_ctx_free(ctx);
}

/* The corpus read here independently: the files without '.' in the name. */
static uint8_t *read_corpus(int64_t *n, int64_t *ends) {
    DIR *d = opendir(DATA_FORTUNES_DIR);
    struct dirent *e;
    char names[256][256];
    int count = 0;
    while (d && (e = readdir(d)) && count < 256) {
        char path[600];
        struct stat st;
        snprintf(path, sizeof path, "%s/%s", DATA_FORTUNES_DIR, e->d_name);
        if (!strchr(e->d_name, '.') && !stat(path, &st) && S_ISREG(st.st_mode)) snprintf(names[count++], 256, "%s", e->d_name);
    }
    if (d) closedir(d);
    qsort(names, (size_t)count, sizeof names[0], (int (*)(const void *, const void *))strcmp);
    uint8_t *buf = malloc(8 << 20);
    *n = 0;
    for (int i = 0; i < count; i++) {
        char path[600];
        snprintf(path, sizeof path, "%s/%.255s", DATA_FORTUNES_DIR, names[i]);
        FILE *f = fopen(path, "rb");
        *n += (int64_t)fread(buf + *n, 1, (size_t)((8 << 20) - *n), f);
        fclose(f);
        ends[i] = *n;
    }
    return buf;
}

KT_TEST(data_fortunes_split_is_a_partition) {
    data_corpus c;
    KT_REQUIRE(data_fortunes_load(NULL, &c) == KILN_OK, "%s", data_last_error());
    int64_t n, ends[256];
    uint8_t *all = read_corpus(&n, ends);
    KT_CHECK(c.total_bytes == n && c.train.n + c.val.n == n, "train %lld + val %lld vs %lld bytes",
             (long long)c.train.n, (long long)c.val.n, (long long)n);
    KT_CHECK(n > 2000000 && c.files > 30 && c.fortunes > 10000, "%lld bytes, %d files, %lld fortunes", (long long)n,
             c.files, (long long)c.fortunes);
    double frac = (double)c.val.n / (double)n;
    KT_CHECK(frac > 0.07 && frac < 0.13, "validation is %.3f of the text", frac);
    /* Walk the corpus record by record: each must be the next bytes of the
     * split the rule gives it, and the splits must be used up exactly. */
    int64_t tp = 0, vp = 0, rec = 0, start = 0, file = 0;
    bool ok = true;
    for (int64_t i = 0; i < n && ok; i++) {
        /* a record ends after a line "%" or where its file ends */
        while (ends[file] <= i) file++;
        int64_t fs = file ? ends[file - 1] : 0, fe = ends[file];
        bool sep = (i == fs || all[i - 1] == '\n') && all[i] == '%' && (i + 1 == fe || all[i + 1] == '\n');
        int64_t stop = sep ? (i + 1 < fe ? i + 2 : i + 1) : i + 1 == fe ? fe : -1;
        if (stop < 0) continue;
        data_text *t = rec % 10 == 9 ? &c.val : &c.train;
        int64_t *pos = rec % 10 == 9 ? &vp : &tp;
        int64_t len = stop - start;
        if (*pos + len > t->n || memcmp(t->bytes + *pos, all + start, (size_t)len)) {
            ok = false;
            break;
        }
        *pos += len;
        rec++;
        start = stop;
        i = stop - 1;
    }
    KT_CHECK(ok && tp == c.train.n && vp == c.val.n && rec == c.fortunes, "partition broken at record %lld (train %lld/%lld, val %lld/%lld)",
             (long long)rec, (long long)tp, (long long)c.train.n, (long long)vp, (long long)c.val.n);
    free(all);
    data_corpus_free(&c);
}

KT_TEST(data_loader_epochs_are_seeded_permutations) {
    kiln_ctx *ctx = kiln_ctx_new();
    const int64_t N = 103, S = 3, B = 10;
    kiln_tensor *xs = kiln_new_2d(ctx, KILN_F32, N, S), *ys = kiln_new_1d(ctx, KILN_I32, N);
    float *xv = kiln_tensor_data(xs);
    int32_t *yv = kiln_tensor_data(ys);
    for (int64_t i = 0; i < N; i++) {
        for (int64_t k = 0; k < S; k++) xv[i * S + k] = (float)(i * S + k);
        yv[i] = (int32_t)(i % 7);
    }
    kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, B, S), *y = kiln_new_1d(ctx, KILN_I32, B);
    data_loader *a = data_loader_new(xs, ys, B, 42, true, false), *b = data_loader_new(xs, ys, B, 42, true, false);
    data_loader *c = data_loader_new(xs, ys, B, 43, true, false);
    KT_NOTNULL(a && b && c);
    KT_CHECK(data_loader_batches_per_epoch(a) == 11, "batches %lld", (long long)data_loader_batches_per_epoch(a));
    int32_t order[2][103], other[103];
    for (int e = 0; e < 2; e++) {
        int seen[103] = {0};
        int64_t got = 0, r, batches = 0;
        while ((r = data_loader_next(a, x, y)) > 0) {
            const int32_t *idx = data_loader_indices(a);
            float xb[30];
            int32_t yb[10];
            KT_OK(kiln_tensor_get_f32(x, xb, B * S));
            KT_OK(kiln_tensor_get_i32(y, yb, B));
            for (int64_t k = 0; k < B; k++) {
                if (k < r) {
                    seen[idx[k]]++;
                    order[e][got + k] = idx[k];
                    KT_CHECK(xb[k * S + 2] == (float)(idx[k] * S + 2) && yb[k] == idx[k] % 7, "row %lld", (long long)k);
                } else {
                    KT_CHECK(xb[k * S] == 0 && yb[k] == DATA_IGNORE, "padding row %lld", (long long)k);
                }
            }
            got += r;
            batches++;
        }
        KT_CHECK(r == 0 && got == N && batches == 11, "epoch %d: %lld samples in %lld batches", e, (long long)got,
                 (long long)batches);
        for (int64_t i = 0; i < N; i++) KT_CHECK(seen[i] == 1, "epoch %d: sample %lld seen %d times", e, (long long)i, seen[i]);
    }
    KT_CHECK(memcmp(order[0], order[1], sizeof order[0]), "epochs 1 and 2 in the same order");
    /* the same seed gives the same order; another seed another */
    data_loader_free(b);
    b = data_loader_new(xs, ys, B, 42, true, false);
    for (int64_t got = 0, r; (r = data_loader_next(b, x, y)) > 0; got += r) memcpy(other + got, data_loader_indices(b), (size_t)r * 4);
    KT_CHECK(!memcmp(other, order[0], sizeof other), "seed 42 not reproducible");
    for (int64_t got = 0, r; (r = data_loader_next(c, x, y)) > 0; got += r) memcpy(other + got, data_loader_indices(c), (size_t)r * 4);
    KT_CHECK(memcmp(other, order[0], sizeof other), "seeds 42 and 43 gave the same order");
    /* resume at epoch 1, batch 2 */
    KT_OK(data_loader_seek(b, 1, 2));
    KT_CHECK(data_loader_next(b, x, y) == B && !memcmp(data_loader_indices(b), order[1] + 2 * B, B * 4), "seek");
    /* drop_last: 10 full batches of distinct samples */
    data_loader *d = data_loader_new(xs, ys, B, 7, true, true);
    int seen[103] = {0}, batches = 0, r;
    while ((r = (int)data_loader_next(d, x, NULL)) > 0) {
        KT_CHECK(r == B, "partial batch kept");
        for (int k = 0; k < r; k++) seen[data_loader_indices(d)[k]]++;
        batches++;
    }
    int distinct = 0;
    for (int i = 0; i < N; i++) distinct += seen[i] == 1;
    KT_CHECK(batches == 10 && distinct == 100, "%d batches, %d distinct", batches, distinct);
    /* no shuffle: 0..N-1 */
    data_loader *s = data_loader_new(xs, NULL, B, 1, false, false);
    KT_CHECK(data_loader_next(s, x, NULL) == B && data_loader_indices(s)[9] == 9, "unshuffled");
    KT_CHECK(data_loader_next(s, x, y) == -1 && strstr(data_last_error(), "data_loader_next"), "labels without labels");
    data_loader_free(a), data_loader_free(b), data_loader_free(c), data_loader_free(d), data_loader_free(s);
    kiln_ctx_free(ctx);
}

KT_TEST(data_text_windows_and_eval_pass) {
    kiln_ctx *ctx = kiln_ctx_new();
    uint8_t bytes[1000];
    for (int i = 0; i < 1000; i++) bytes[i] = (uint8_t)((i * 7 + i / 13) & 0xff);
    data_text t = {bytes, 1000};
    const int64_t B = 4, T = 64;
    kiln_tensor *x = kiln_new_2d(ctx, KILN_I32, B, T), *y = kiln_new_2d(ctx, KILN_I32, B, T);
    data_text_sampler *a = data_text_sampler_new(&t, B, T, 5), *b = data_text_sampler_new(&t, B, T, 5);
    data_text_sampler *c = data_text_sampler_new(&t, B, T, 6);
    KT_NOTNULL(a && b && c);
    int32_t xa[256], ya[256], xb[256], yb[256];
    bool differ = false;
    for (int step = 0; step < 20; step++) {
        KT_OK(data_text_sampler_next(a, x, y));
        KT_OK(kiln_tensor_get_i32(x, xa, B * T));
        KT_OK(kiln_tensor_get_i32(y, ya, B * T));
        KT_OK(data_text_sampler_next(b, x, y));
        KT_OK(kiln_tensor_get_i32(x, xb, B * T));
        KT_OK(kiln_tensor_get_i32(y, yb, B * T));
        KT_CHECK(!memcmp(xa, xb, sizeof xa) && !memcmp(ya, yb, sizeof ya), "seed not reproducible");
        KT_OK(data_text_sampler_next(c, x, y));
        KT_OK(kiln_tensor_get_i32(x, xb, B * T));
        differ |= memcmp(xa, xb, sizeof xa) != 0;
        for (int r = 0; r < B; r++) {
            /* a window of the text, and y is x shifted by one byte */
            bool found = false;
            for (int o = 0; o + T < 1000 && !found; o++) {
                found = true;
                for (int k = 0; k < T && found; k++) found = xa[r * T + k] == bytes[o + k] && ya[r * T + k] == bytes[o + k + 1];
            }
            KT_CHECK(found, "row %d is not a window of the text", r);
        }
    }
    KT_CHECK(differ, "seeds 5 and 6 gave the same windows");
    /* evaluation: every byte after the first is a target exactly once */
    int64_t nb = data_text_eval_batches(&t, B, T), targets = 0;
    KT_CHECK(nb == 4, "%lld eval batches", (long long)nb);
    int hit[1000] = {0};
    for (int64_t i = 0; i < nb; i++) {
        int64_t k = data_text_eval_batch(&t, B, T, i, x, y);
        KT_REQUIRE(k > 0, "%s", data_last_error());
        KT_OK(kiln_tensor_get_i32(y, ya, B * T));
        KT_OK(kiln_tensor_get_i32(x, xa, B * T));
        for (int64_t j = 0; j < B * T; j++) {
            int64_t p = i * B * T + j + 1;
            if (ya[j] == DATA_IGNORE) continue;
            KT_REQUIRE(p < 1000 && ya[j] == bytes[p] && xa[j] == bytes[p - 1], "eval target %lld", (long long)p);
            hit[p]++;
        }
        targets += k;
    }
    KT_CHECK(targets == 999, "%lld targets", (long long)targets);
    for (int p = 1; p < 1000; p++) KT_CHECK(hit[p] == 1, "byte %d a target %d times", p, hit[p]);
    KT_CHECK(data_text_eval_batch(&t, B, T, nb, x, y) == -1, "batch past the end");
    data_text_sampler_free(a), data_text_sampler_free(b), data_text_sampler_free(c);
    kiln_ctx_free(ctx);
}
