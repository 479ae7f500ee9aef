/* safetensors.c — reading and writing Hugging Face's safetensors format
 * (the layout is in include/kiln.h). The reader maps the file and checks
 * the whole header before anything is read: the rules are those of the
 * reference implementation's validation (safetensors/src/tensor.rs), so a
 * file it accepts opens here and a file written here loads in
 * safetensors.torch. The writer is atomic (core/atomic_file.c: temp file,
 * fsync, rename, directory fsync). */
#include "safetensors.h"
#include "backend.h"
#include "json.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* The reference refuses headers above 100 MB; so does kiln. */
#define MAX_HEADER 100000000ull
/* JSON values in a header: ~10 per tensor, so 200k tensors; a hostile
 * header ("[0,0,0,...") cannot make the parser hold more than ~200 MB */
#define MAX_VALUES 2000000

typedef struct st_dtype {
    const char *name;
    size_t size;
    int kiln; /* kiln_dtype or -1 */
} st_dtype;

static const st_dtype dtypes[] = {
    {"F64", 8, KILN_F64},  {"F32", 4, KILN_F32},  {"F16", 2, KILN_F16}, {"BF16", 2, KILN_BF16},
    {"I64", 8, -1},        {"I32", 4, KILN_I32},  {"I16", 2, -1},       {"I8", 1, -1},
    {"U64", 8, -1},        {"U32", 4, -1},        {"U16", 2, -1},       {"U8", 1, -1},
    {"BOOL", 1, -1},       {"F8_E5M2", 1, -1},    {"F8_E4M3", 1, -1},   {"F8_E8M0", 1, -1},
    {"C64", 8, -1}, /* the sub-byte F4/F6 types of newer files are refused as unknown */
};
enum { N_DTYPES = sizeof dtypes / sizeof dtypes[0] };

typedef struct st_entry {
    const char *name;
    const st_dtype *dt;
    int kdt; /* the kiln dtype: dt's, or a quantized one restored from the metadata */
    int ndim;
    int64_t *shape; /* a quantized tensor's logical shape */
    uint64_t begin, end; /* relative to the data after the header */
} st_entry;

/* safetensors has no block dtypes: a quantized tensor is stored as U8
 * [bytes] of its raw blocks, and the metadata key QUANT_KEY + name holds
 * {"dtype": kiln's name, "shape": [logical shape]} (as bitsandbytes keeps
 * its 4-bit weights: packed uint8 data plus the quantization state). */
#define QUANT_KEY "kiln.quantized."

struct kiln_safetensors {
    const char *who; /* the call that opened it, for messages */
    char *path;
    unsigned char *map;
    size_t map_len;
    const unsigned char *data; /* after the header */
    size_t data_len;
    kiln__json_doc *doc;
    const kiln__json *meta;
    st_entry *e;     /* in data order */
    st_entry **by_name; /* e sorted by name */
    int n;
};

static bool little_endian(void) {
    const uint16_t one = 1;
    return *(const unsigned char *)&one == 1;
}

static const char *dtype_st_name(kiln_dtype t) {
    for (int i = 0; i < N_DTYPES; i++)
        if (dtypes[i].kiln == (int)t) return dtypes[i].name;
    return NULL;
}

void kiln_safetensors_close(kiln_safetensors *st) {
    if (!st) return;
    if (st->map) munmap(st->map, st->map_len);
    kiln__json_free(st->doc);
    if (st->e)
        for (int i = 0; i < st->n; i++) free(st->e[i].shape);
    free(st->e);
    free(st->by_name);
    free(st->path);
    free(st);
}

