/* data.c — Fashion-MNIST, the fortunes corpus, and batch iterators (see
 * data.h). Public API of kiln only. */
#include "data.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static _Thread_local char err_msg[1024];

const char *data_last_error(void) { return err_msg; }

static void set_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_err(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
}

#define INSTALL_HINT "install it with `scripts/deps.sh data` (make demo does) or pass another directory"

/* splitmix64: small, seeded, the same on every platform. */
static uint64_t next_random(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) without modulo bias. */
static uint64_t random_below(uint64_t *state, uint64_t n) {
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    for (;;) {
        uint64_t r = next_random(state);
        if (r < limit) return r % n;
    }
}

static bool file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- Fashion-MNIST ---------------------------------------------------- */

static const char *const class_names[DATA_FASHION_CLASSES] = {
    "T-shirt/top", "Trouser", "Pullover", "Dress", "Coat", "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

const char *data_fashion_class_name(int label) {
    return label >= 0 && label < DATA_FASHION_CLASSES ? class_names[label] : "?";
}

void data_fashion_standardize(data_images *d) {
    float *px = kiln_tensor_data(d->images); /* a host leaf: edited in place */
    for (int64_t i = 0, n = kiln_tensor_numel(d->images); i < n; i++) px[i] = (px[i] - DATA_FASHION_MEAN) / DATA_FASHION_STD;
}

/* dir/name.gz, or dir/name when only the uncompressed file is there. */
static kiln_tensor *load_idx(kiln_ctx *ctx, const char *dir, const char *name, bool labels, kiln_status *st) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s.gz", dir, name);
    if (!file_exists(path)) {
        char plain[4096];
        snprintf(plain, sizeof plain, "%s/%s", dir, name);
        if (!file_exists(plain)) {
            set_err("Fashion-MNIST: %s is missing (package dataset-fashion-mnist): " INSTALL_HINT, path);
            *st = KILN_ERR_IO;
            return NULL;
        }
        memcpy(path, plain, sizeof path);
    }
    kiln_tensor *t = kiln_idx_load(ctx, path, labels, 1.0f / 255.0f); /* pixels 0..255 -> 0..1 */
    if (!t) {
        set_err("Fashion-MNIST: %s", kiln_last_error());
        *st = kiln_last_status();
    }
    return t;
}

kiln_status data_fashion_load(kiln_ctx *ctx, const char *dir, data_split split, data_layout layout,
                              data_images *out) {
    if (!ctx || !out || (split != DATA_TRAIN && split != DATA_TEST) || (layout != DATA_FLAT && layout != DATA_NCHW)) {
        set_err("data_fashion_load: bad argument");
        return KILN_ERR_ARG;
    }
    memset(out, 0, sizeof *out);
    if (!dir) dir = DATA_FASHION_DIR;
    const char *prefix = split == DATA_TRAIN ? "train" : "t10k";
    char img_name[64], lbl_name[64];
    snprintf(img_name, sizeof img_name, "%s-images-idx3-ubyte", prefix);
    snprintf(lbl_name, sizeof lbl_name, "%s-labels-idx1-ubyte", prefix);

    /* The reader's [N, 28, 28] tensor lands in a scratch context, so that
     * only the tensor of the asked-for shape stays in the caller's. */
    kiln_ctx *tmp = kiln_ctx_new();
    if (!tmp) {
        set_err("data_fashion_load: out of memory");
        return KILN_ERR_OOM;
    }
    kiln_status st = KILN_ERR_FORMAT;
    kiln_tensor *img = load_idx(tmp, dir, img_name, false, &st);
    kiln_tensor *lbl = img ? load_idx(tmp, dir, lbl_name, true, &st) : NULL;
    if (!img || !lbl) goto done;
    const int side = DATA_FASHION_SIDE;
    int64_t n = kiln_tensor_dim(img, 0);
    if (kiln_tensor_ndim(img) != 3 || kiln_tensor_dim(img, 1) != side || kiln_tensor_dim(img, 2) != side ||
        kiln_tensor_numel(lbl) != n) {
        set_err("Fashion-MNIST in %s: expected %s as [N, 28, 28] images with N labels", dir, prefix);
        goto done;
    }
    const int32_t *lv = kiln_tensor_data(lbl);
    for (int64_t i = 0; i < n; i++)
        if (lv[i] < 0 || lv[i] >= DATA_FASHION_CLASSES) {
            set_err("Fashion-MNIST in %s: label %d of image %lld is not a class 0..9", dir, lv[i], (long long)i);
            goto done;
        }
    kiln_tensor *images = layout == DATA_FLAT ? kiln_new_2d(ctx, KILN_F32, n, side * side)
                                              : kiln_new_4d(ctx, KILN_F32, n, 1, side, side);
    kiln_tensor *labels = kiln_new_1d(ctx, KILN_I32, n);
    /* fresh host leaves: a plain copy is the fastest way in */
    void *idst = images ? kiln_tensor_data(images) : NULL, *ldst = labels ? kiln_tensor_data(labels) : NULL;
    if (!idst || !ldst) {
        st = kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
        set_err("data_fashion_load: %s", kiln_last_error());
        goto done;
    }
    memcpy(idst, kiln_tensor_data(img), (size_t)(n * side * side) * sizeof(float));
    memcpy(ldst, lv, (size_t)n * sizeof(int32_t));
    out->images = images;
    out->labels = labels;
    out->n = n;
    st = KILN_OK;
done:
    kiln_ctx_free(tmp);
    return st;
}