static int by_name_cmp(const void *a, const void *b) {
    return strcmp((*(st_entry *const *)a)->name, (*(st_entry *const *)b)->name);
}
static int by_offset_cmp(const void *a, const void *b) {
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

/* One tensor's header entry into *e (checked against the file's data). */
static kiln_status parse_entry(kiln_safetensors *st, const kiln__json *v, st_entry *e) {
    const char *p = st->path, *nm = v->key;
    if (v->type != KILN_JSON_OBJECT)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s' is not an object (byte %zu)", st->who, p, nm,
                          v->offset);
    const kiln__json *dt = kiln__json_get(v, "dtype"), *sh = kiln__json_get(v, "shape"),
                     *off = kiln__json_get(v, "data_offsets");
    if (!dt || dt->type != KILN_JSON_STRING || !sh || sh->type != KILN_JSON_ARRAY || !off ||
        off->type != KILN_JSON_ARRAY)
        return kiln__errs(KILN_ERR_FORMAT,
                          "%s: %s: tensor '%s' needs a string \"dtype\", an array \"shape\" and "
                          "an array \"data_offsets\" (byte %zu)", st->who, p, nm, v->offset);
    e->name = nm;
    for (int i = 0; i < N_DTYPES && !e->dt; i++)
        if (!strcmp(dt->str, dtypes[i].name)) e->dt = &dtypes[i];
    if (!e->dt)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s' has unknown dtype \"%s\"", st->who, p, nm,
                          dt->str);
    e->kdt = e->dt->kiln;
    if (sh->len > 1024)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s' has %zu dimensions", st->who, p, nm,
                          sh->len);
    e->ndim = (int)sh->len;
    if (!(e->shape = kiln__malloc((sh->len ? sh->len : 1) * sizeof *e->shape)))
        return kiln__errs(KILN_ERR_OOM, "%s: out of memory", st->who);
    uint64_t numel = 1;
    int d = 0;
    for (const kiln__json *c = sh->child; c; c = c->next, d++) {
        if (c->type != KILN_JSON_NUMBER || !c->is_int || c->i64 < 0)
            return kiln__errs(KILN_ERR_FORMAT,
                              "%s: %s: tensor '%s': shape[%d] is not a non-negative integer (byte "
                              "%zu)", st->who, p, nm, d, c->offset);
        e->shape[d] = c->i64;
        if (__builtin_mul_overflow(numel, (uint64_t)c->i64, &numel))
            return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s': element count overflows", st->who, p,
                              nm);
    }
    uint64_t bytes;
    if (__builtin_mul_overflow(numel, (uint64_t)e->dt->size, &bytes) || bytes > SIZE_MAX)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s': byte count overflows", st->who, p, nm);
    const kiln__json *b = off->child, *en = b ? b->next : NULL;
    if (off->len != 2 || b->type != KILN_JSON_NUMBER || !b->is_int || b->i64 < 0 || en->type != KILN_JSON_NUMBER ||
        !en->is_int || en->i64 < b->i64)
        return kiln__errs(KILN_ERR_FORMAT,
                          "%s: %s: tensor '%s': data_offsets must be [begin, end] with 0 <= begin "
                          "<= end (byte %zu)", st->who, p, nm, off->offset);
    e->begin = (uint64_t)b->i64;
    e->end = (uint64_t)en->i64;
    if (e->end - e->begin != bytes)
        return kiln__errs(KILN_ERR_FORMAT,
                          "%s: %s: tensor '%s': %s of %llu elements is %llu bytes but "
                          "data_offsets [%llu, %llu] hold %llu", st->who, p, nm, e->dt->name, (unsigned long long)numel,
                          (unsigned long long)bytes, (unsigned long long)e->begin, (unsigned long long)e->end,
                          (unsigned long long)(e->end - e->begin));
    if (e->end > st->data_len)
        return kiln__errs(KILN_ERR_FORMAT,
                          "%s: %s: tensor '%s': data_offsets end %llu is past the data (%zu bytes)", st->who,
                          p, nm, (unsigned long long)e->end, st->data_len);
    return KILN_OK;
}

static kiln_status check_metadata(const kiln_safetensors *st, const kiln__json *m) {
    if (m->type != KILN_JSON_OBJECT)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: __metadata__ is not an object", st->who, st->path);
    for (const kiln__json *c = m->child; c; c = c->next)
        if (c->type != KILN_JSON_STRING)
            return kiln__errs(KILN_ERR_FORMAT, "%s: %s: __metadata__ value of '%s' is not a string", st->who,
                              st->path, c->key);
    return KILN_OK;
}

static const st_entry *find(const kiln_safetensors *st, const char *name);

/* The quantized dtype of a metadata entry QUANT_KEY + name onto its U8
 * tensor, checked: a known quantized dtype by the traits, a logical shape
 * that dtype can have, and its block bytes exactly the tensor's bytes. */
static kiln_status restore_quantized(kiln_safetensors *st, const kiln__json *m) {
    const char *p = st->path, *nm = m->key + strlen(QUANT_KEY);
    st_entry *e = (st_entry *)find(st, nm);
    if (!e || strcmp(e->dt->name, "U8") || e->ndim != 1)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: metadata '%s' names %s", st->who, p, m->key,
                          e ? "a tensor that is not U8 [bytes]" : "no tensor of the file");
    char who[300];
    snprintf(who, sizeof who, "%s: %s: metadata '%s'", st->who, p, m->key);
    kiln__json_doc *doc = kiln__json_parse_bounded(m->str, m->len, 2, 2 + KILN_MAX_DIMS + 1, who);
    if (!doc) return kiln_last_status();
    const kiln__json *root = kiln__json_root(doc), *dt = kiln__json_get(root, "dtype"),
                     *sh = kiln__json_get(root, "shape");
    int t = -1;
    for (int i = 0; dt && dt->type == KILN_JSON_STRING && i < KILN_DTYPE_COUNT && t < 0; i++)
        if (kiln__is_quant((kiln_dtype)i) && !strcmp(dt->str, kiln__types[i].name)) t = i;
    kiln_status s = KILN_OK;
    if (t < 0 || !sh || sh->type != KILN_JSON_ARRAY || sh->len < 1 || sh->len > KILN_MAX_DIMS)
        s = kiln__errs(KILN_ERR_FORMAT,
                       "%s: needs {\"dtype\": a quantized kiln dtype, \"shape\": [1 to %d dimensions]}, not %.200s",
                       who, KILN_MAX_DIMS, m->str);
    int64_t shape[KILN_MAX_DIMS];
    uint64_t numel = 1;
    int nd = 0;
    for (const kiln__json *c = s ? NULL : sh->child; c && !s; c = c->next, nd++) {
        if (c->type != KILN_JSON_NUMBER || !c->is_int || c->i64 < 0)
            s = kiln__errs(KILN_ERR_FORMAT, "%s: shape[%d] is not a non-negative integer", who, nd);
        else if (__builtin_mul_overflow(numel, (uint64_t)c->i64, &numel) || numel > (uint64_t)INT64_MAX)
            s = kiln__errs(KILN_ERR_FORMAT, "%s: the element count overflows", who);
        else shape[nd] = c->i64;
    }
    kiln__json_free(doc);
    if (s) return s;
    if (!kiln__quant_shape_ok(who, (kiln_dtype)t, nd, shape)) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", kiln_last_error());
        return kiln__errs(KILN_ERR_FORMAT, "%s", msg);
    }
    const uint64_t bytes = (uint64_t)kiln__elems_bytes((kiln_dtype)t, (int64_t)numel);
    if (bytes != e->end - e->begin)
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s of %llu elements is %llu bytes but the tensor holds %llu", who,
                          kiln__types[t].name, (unsigned long long)numel, (unsigned long long)bytes,
                          (unsigned long long)(e->end - e->begin));
    int64_t *ns = kiln__malloc((size_t)nd * sizeof *ns);
    if (!ns) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", st->who);
    memcpy(ns, shape, (size_t)nd * sizeof *ns);
    free(e->shape);
    e->shape = ns;
    e->ndim = nd;
    e->kdt = t;
    return KILN_OK;
}