/* ---- batches of samples ------------------------------------------------ */

struct data_loader {
    const float *x;     /* N rows of 'sample' floats */
    const int32_t *y;   /* N labels, or NULL */
    int64_t n, sample, batch;
    uint64_t seed;
    bool shuffle, drop_last;
    int32_t *order;     /* this epoch's order of the samples */
    int64_t epoch;      /* the epoch 'order' holds */
    int64_t pos;        /* next position in order */
    int64_t last_rows;  /* rows of the batch last returned */
    int32_t *last_idx;  /* its sample indices */
    float *xbuf;        /* staging for kiln_tensor_set_f32 */
    int32_t *ybuf;
};

/* Fisher-Yates from the identity, seeded by (seed, epoch) only. */
static void make_order(data_loader *l) {
    for (int64_t i = 0; i < l->n; i++) l->order[i] = (int32_t)i;
    if (!l->shuffle) return;
    uint64_t rng = l->seed ^ (0x6a09e667f3bcc909ull * (uint64_t)(l->epoch + 1));
    next_random(&rng);
    for (int64_t i = l->n - 1; i > 0; i--) {
        int64_t j = (int64_t)random_below(&rng, (uint64_t)(i + 1));
        int32_t t = l->order[i];
        l->order[i] = l->order[j];
        l->order[j] = t;
    }
}

data_loader *data_loader_new(kiln_tensor *inputs, kiln_tensor *labels, int64_t batch, uint64_t seed, bool shuffle,
                             bool drop_last) {
    if (!inputs || kiln_tensor_dtype(inputs) != KILN_F32 || kiln_tensor_ndim(inputs) < 1 || batch < 1) {
        set_err("data_loader_new: need an f32 inputs tensor and batch >= 1");
        return NULL;
    }
    int64_t n = kiln_tensor_dim(inputs, 0);
    if (n < 1 || n > INT32_MAX || (labels && (kiln_tensor_dtype(labels) != KILN_I32 || kiln_tensor_numel(labels) != n))) {
        set_err("data_loader_new: %lld samples with %lld labels (need i32 labels, one per sample)", (long long)n,
                labels ? (long long)kiln_tensor_numel(labels) : 0LL);
        return NULL;
    }
    if (drop_last && batch > n) {
        set_err("data_loader_new: batch %lld is more than the %lld samples", (long long)batch, (long long)n);
        return NULL;
    }
    data_loader *l = calloc(1, sizeof *l);
    if (!l) goto oom;
    l->x = kiln_tensor_data(inputs);
    l->y = labels ? kiln_tensor_data(labels) : NULL;
    if (!l->x || (labels && !l->y)) {
        set_err("data_loader_new: the data tensors have no host data: %s", kiln_last_error());
        free(l);
        return NULL;
    }
    l->n = n;
    l->sample = kiln_tensor_numel(inputs) / n;
    l->batch = batch;
    l->seed = seed;
    l->shuffle = shuffle;
    l->drop_last = drop_last;
    l->order = malloc((size_t)n * sizeof *l->order);
    l->last_idx = malloc((size_t)batch * sizeof *l->last_idx);
    l->xbuf = malloc((size_t)(batch * l->sample) * sizeof *l->xbuf);
    l->ybuf = malloc((size_t)batch * sizeof *l->ybuf);
    if (!l->order || !l->last_idx || !l->xbuf || !l->ybuf) goto oom;
    make_order(l);
    return l;
oom:
    data_loader_free(l);
    set_err("data_loader_new: out of memory");
    return NULL;
}