/* The header's tensors: parsed, sorted, no duplicates, covering the data. */
static kiln_status parse_header(kiln_safetensors *st, const char *hdr, size_t n) {
    const char *p = st->path;
    if (n == 0 || hdr[0] != '{')
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: the header does not start with '{'", st->who, p);
    char who[300];
    snprintf(who, sizeof who, "%s: %s: header", st->who, p);
    if (!(st->doc = kiln__json_parse_bounded(hdr, n, 16, MAX_VALUES, who))) return kiln_last_status();
    const kiln__json *root = kiln__json_root(st->doc);
    int count = 0;
    for (const kiln__json *c = root->child; c; c = c->next) count += strcmp(c->key, "__metadata__") != 0;
    st->e = kiln__calloc(count ? (size_t)count : 1, sizeof *st->e);
    st->by_name = kiln__malloc((count ? (size_t)count : 1) * sizeof *st->by_name);
    if (!st->e || !st->by_name) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", st->who);
    kiln_status s;
    for (const kiln__json *c = root->child; c; c = c->next) {
        if (!strcmp(c->key, "__metadata__")) {
            if (st->meta)
                return kiln__errs(KILN_ERR_FORMAT, "%s: %s: __metadata__ appears twice", st->who, p);
            if ((s = check_metadata(st, c))) return s;
            st->meta = c;
            continue;
        }
        if (strlen(c->key) != c->key_len)
            return kiln__errs(KILN_ERR_FORMAT, "%s: %s: a tensor name holds a NUL (byte %zu)", st->who, p,
                              c->offset);
        s = parse_entry(st, c, &st->e[st->n]);
        st->n++; /* counted even when it failed, so close frees its shape */
        if (s) return s;
    }
    qsort(st->e, (size_t)st->n, sizeof *st->e, by_offset_cmp);
    uint64_t at = 0;
    for (int i = 0; i < st->n; i++) {
        const st_entry *e = &st->e[i];
        if (e->begin != at)
            return kiln__errs(KILN_ERR_FORMAT,
                              "%s: %s: tensor '%s' starts at %llu but the previous data ends at %llu "
                              "(%s)", st->who, p, e->name, (unsigned long long)e->begin, (unsigned long long)at,
                              e->begin < at ? "overlap" : "hole");
        at = e->end;
    }
    if (at != st->data_len)
        return kiln__errs(KILN_ERR_FORMAT,
                          "%s: %s: the tensors cover %llu bytes of data but the file holds %zu", st->who, p,
                          (unsigned long long)at, st->data_len);
    for (int i = 0; i < st->n; i++) st->by_name[i] = &st->e[i];
    qsort(st->by_name, (size_t)st->n, sizeof *st->by_name, by_name_cmp);
    for (int i = 1; i < st->n; i++)
        if (!strcmp(st->by_name[i]->name, st->by_name[i - 1]->name))
            return kiln__errs(KILN_ERR_FORMAT, "%s: %s: tensor '%s' appears twice", st->who, p,
                              st->by_name[i]->name);
    for (const kiln__json *c = st->meta ? st->meta->child : NULL; c; c = c->next)
        if (!strncmp(c->key, QUANT_KEY, strlen(QUANT_KEY)) && (s = restore_quantized(st, c))) return s;
    return KILN_OK;
}

kiln_safetensors *kiln__safetensors_open(const char *path, const char *who) {
    if (!path) return kiln__err(KILN_ERR_ARG, "%s: path is NULL", who);
    if (!little_endian())
        return kiln__err(KILN_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported", who);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__err(KILN_ERR_IO, "%s: cannot open %s: %s", who, path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kiln__err(KILN_ERR_IO, "%s: %s is not a regular file", who, path);
    }
    size_t size = (size_t)sb.st_size;
    kiln_safetensors *st = kiln__calloc(1, sizeof *st);
    if (st) st->who = who;
    if (!st || !(st->path = kiln__strdup(path))) {
        close(fd);
        free(st);
        return kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
    }
    if (size < 8) {
        close(fd);
        kiln_safetensors_close(st);
        return kiln__err(KILN_ERR_FORMAT, "%s: %s is %zu bytes, too short for the header length", who,
                         path, size);
    }
    st->map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    close(fd);
    if (st->map == MAP_FAILED) {
        st->map = NULL;
        kiln_safetensors_close(st);
        return kiln__err(KILN_ERR_IO, "%s: cannot map %s: %s", who, path, strerror(err));
    }
    st->map_len = size;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = n << 8 | st->map[i];
    if (n > MAX_HEADER || n > size - 8) {
        kiln__err(KILN_ERR_FORMAT, "%s: %s: header length %llu is %s", who, path, (unsigned long long)n,
                  n > size - 8 ? "past the end of the file" : "over the 100 MB limit");
        kiln_safetensors_close(st);
        return NULL;
    }
    st->data = st->map + 8 + n;
    st->data_len = size - 8 - (size_t)n;
    if (parse_header(st, (const char *)st->map + 8, (size_t)n)) {
        kiln_safetensors_close(st);
        return NULL;
    }
    return st;
}

kiln_safetensors *kiln_safetensors_open(const char *path) {
    return kiln__safetensors_open(path, "kiln_safetensors_open");
}

int kiln_safetensors_count(const kiln_safetensors *st) { return st ? st->n : 0; }

static const st_entry *find(const kiln_safetensors *st, const char *name) {
    int lo = 0, hi = st->n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2, c = strcmp(name, st->by_name[mid]->name);
        if (!c) return st->by_name[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return NULL;
}

int kiln_safetensors_find(const kiln_safetensors *st, const char *name) {
    const st_entry *e = st && name ? find(st, name) : NULL;
    return e ? (int)(e - st->e) : -1;
}

kiln_status kiln_safetensors_info_at(const kiln_safetensors *st, int i, kiln_safetensors_info *out) {
    if (!st || !out) return kiln__errs(KILN_ERR_ARG, "kiln_safetensors_info_at: NULL argument");
    if (i < 0 || i >= st->n)
        return kiln__errs(KILN_ERR_ARG, "kiln_safetensors_info_at: index %d not in [0, %d)", i, st->n);
    const st_entry *e = &st->e[i];
    *out = (kiln_safetensors_info){.name = e->name, .dtype = e->dt->name, .kiln_dtype = e->kdt,
                                   .ndim = e->ndim, .shape = e->shape, .nbytes = (size_t)(e->end - e->begin)};
    return KILN_OK;
}

const char *kiln_safetensors_metadata(const kiln_safetensors *st, const char *key) {
    const kiln__json *v = st && key ? kiln__json_get(st->meta, key) : NULL;
    return v ? v->str : NULL;
}

/* A 0-d tensor of the file is [1] in kiln. */
static int kiln_ndim(const st_entry *e) { return e->ndim ? e->ndim : 1; }
static int64_t kiln_dim(const st_entry *e, int d) { return e->ndim ? e->shape[d] : 1; }

static kiln_status check_entry(const kiln_safetensors *st, const st_entry *e, const char *who) {
    if (e->kdt < 0)
        return kiln__errs(KILN_ERR_DTYPE, "%s: %s: tensor '%s' is %s, which kiln has no dtype for", who, st->path,
                          e->name, e->dt->name);
    if (e->ndim > KILN_MAX_DIMS)
        return kiln__errs(KILN_ERR_SHAPE, "%s: %s: tensor '%s' has %d dimensions; kiln holds at most %d", who,
                          st->path, e->name, e->ndim, KILN_MAX_DIMS);
    return KILN_OK;
}

kiln_status kiln__st_check(const kiln_safetensors *st, const char *name, const kiln_tensor *dst, const char *who,
                           const char *side) {
    const st_entry *e = find(st, name);
    if (!e) return kiln__errs(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", who, st->path, name);
    kiln_status s = check_entry(st, e, who);
    if (s) return s;
    if (e->kdt != (int)dst->dtype)
        return kiln__errs(KILN_ERR_DTYPE, "%s: %s: '%s' is %s in the file, %s in %s", who, st->path, name,
                          e->kdt >= 0 && kiln__is_quant((kiln_dtype)e->kdt) ? kiln_dtype_name((kiln_dtype)e->kdt)
                                                                          : e->dt->name,
                          kiln_dtype_name(dst->dtype), side);
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < kiln_ndim(e); d++) shape[d] = kiln_dim(e, d);
    if (!kiln__shape_eq(kiln_ndim(e), shape, dst->ndim, dst->shape)) {
        char a[96], b[96];
        return kiln__errs(KILN_ERR_SHAPE, "%s: %s: '%s' is %s in the file, %s in %s", who, st->path, name,
                          kiln__dims_str(kiln_ndim(e), shape, a), kiln__shape_str(dst, b), side);
    }
    if (!dst->data || dst->op != KILN_OP_NONE || !kiln_tensor_is_contiguous(dst))
        return kiln__errs(KILN_ERR_ARG, "%s: '%s' is not a contiguous leaf with storage", who, dst->name);
    return KILN_OK;
}

kiln_status kiln__st_read(const kiln_safetensors *st, const char *name, kiln_tensor *dst) {
    const st_entry *e = find(st, name);
    kiln_status s = kiln__host_write(dst);
    if (s) return s;
    memcpy(dst->data, st->data + e->begin, (size_t)(e->end - e->begin));
    return KILN_OK;
}

kiln_status kiln_safetensors_read_into(kiln_safetensors *st, const char *name, kiln_tensor *dst) {
    const char *who = "kiln_safetensors_read_into";
    if (!st || !name || !dst) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    kiln_status s = kiln__st_check(st, name, dst, who, "the tensor given");
    return s ? s : kiln__st_read(st, name, dst);
}

kiln_tensor *kiln_safetensors_load(kiln_safetensors *st, kiln_ctx *ctx, const char *name) {
    const char *who = "kiln_safetensors_load";
    if (!st || !ctx || !name) return kiln__err(KILN_ERR_ARG, "%s: NULL argument", who);
    const st_entry *e = find(st, name);
    if (!e) return kiln__err(KILN_ERR_ARG, "%s: %s has no tensor '%s'", who, st->path, name);
    if (check_entry(st, e, who)) return NULL;
    int64_t shape[KILN_MAX_DIMS];
    for (int d = 0; d < kiln_ndim(e); d++) shape[d] = kiln_dim(e, d);
    kiln_tensor *t = kiln_tensor_new(ctx, (kiln_dtype)e->kdt, kiln_ndim(e), shape);
    if (!t) return kiln__err_context("%s: %s: tensor '%s'", who, st->path, name), NULL;
    kiln_tensor_set_name(t, name);
    memcpy(t->data, st->data + e->begin, (size_t)(e->end - e->begin));
    return t;
}

/* ---- writing ---- */

static kiln_status check_save(const char *who, kiln_tensor *const *ts, const char *const *names, int n,
                              const char *const *meta, int n_meta) {
    if (n < 0 || n_meta < 0 || (n && !ts) || (n_meta && !meta))
        return kiln__errs(KILN_ERR_ARG, "%s: bad tensor or metadata list", who);
    for (int i = 0; i < n; i++) {
        kiln_tensor *t = ts[i];
        if (!t) return kiln__errs(KILN_ERR_ARG, "%s: tensor %d is NULL", who, i);
        const char *nm = names ? names[i] : t->name;
        if (!nm || !*nm) return kiln__errs(KILN_ERR_ARG, "%s: tensor %d has no name", who, i);
        if (!strcmp(nm, "__metadata__")) return kiln__errs(KILN_ERR_ARG, "%s: a tensor cannot be called __metadata__", who);
        for (int j = 0; j < i; j++)
            if (!strcmp(nm, names ? names[j] : ts[j]->name))
                return kiln__errs(KILN_ERR_ARG, "%s: name '%s' given twice (tensors %d and %d)", who, nm, j, i);
        if (!kiln_tensor_is_contiguous(t))
            return kiln__errs(KILN_ERR_ARG, "%s: tensor '%s' is not contiguous", who, nm);
        if (!dtype_st_name(t->dtype) && !kiln__is_quant(t->dtype))
            return kiln__errs(KILN_ERR_DTYPE, "%s: tensor '%s' is %s, which safetensors cannot hold", who, nm,
                              kiln_dtype_name(t->dtype));
    }
    for (int k = 0; k < n_meta; k++) {
        if (!meta[2 * k] || !meta[2 * k + 1]) return kiln__errs(KILN_ERR_ARG, "%s: metadata pair %d has a NULL", who, k);
        if (!strncmp(meta[2 * k], QUANT_KEY, strlen(QUANT_KEY)))
            return kiln__errs(KILN_ERR_ARG, "%s: metadata key '%s': keys starting %s are kiln's own", who,
                              meta[2 * k], QUANT_KEY);
        for (int j = 0; j < k; j++)
            if (!strcmp(meta[2 * j], meta[2 * k]))
                return kiln__errs(KILN_ERR_ARG, "%s: metadata key '%s' given twice", who, meta[2 * k]);
    }
    return KILN_OK;
}

/* The header JSON, padded with spaces so the data starts 8-aligned. */
static kiln_status build_header(const char *who, kiln__buf *h, kiln_tensor *const *ts, const char *const *names, int n,
                                const char *const *meta, int n_meta) {
    kiln__buf_add(h, "{", 1);
    int n_quant = 0;
    for (int i = 0; i < n; i++) n_quant += kiln__is_quant(ts[i]->dtype);
    if (n_meta || n_quant) {
        kiln__buf_add(h, "\"__metadata__\":{", 16);
        for (int k = 0; k < n_meta; k++) {
            if (k) kiln__buf_add(h, ",", 1);
            kiln__json_put_string(h, meta[2 * k]);
            kiln__buf_add(h, ":", 1);
            kiln__json_put_string(h, meta[2 * k + 1]);
        }
        for (int i = 0, k = n_meta; i < n; i++) {
            const kiln_tensor *t = ts[i];
            if (!kiln__is_quant(t->dtype)) continue;
            kiln__buf key = {0}, val = {0};
            kiln__buf_printf(&key, "%s%s", QUANT_KEY, names ? names[i] : t->name);
            kiln__buf_printf(&val, "{\"dtype\":\"%s\",\"shape\":[", kiln_dtype_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) kiln__buf_printf(&val, d ? ",%lld" : "%lld", (long long)t->shape[d]);
            kiln__buf_add(&val, "]}", 3); /* with the NUL */
            kiln__buf_add(&key, "", 1);
            if (k++) kiln__buf_add(h, ",", 1);
            if (!key.oom && !val.oom) {
                kiln__json_put_string(h, key.p);
                kiln__buf_add(h, ":", 1);
                kiln__json_put_string(h, val.p);
            } else h->oom = true;
            kiln__buf_free(&key);
            kiln__buf_free(&val);
        }
        kiln__buf_add(h, "}", 1);
    }
    uint64_t at = 0;
    for (int i = 0; i < n; i++) {
        const kiln_tensor *t = ts[i];
        uint64_t nb = kiln_tensor_nbytes(t);
        if (n_meta || n_quant || i) kiln__buf_add(h, ",", 1);
        kiln__json_put_string(h, names ? names[i] : t->name);
        if (kiln__is_quant(t->dtype)) /* its raw blocks: U8 [bytes] */
            kiln__buf_printf(h, ":{\"dtype\":\"U8\",\"shape\":[%llu", (unsigned long long)nb);
        else {
            kiln__buf_printf(h, ":{\"dtype\":\"%s\",\"shape\":[", dtype_st_name(t->dtype));
            for (int d = 0; d < t->ndim; d++) kiln__buf_printf(h, d ? ",%lld" : "%lld", (long long)t->shape[d]);
        }
        kiln__buf_printf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)at, (unsigned long long)(at + nb));
        at += nb;
    }
    kiln__buf_add(h, "}", 1);
    while (!h->oom && h->len % 8) kiln__buf_add(h, " ", 1); /* add does nothing once out of memory */
    if (h->oom) return kiln__errs(KILN_ERR_OOM, "%s: out of memory for the header", who);
    return KILN_OK;
}