void data_loader_free(data_loader *l) {
    if (!l) return;
    free(l->order);
    free(l->last_idx);
    free(l->xbuf);
    free(l->ybuf);
    free(l);
}

int64_t data_loader_batches_per_epoch(const data_loader *l) {
    return l->drop_last ? l->n / l->batch : (l->n + l->batch - 1) / l->batch;
}

int64_t data_loader_epoch(const data_loader *l) { return l->epoch; }

const int32_t *data_loader_indices(const data_loader *l) { return l->last_idx; }

kiln_status data_loader_seek(data_loader *l, int64_t epoch, int64_t batch) {
    if (!l || epoch < 0 || batch < 0 || batch > data_loader_batches_per_epoch(l)) {
        set_err("data_loader_seek: epoch %lld, batch %lld out of range", (long long)epoch, (long long)batch);
        return KILN_ERR_ARG;
    }
    l->epoch = epoch;
    make_order(l);
    l->pos = batch * l->batch;
    return KILN_OK;
}

int64_t data_loader_next(data_loader *l, kiln_tensor *x, kiln_tensor *y) {
    int64_t rows = l->n - l->pos < l->batch ? l->n - l->pos : l->batch;
    if (rows <= 0 || (rows < l->batch && l->drop_last)) {
        /* the end of an epoch: say so once, then start the next */
        l->epoch++;
        make_order(l);
        l->pos = 0;
        l->last_rows = 0;
        return 0;
    }
    if (!x || kiln_tensor_numel(x) != l->batch * l->sample || (y && kiln_tensor_numel(y) != l->batch) ||
        (y && !l->y)) {
        set_err("data_loader_next: x must hold %lld x %lld values and y %lld labels", (long long)l->batch,
                (long long)l->sample, (long long)l->batch);
        return -1;
    }
    for (int64_t r = 0; r < l->batch; r++) {
        float *dst = l->xbuf + r * l->sample;
        if (r < rows) {
            int32_t k = l->order[l->pos + r];
            l->last_idx[r] = k;
            memcpy(dst, l->x + (int64_t)k * l->sample, (size_t)l->sample * sizeof *dst);
            l->ybuf[r] = l->y ? l->y[k] : 0;
        } else {
            memset(dst, 0, (size_t)l->sample * sizeof *dst);
            l->ybuf[r] = DATA_IGNORE;
        }
    }
    if (kiln_tensor_set_f32(x, l->xbuf, l->batch * l->sample) || (y && kiln_tensor_set_i32(y, l->ybuf, l->batch))) {
        set_err("data_loader_next: %s", kiln_last_error());
        return -1;
    }
    l->pos += rows;
    l->last_rows = rows;
    return rows;
}

/* ---- the fortunes text ------------------------------------------------- */

static int cmp_names(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* Append the file's records to train or val; *record counts fortunes over
 * the whole corpus. A record ends after a line that is just "%" (or at the
 * end of the file). */
static void split_file(const uint8_t *b, int64_t n, int64_t *record, data_corpus *c) {
    int64_t start = 0;
    for (int64_t i = 0; i < n; i++) {
        bool line_start = i == 0 || b[i - 1] == '\n';
        bool end = i + 1 == n;
        int64_t stop = -1;
        if (line_start && b[i] == '%' && (i + 1 == n || b[i + 1] == '\n')) stop = i + 1 < n ? i + 2 : i + 1;
        else if (end) stop = n;
        if (stop < 0) continue;
        data_text *t = *record % DATA_FORTUNES_VAL_EVERY == DATA_FORTUNES_VAL_EVERY - 1 ? &c->val : &c->train;
        memcpy(t->bytes + t->n, b + start, (size_t)(stop - start));
        t->n += stop - start;
        (*record)++;
        start = stop;
        i = stop - 1;
    }
}

kiln_status data_fortunes_load(const char *dir, data_corpus *out) {
    if (!out) {
        set_err("data_fortunes_load: out is NULL");
        return KILN_ERR_ARG;
    }
    memset(out, 0, sizeof *out);
    if (!dir) dir = DATA_FORTUNES_DIR;
    DIR *d = opendir(dir);
    if (!d) {
        set_err("fortunes: cannot open %s (%s): the text comes from the package fortunes; " INSTALL_HINT, dir,
                strerror(errno));
        return KILN_ERR_IO;
    }
    /* the plain-text files: no '.' in the name (not .dat, .u8), not directories */
    char **names = NULL;
    int count = 0, cap = 0;
    int64_t total = 0;
    kiln_status st = KILN_OK;
    struct dirent *e;
    char path[4096];
    while ((e = readdir(d))) {
        if (strchr(e->d_name, '.')) continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        struct stat sb;
        if (stat(path, &sb) || !S_ISREG(sb.st_mode)) continue;
        if (count == cap) {
            cap = cap ? 2 * cap : 64;
            char **nn = realloc(names, (size_t)cap * sizeof *names);
            if (!nn) goto oom;
            names = nn;
        }
        if (!(names[count] = strdup(e->d_name))) goto oom;
        count++;
        total += sb.st_size;
    }
    closedir(d);
    d = NULL;
    if (count == 0 || total < 2) {
        set_err("fortunes: no text files in %s: the text comes from the package fortunes; " INSTALL_HINT, dir);
        st = KILN_ERR_IO;
        goto done;
    }
    qsort(names, (size_t)count, sizeof *names, cmp_names);
    out->train.bytes = malloc((size_t)total);
    out->val.bytes = malloc((size_t)total);
    uint8_t *buf = malloc((size_t)total);
    if (!out->train.bytes || !out->val.bytes || !buf) {
        free(buf);
        goto oom;
    }
    int64_t record = 0, read_total = 0;
    for (int i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        FILE *f = fopen(path, "rb");
        /* a file that grew since stat() is read only up to what fits */
        size_t got = f ? fread(buf, 1, (size_t)(total - read_total), f) : 0;
        bool bad = !f || ferror(f);
        if (f) fclose(f);
        if (bad) {
            set_err("fortunes: cannot read %s", path);
            st = KILN_ERR_IO;
            free(buf);
            goto done;
        }
        split_file(buf, (int64_t)got, &record, out);
        read_total += (int64_t)got;
    }
    free(buf);
    out->fortunes = record;
    out->total_bytes = read_total;
    out->files = count;
    goto done;
oom:
    set_err("data_fortunes_load: out of memory");
    st = KILN_ERR_OOM;
done:
    if (d) closedir(d);
    for (int i = 0; i < count; i++) free(names[i]);
    free(names);
    if (st) data_corpus_free(out);
    return st;
}

void data_corpus_free(data_corpus *c) {
    if (!c) return;
    free(c->train.bytes);
    free(c->val.bytes);
    memset(c, 0, sizeof *c);
}

struct data_text_sampler {
    const data_text *text;
    int64_t batch, seq;
    uint64_t rng;
    int32_t *xbuf, *ybuf;
};

data_text_sampler *data_text_sampler_new(const data_text *text, int64_t batch, int64_t seq, uint64_t seed) {
    if (!text || !text->bytes || batch < 1 || seq < 1 || text->n < seq + 1) {
        set_err("data_text_sampler_new: need batch >= 1 and a text longer than seq = %lld", (long long)seq);
        return NULL;
    }
    data_text_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->xbuf = malloc((size_t)(batch * seq) * sizeof *s->xbuf);
        s->ybuf = malloc((size_t)(batch * seq) * sizeof *s->ybuf);
    }
    if (!s || !s->xbuf || !s->ybuf) {
        data_text_sampler_free(s);
        set_err("data_text_sampler_new: out of memory");
        return NULL;
    }
    s->text = text;
    s->batch = batch;
    s->seq = seq;
    s->rng = seed;
    return s;
}