static kiln_status write_all(FILE *f, const void *p, size_t n, const char *who, const char *tmp) {
    if (n && fwrite(p, 1, n, f) != n)
        return kiln__errs(KILN_ERR_IO, "%s: writing %s: %s", who, tmp, strerror(errno ? errno : EIO));
    return KILN_OK;
}

/* The body of the temp file: length, header, each tensor's bytes. */
static kiln_status write_body(FILE *f, const char *who, const char *tmp, const kiln__buf *h, kiln_tensor *const *ts,
                              const char *const *names, int n) {
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((uint64_t)h->len >> (8 * i));
    kiln_status s = write_all(f, len8, 8, who, tmp);
    if (!s) s = write_all(f, h->p, h->len, who, tmp);
    for (int i = 0; i < n && !s; i++) {
        kiln_tensor *t = ts[i];
        if (!t->data)
            return kiln__errs(KILN_ERR_STATE, "%s: tensor '%s' has no data: add it to a graph and compute it first", who,
                              names ? names[i] : t->name);
        if ((s = kiln__host_read(t))) return s;
        s = write_all(f, t->data, kiln_tensor_nbytes(t), who, tmp);
    }
    return s;
}

typedef struct st_save {
    const char *who;
    const kiln__buf *h;
    kiln_tensor *const *ts;
    const char *const *names;
    int n;
} st_save;

static kiln_status save_body(FILE *f, const char *tmp, void *arg) {
    const st_save *a = arg;
    return write_body(f, a->who, tmp, a->h, a->ts, a->names, a->n);
}

kiln_status kiln_safetensors_save(const char *path, kiln_tensor *const *tensors, const char *const *names, int n,
                                  const char *const *meta, int n_meta) {
    return kiln__safetensors_save(path, tensors, names, n, meta, n_meta, "kiln_safetensors_save");
}

kiln_status kiln__safetensors_save(const char *path, kiln_tensor *const *tensors, const char *const *names, int n,
                                   const char *const *meta, int n_meta, const char *who) {
    if (!path || !*path) return kiln__errs(KILN_ERR_ARG, "%s: path is NULL or empty", who);
    if (!little_endian()) return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported", who);
    kiln_status s = check_save(who, tensors, names, n, meta, n_meta);
    if (s) return s;
    kiln__buf h = {0};
    if (!(s = build_header(who, &h, tensors, names, n, meta, n_meta)))
        s = kiln__atomic_write(path, who, save_body, &(st_save){who, &h, tensors, names, n});
    kiln__buf_free(&h);
    return s;
}