void data_text_sampler_free(data_text_sampler *s) {
    if (!s) return;
    free(s->xbuf);
    free(s->ybuf);
    free(s);
}

static bool check_xy(const char *fn, kiln_tensor *x, kiln_tensor *y, int64_t n) {
    if (x && y && kiln_tensor_numel(x) == n && kiln_tensor_numel(y) == n) return true;
    set_err("%s: x and y must each hold %lld values", fn, (long long)n);
    return false;
}

kiln_status data_text_sampler_next(data_text_sampler *s, kiln_tensor *x, kiln_tensor *y) {
    int64_t T = s->seq, n = s->batch * T;
    if (!check_xy("data_text_sampler_next", x, y, n)) return KILN_ERR_SHAPE;
    const uint8_t *b = s->text->bytes;
    for (int64_t r = 0; r < s->batch; r++) {
        int64_t o = (int64_t)random_below(&s->rng, (uint64_t)(s->text->n - T));
        for (int64_t t = 0; t < T; t++) {
            s->xbuf[r * T + t] = b[o + t];
            s->ybuf[r * T + t] = b[o + t + 1];
        }
    }
    if (kiln_tensor_set_i32(x, s->xbuf, n) || kiln_tensor_set_i32(y, s->ybuf, n)) {
        set_err("data_text_sampler_next: %s", kiln_last_error());
        return kiln_last_status();
    }
    return KILN_OK;
}

int64_t data_text_eval_batches(const data_text *text, int64_t batch, int64_t seq) {
    if (!text || text->n < 2 || batch < 1 || seq < 1) return 0;
    int64_t windows = (text->n - 1 + seq - 1) / seq;
    return (windows + batch - 1) / batch;
}

int64_t data_text_eval_batch(const data_text *text, int64_t batch, int64_t seq, int64_t i, kiln_tensor *x,
                             kiln_tensor *y) {
    int64_t n = batch * seq;
    if (i < 0 || i >= data_text_eval_batches(text, batch, seq)) {
        set_err("data_text_eval_batch: batch %lld out of range", (long long)i);
        return -1;
    }
    if (!check_xy("data_text_eval_batch", x, y, n)) return -1;
    int32_t *buf = malloc(2 * (size_t)n * sizeof *buf);
    if (!buf) {
        set_err("data_text_eval_batch: out of memory");
        return -1;
    }
    int32_t *xb = buf, *yb = buf + n;
    int64_t targets = 0;
    for (int64_t r = 0; r < batch; r++)
        for (int64_t t = 0; t < seq; t++) {
            int64_t p = (i * batch + r) * seq + t; /* position of the input byte */
            bool in = p + 1 < text->n;
            xb[r * seq + t] = in ? text->bytes[p] : 0;
            yb[r * seq + t] = in ? text->bytes[p + 1] : DATA_IGNORE;
            targets += in;
        }
    int64_t ret = targets;
    if (kiln_tensor_set_i32(x, xb, n) || kiln_tensor_set_i32(y, yb, n)) {
        set_err("data_text_eval_batch: %s", kiln_last_error());
        ret = -1;
    }
    free(buf);
    return ret;
}
