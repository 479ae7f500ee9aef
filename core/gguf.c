/* gguf.c — reading GGUF files (ggml's format; the layout is in
 * include/kiln.h). The reader maps the file and walks the header once with
 * a bounds-checked cursor: every count is compared with the bytes left
 * before anything is allocated for it (a count of n strings needs 8n
 * bytes, of n tensor infos 24n), so a hostile header fails with a message
 * instead of a huge allocation. Strings are copied, NUL-terminated, into
 * one arena; numbers are read in place. The rules follow llama.cpp's
 * gguf.cpp: versions 2 and 3, at most 4 dims, ne[0] a multiple of the
 * type's block, a u32 power-of-two general.alignment, offsets aligned and
 * inside the data, unique keys and tensor names. The writer is in
 * gguf_write.c. */
#include "gguf.h"
#include "backend.h"

#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* ggml's types: block size (elements) and bytes per block; removed ids
 * (4, 5, 31-33, 36-38) have no entry. */
const kiln__ggml_type kiln__ggml_types[KILN__GGML_TYPES] = {
    [0] = {"F32", 1, 4},        [1] = {"F16", 1, 2},        [2] = {"Q4_0", 32, 18},     [3] = {"Q4_1", 32, 20},
    [6] = {"Q5_0", 32, 22},     [7] = {"Q5_1", 32, 24},     [8] = {"Q8_0", 32, 34},     [9] = {"Q8_1", 32, 36},
    [10] = {"Q2_K", 256, 84},   [11] = {"Q3_K", 256, 110},  [12] = {"Q4_K", 256, 144},  [13] = {"Q5_K", 256, 176},
    [14] = {"Q6_K", 256, 210},  [15] = {"Q8_K", 256, 292},  [16] = {"IQ2_XXS", 256, 66}, [17] = {"IQ2_XS", 256, 74},
    [18] = {"IQ3_XXS", 256, 98}, [19] = {"IQ1_S", 256, 50}, [20] = {"IQ4_NL", 32, 18},  [21] = {"IQ3_S", 256, 110},
    [22] = {"IQ2_S", 256, 82},  [23] = {"IQ4_XS", 256, 136}, [24] = {"I8", 1, 1},       [25] = {"I16", 1, 2},
    [26] = {"I32", 1, 4},       [27] = {"I64", 1, 8},       [28] = {"F64", 1, 8},       [29] = {"IQ1_M", 256, 56},
    [30] = {"BF16", 1, 2},      [34] = {"TQ1_0", 256, 54},  [35] = {"TQ2_0", 256, 66},  [39] = {"MXFP4", 32, 17},
};

const kiln__ggml_type *kiln__ggml_type_of(uint32_t t) {
    return t < KILN__GGML_TYPES && kiln__ggml_types[t].name ? &kiln__ggml_types[t] : NULL;
}

const char *kiln_gguf_type_name(uint32_t t) {
    const kiln__ggml_type *g = kiln__ggml_type_of(t);
    return g ? g->name : NULL;
}

/* The one place a ggml type meets a kiln dtype (kiln's block dtypes of
 * these names are ggml's blocks byte for byte). Everything else is
 * unsupported. */
int kiln_gguf_dtype(uint32_t t) {
    switch (t) {
    case KILN_GGML_Q8_0: return KILN_Q8_0;
    case KILN_GGML_Q4_0: return KILN_Q4_0;
    case KILN_GGML_Q4_1: return KILN_Q4_1;
    case KILN_GGML_Q5_0: return KILN_Q5_0;
    case KILN_GGML_Q5_1: return KILN_Q5_1;
    case KILN_GGML_Q8_1: return KILN_Q8_1;
    case KILN_GGML_Q2_K: return KILN_Q2_K;
    case KILN_GGML_Q3_K: return KILN_Q3_K;
    case KILN_GGML_Q4_K: return KILN_Q4_K;
    case KILN_GGML_Q5_K: return KILN_Q5_K;
    case KILN_GGML_Q6_K: return KILN_Q6_K;
    case KILN_GGML_Q8_K: return KILN_Q8_K;
    case KILN_GGML_IQ4_NL: return KILN_IQ4_NL;
    case KILN_GGML_IQ4_XS: return KILN_IQ4_XS;
    case KILN_GGML_F32: return KILN_F32;
    case KILN_GGML_F16: return KILN_F16;
    case KILN_GGML_BF16: return KILN_BF16;
    case 28: return KILN_F64;
    case 26: return KILN_I32;
    default: return -1;
    }
}

/* Bytes of a tensor of type t with ne[4]; false if ne[0] is not whole
 * blocks or the size overflows. */
bool kiln__ggml_nbytes(uint32_t t, const int64_t ne[4], uint64_t *out) {
    const kiln__ggml_type *g = kiln__ggml_type_of(t);
    if (!g || ne[0] % g->blck) return false;
    uint64_t n;
    if (__builtin_mul_overflow((uint64_t)(ne[0] / g->blck), (uint64_t)g->size, &n)) return false;
    for (int d = 1; d < 4; d++)
        if (__builtin_mul_overflow(n, (uint64_t)ne[d], &n)) return false;
    if (n > SIZE_MAX) return false;
    *out = n;
    return true;
}

/* One metadata value. Strings live in the arena (at str); numeric arrays
 * are read from the map (at arr); string arrays have an index (strs). */
typedef struct gg_str {
    size_t off; /* into the arena */
    uint64_t len;
} gg_str;

typedef struct gg_kv {
    gg_str key;
    uint32_t type, elem;
    uint64_t n;               /* array length */
    const unsigned char *raw; /* scalar or first element, in the map */
    gg_str str;               /* STRING */
    gg_str *strs;             /* array of STRING */
} gg_kv;

typedef struct gg_tensor {
    gg_str name;
    int ndim;
    int64_t ne[4];
    uint32_t type;
    uint64_t offset, nbytes;
} gg_tensor;

/* The file's mapping, shared by the reader and every context whose
 * tensors point into it (kiln_gguf_map): the last to let go unmaps it. */
typedef struct gg_mapping {
    unsigned char *p;
    size_t len;
    atomic_int refs;
} gg_mapping;

static void mapping_drop(void *arg) {
    gg_mapping *m = arg;
    if (m && atomic_fetch_sub(&m->refs, 1) == 1) {
        munmap(m->p, m->len);
        free(m);
    }
}

struct kiln_gguf {
    char *path;
    gg_mapping *mapping; /* NULL for an empty file */
    unsigned char *map;
    size_t map_len;
    uint32_t version, alignment;
    const unsigned char *data;
    size_t data_len;
    kiln__buf arena;
    gg_kv *kv;
    int n_kv;
    gg_tensor *t;
    int n_t;
    int *kv_sorted, *t_sorted; /* indices sorted by key / name */
};

static const char *str_of(const kiln_gguf *g, gg_str s) { return g->arena.p + s.off; }

/* ---- the cursor ---- */

typedef struct rd {
    const unsigned char *p;
    size_t n, at;
    kiln_gguf *g;
} rd;

static kiln_status fail(rd *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static kiln_status fail(rd *r, const char *fmt, ...) {
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return kiln__errs(KILN_ERR_FORMAT, "kiln_gguf_open: %s: %s (byte %zu)", r->g->path, msg, r->at);
}

static size_t left(const rd *r) { return r->n - r->at; }

static kiln_status take(rd *r, size_t k, const unsigned char **out, const char *what) {
    if (k > left(r)) return fail(r, "%s needs %zu bytes but %zu are left", what, k, left(r));
    *out = r->p + r->at;
    r->at += k;
    return KILN_OK;
}

static uint64_t le(const unsigned char *p, int k) {
    uint64_t v = 0;
    for (int i = k - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static kiln_status u32(rd *r, uint32_t *v, const char *what) {
    const unsigned char *p = NULL;
    kiln_status s = take(r, 4, &p, what);
    if (!s) *v = (uint32_t)le(p, 4);
    return s;
}
static kiln_status u64(rd *r, uint64_t *v, const char *what) {
    const unsigned char *p = NULL;
    kiln_status s = take(r, 8, &p, what);
    if (!s) *v = le(p, 8);
    return s;
}

static kiln_status string(rd *r, gg_str *out, const char *what) {
    uint64_t len;
    const unsigned char *p = NULL;
    kiln_status s = u64(r, &len, what);
    if (s) return s;
    if (len > left(r)) return fail(r, "%s of %llu bytes runs past the end", what, (unsigned long long)len);
    if ((s = take(r, (size_t)len, &p, what))) return s;
    kiln__buf *a = &r->g->arena;
    out->off = a->len;
    out->len = len;
    kiln__buf_add(a, p, (size_t)len);
    kiln__buf_add(a, "", 1);
    return a->oom ? kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory") : KILN_OK;
}

static size_t scalar_size(uint32_t t) {
    static const size_t sz[KILN_GGUF_TYPE_COUNT] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
    return t < KILN_GGUF_TYPE_COUNT ? sz[t] : 0;
}

/* A value of type t into kv (depth counts nested arrays). */
static kiln_status value(rd *r, uint32_t t, gg_kv *kv, int depth, const char *key) {
    kiln_status s;
    if (t >= KILN_GGUF_TYPE_COUNT) return fail(r, "key '%s' has unknown value type %u", key, t);
    kv->type = t;
    if (t == KILN_GGUF_STRING) return string(r, &kv->str, "a string value");
    if (t != KILN_GGUF_ARRAY) {
        if ((s = take(r, scalar_size(t), &kv->raw, "a value"))) return s;
        if (t == KILN_GGUF_BOOL && kv->raw[0] > 1) return fail(r, "key '%s': bool value %u", key, kv->raw[0]);
        return KILN_OK;
    }
    if (depth >= 4) return fail(r, "key '%s': arrays nested deeper than 4", key);
    if ((s = u32(r, &kv->elem, "an array's type")) || (s = u64(r, &kv->n, "an array's length"))) return s;
    if (kv->elem >= KILN_GGUF_TYPE_COUNT) return fail(r, "key '%s': array of unknown type %u", key, kv->elem);
    /* the smallest an element can be: 8 bytes for a string's length, 12 for an array's header */
    size_t least = kv->elem == KILN_GGUF_STRING ? 8 : kv->elem == KILN_GGUF_ARRAY ? 12 : scalar_size(kv->elem);
    if (kv->n > left(r) / least)
        return fail(r, "key '%s': array of %llu elements cannot fit in the %zu bytes left", key,
                    (unsigned long long)kv->n, left(r));
    kv->raw = r->p + r->at;
    if (kv->elem == KILN_GGUF_STRING) {
        if (!(kv->strs = kiln__malloc((size_t)(kv->n ? kv->n : 1) * sizeof *kv->strs)))
            return kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory for %llu strings",
                              (unsigned long long)kv->n);
        for (uint64_t i = 0; i < kv->n; i++)
            if ((s = string(r, &kv->strs[i], "an array string"))) return s;
        return KILN_OK;
    }
    if (kv->elem == KILN_GGUF_ARRAY) { /* checked and skipped */
        for (uint64_t i = 0; i < kv->n; i++) {
            gg_kv sub = {0};
            s = value(r, KILN_GGUF_ARRAY, &sub, depth + 1, key);
            free(sub.strs);
            if (s) return s;
        }
        return KILN_OK;
    }
    const unsigned char *p = NULL;
    if ((s = take(r, (size_t)kv->n * least, &p, "an array"))) return s;
    if (kv->elem == KILN_GGUF_BOOL)
        for (uint64_t i = 0; i < kv->n; i++)
            if (p[i] > 1) return fail(r, "key '%s': bool element %llu is %u", key, (unsigned long long)i, p[i]);
    return KILN_OK;
}

/* ---- sorting and finding by name ---- */

static int bsearch_idx(const kiln_gguf *g, const int *idx, int n, const char *name, bool keys) {
    int lo = 0, hi = n - 1;
    while (lo <= hi) {
        int mid = (lo + hi) / 2;
        int c = strcmp(name, str_of(g, keys ? g->kv[idx[mid]].key : g->t[idx[mid]].name));
        if (!c) return idx[mid];
        if (c < 0) hi = mid - 1;
        else lo = mid + 1;
    }
    return -1;
}

/* Sort idx[0..n) by name: a merge sort, as qsort has no context argument
 * (qsort_r is not C11). */
static void sort_idx(const kiln_gguf *g, int *idx, int n, bool keys, int *tmp) {
    if (n < 2) return;
    int h = n / 2;
    sort_idx(g, idx, h, keys, tmp);
    sort_idx(g, idx + h, n - h, keys, tmp);
    int i = 0, j = h, k = 0;
    while (i < h && j < n) {
        const char *a = str_of(g, keys ? g->kv[idx[i]].key : g->t[idx[i]].name);
        const char *b = str_of(g, keys ? g->kv[idx[j]].key : g->t[idx[j]].name);
        tmp[k++] = strcmp(a, b) <= 0 ? idx[i++] : idx[j++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, (size_t)n * sizeof *idx);
}

/* ---- the header ---- */

static kiln_status read_kvs(rd *r, uint64_t n) {
    kiln_gguf *g = r->g;
    kiln_status s;
    if (!(g->kv = kiln__calloc((size_t)(n ? n : 1), sizeof *g->kv)))
        return kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        gg_kv *kv = &g->kv[i];
        uint32_t t;
        g->n_kv = (int)i + 1; /* so close frees what this one holds */
        if ((s = string(r, &kv->key, "a key")) || (s = u32(r, &t, "a value type"))) return s;
        if ((s = value(r, t, kv, 0, str_of(g, kv->key)))) return s;
    }
    return KILN_OK;
}

static kiln_status read_tensor_infos(rd *r, uint64_t n) {
    kiln_gguf *g = r->g;
    kiln_status s;
    if (!(g->t = kiln__calloc((size_t)(n ? n : 1), sizeof *g->t)))
        return kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory");
    for (uint64_t i = 0; i < n; i++) {
        gg_tensor *t = &g->t[i];
        uint32_t nd;
        if ((s = string(r, &t->name, "a tensor name")) || (s = u32(r, &nd, "a tensor's dims"))) return s;
        const char *nm = str_of(g, t->name);
        if (strlen(nm) != t->name.len) return fail(r, "tensor %llu's name holds a NUL", (unsigned long long)i);
        if (nd < 1 || nd > 4) return fail(r, "tensor '%s' has %u dims (1 to 4)", nm, nd);
        t->ndim = (int)nd;
        for (int d = 0; d < 4; d++) t->ne[d] = 1;
        for (int d = 0; d < t->ndim; d++) {
            uint64_t v;
            if ((s = u64(r, &v, "a tensor dim"))) return s;
            if (v > INT64_MAX) return fail(r, "tensor '%s': ne[%d] = %llu", nm, d, (unsigned long long)v);
            t->ne[d] = (int64_t)v;
        }
        if ((s = u32(r, &t->type, "a tensor type")) || (s = u64(r, &t->offset, "a tensor offset"))) return s;
        const kiln__ggml_type *gt = kiln__ggml_type_of(t->type);
        if (!gt) return fail(r, "tensor '%s' has unknown ggml type %u", nm, t->type);
        if (t->ne[0] % gt->blck)
            return fail(r, "tensor '%s': ne[0] = %lld is not a multiple of %s's block of %d", nm,
                        (long long)t->ne[0], gt->name, gt->blck);
        if (!kiln__ggml_nbytes(t->type, t->ne, &t->nbytes)) return fail(r, "tensor '%s': its size overflows", nm);
        if (t->offset % g->alignment)
            return fail(r, "tensor '%s': offset %llu is not a multiple of the alignment %u", nm,
                        (unsigned long long)t->offset, g->alignment);
    }
    return KILN_OK;
}

static kiln_status find_alignment(rd *r) {
    kiln_gguf *g = r->g;
    g->alignment = 32;
    int i = kiln_gguf_find_key(g, "general.alignment");
    if (i < 0) return KILN_OK;
    if (g->kv[i].type != KILN_GGUF_UINT32) return fail(r, "general.alignment is not a u32");
    uint32_t a = (uint32_t)le(g->kv[i].raw, 4);
    if (!a || (a & (a - 1))) return fail(r, "general.alignment %u is not a power of two", a);
    g->alignment = a;
    return KILN_OK;
}

static kiln_status check_data(rd *r) {
    kiln_gguf *g = r->g;
    for (int i = 0; i < g->n_t; i++) {
        const gg_tensor *t = &g->t[i];
        if (t->offset > g->data_len || t->nbytes > g->data_len - t->offset)
            return kiln__errs(KILN_ERR_FORMAT,
                              "kiln_gguf_open: %s: tensor '%s' (%llu bytes at %llu) runs past the data (%zu bytes)",
                              g->path, str_of(g, t->name), (unsigned long long)t->nbytes,
                              (unsigned long long)t->offset, g->data_len);
    }
    /* no two tensors share bytes: sorted by offset, each ends before the next */
    int *o = kiln__malloc((size_t)(g->n_t ? g->n_t : 1) * 2 * sizeof *o);
    if (!o) return kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory");
    for (int i = 0; i < g->n_t; i++) o[i] = i;
    for (int w = 1; w < g->n_t; w *= 2) /* bottom-up merge sort by offset */
        for (int lo = 0; lo < g->n_t; lo += 2 * w) {
            int mid = lo + w < g->n_t ? lo + w : g->n_t, hi = lo + 2 * w < g->n_t ? lo + 2 * w : g->n_t;
            int i = lo, j = mid, k = 0, *tmp = o + g->n_t;
            while (i < mid && j < hi) tmp[k++] = g->t[o[i]].offset <= g->t[o[j]].offset ? o[i++] : o[j++];
            while (i < mid) tmp[k++] = o[i++];
            while (j < hi) tmp[k++] = o[j++];
            memcpy(o + lo, tmp, (size_t)k * sizeof *o);
        }
    kiln_status s = KILN_OK;
    for (int i = 1; i < g->n_t && !s; i++) {
        const gg_tensor *a = &g->t[o[i - 1]], *b = &g->t[o[i]];
        if (a->offset + a->nbytes > b->offset)
            s = kiln__errs(KILN_ERR_FORMAT, "kiln_gguf_open: %s: tensors '%s' and '%s' overlap", g->path,
                           str_of(g, a->name), str_of(g, b->name));
    }
    free(o);
    return s;
}

static kiln_status index_names(kiln_gguf *g) {
    int n = g->n_kv > g->n_t ? g->n_kv : g->n_t;
    int *tmp = kiln__malloc((size_t)(n ? n : 1) * sizeof *tmp);
    g->kv_sorted = kiln__malloc((size_t)(g->n_kv ? g->n_kv : 1) * sizeof(int));
    g->t_sorted = kiln__malloc((size_t)(g->n_t ? g->n_t : 1) * sizeof(int));
    if (!tmp || !g->kv_sorted || !g->t_sorted) {
        free(tmp);
        return kiln__errs(KILN_ERR_OOM, "kiln_gguf_open: out of memory");
    }
    for (int i = 0; i < g->n_kv; i++) g->kv_sorted[i] = i;
    for (int i = 0; i < g->n_t; i++) g->t_sorted[i] = i;
    sort_idx(g, g->kv_sorted, g->n_kv, true, tmp);
    sort_idx(g, g->t_sorted, g->n_t, false, tmp);
    free(tmp);
    for (int i = 1; i < g->n_kv; i++)
        if (!strcmp(str_of(g, g->kv[g->kv_sorted[i]].key), str_of(g, g->kv[g->kv_sorted[i - 1]].key)))
            return kiln__errs(KILN_ERR_FORMAT, "kiln_gguf_open: %s: key '%s' appears twice", g->path,
                              str_of(g, g->kv[g->kv_sorted[i]].key));
    for (int i = 1; i < g->n_t; i++)
        if (!strcmp(str_of(g, g->t[g->t_sorted[i]].name), str_of(g, g->t[g->t_sorted[i - 1]].name)))
            return kiln__errs(KILN_ERR_FORMAT, "kiln_gguf_open: %s: tensor '%s' appears twice", g->path,
                              str_of(g, g->t[g->t_sorted[i]].name));
    return KILN_OK;
}

static kiln_status parse(kiln_gguf *g) {
    rd r = {g->map, g->map_len, 0, g};
    const unsigned char *magic = NULL;
    uint64_t n_t, n_kv;
    kiln_status s;
    if ((s = take(&r, 4, &magic, "the magic"))) return s;
    if (memcmp(magic, "GGUF", 4)) return fail(&r, "not a GGUF file (the magic is not \"GGUF\")");
    if ((s = u32(&r, &g->version, "the version"))) return s;
    if (g->version != 2 && g->version != 3)
        return kiln__errs(g->version == 1 || (g->version & 0xffff) == 0 ? KILN_ERR_UNSUPPORTED : KILN_ERR_FORMAT,
                          "kiln_gguf_open: %s: GGUF version %u (kiln reads 2 and 3%s)", g->path, g->version,
                          (g->version & 0xffff) == 0 ? "; this looks like a big-endian file" : "");
    if ((s = u64(&r, &n_t, "the tensor count")) || (s = u64(&r, &n_kv, "the metadata count"))) return s;
    /* a key is at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8 */
    if (n_kv > INT32_MAX || n_kv > left(&r) / 13)
        return fail(&r, "%llu metadata entries cannot fit in the %zu bytes left", (unsigned long long)n_kv, left(&r));
    if ((s = read_kvs(&r, n_kv))) return s;
    if (n_t > INT32_MAX || n_t > left(&r) / 32)
        return fail(&r, "%llu tensor infos cannot fit in the %zu bytes left", (unsigned long long)n_t, left(&r));
    if ((s = index_names(g)) || (s = find_alignment(&r))) return s;
    if ((s = read_tensor_infos(&r, n_t))) return s;
    g->n_t = (int)n_t;
    free(g->t_sorted); /* indexed again now that the names are in */
    free(g->kv_sorted);
    g->t_sorted = g->kv_sorted = NULL;
    if ((s = index_names(g))) return s;
    size_t start = (r.at + g->alignment - 1) / g->alignment * g->alignment;
    if (start > g->map_len) {
        if (g->n_t) return fail(&r, "the data section's start (%zu) is past the end of the file", start);
        start = g->map_len;
    }
    g->data = g->map + start;
    g->data_len = g->map_len - start;
    return check_data(&r);
}

void kiln_gguf_close(kiln_gguf *g) {
    if (!g) return;
    mapping_drop(g->mapping);
    for (int i = 0; g->kv && i < g->n_kv; i++) free(g->kv[i].strs);
    free(g->kv);
    free(g->t);
    free(g->kv_sorted);
    free(g->t_sorted);
    kiln__buf_free(&g->arena);
    free(g->path);
    free(g);
}

kiln_gguf *kiln_gguf_open(const char *path) {
    if (!path) return kiln__err(KILN_ERR_ARG, "kiln_gguf_open: path is NULL");
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1)
        return kiln__err(KILN_ERR_UNSUPPORTED, "kiln_gguf_open: big-endian hosts are not supported");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return kiln__err(KILN_ERR_IO, "kiln_gguf_open: cannot open %s: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISREG(sb.st_mode)) {
        close(fd);
        return kiln__err(KILN_ERR_IO, "kiln_gguf_open: %s is not a regular file", path);
    }
    kiln_gguf *g = kiln__calloc(1, sizeof *g);
    if (!g || !(g->path = kiln__strdup(path))) {
        close(fd);
        free(g);
        return kiln__err(KILN_ERR_OOM, "kiln_gguf_open: out of memory");
    }
    g->alignment = 32;
    g->map_len = (size_t)sb.st_size;
    if (g->map_len) {
        /* copy-on-write: a mapped tensor written to (kiln_gguf_map) changes
         * this process's copy of that page, never the file */
        void *p = mmap(NULL, g->map_len, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
        int err = errno;
        if (p != MAP_FAILED && !(g->mapping = kiln__calloc(1, sizeof *g->mapping))) {
            munmap(p, g->map_len);
            err = ENOMEM;
        }
        if (!g->mapping) {
            close(fd);
            kiln_gguf_close(g);
            return kiln__err(KILN_ERR_IO, "kiln_gguf_open: cannot map %s: %s", path, strerror(err));
        }
        *g->mapping = (gg_mapping){.p = p, .len = g->map_len};
        atomic_init(&g->mapping->refs, 1);
        g->map = p;
    }
    close(fd);
    if (parse(g)) {
        kiln_gguf_close(g);
        return NULL;
    }
    return g;
}

/* ---- metadata ---- */

uint32_t kiln_gguf_version(const kiln_gguf *g) { return g ? g->version : 0; }
uint32_t kiln_gguf_alignment(const kiln_gguf *g) { return g ? g->alignment : 0; }
int kiln_gguf_kv_count(const kiln_gguf *g) { return g ? g->n_kv : 0; }
const char *kiln_gguf_kv_key(const kiln_gguf *g, int i) {
    return g && i >= 0 && i < g->n_kv ? str_of(g, g->kv[i].key) : NULL;
}
kiln_gguf_type kiln_gguf_kv_type(const kiln_gguf *g, int i) {
    return g && i >= 0 && i < g->n_kv ? (kiln_gguf_type)g->kv[i].type : KILN_GGUF_TYPE_COUNT;
}
int kiln_gguf_find_key(const kiln_gguf *g, const char *key) {
    return g && key && g->kv_sorted ? bsearch_idx(g, g->kv_sorted, g->n_kv, key, true) : -1;
}

/* Element i of type t at p as an integer / a double; false if not a number. */
static bool num_at(uint32_t t, const unsigned char *p, int64_t *iv, double *fv, bool *is_int) {
    int64_t i = 0;
    double f = 0;
    *is_int = true;
    switch (t) {
    case KILN_GGUF_UINT8: case KILN_GGUF_BOOL: i = p[0]; break;
    case KILN_GGUF_INT8: i = (int8_t)p[0]; break;
    case KILN_GGUF_UINT16: i = (uint16_t)le(p, 2); break;
    case KILN_GGUF_INT16: i = (int16_t)(uint16_t)le(p, 2); break;
    case KILN_GGUF_UINT32: i = (uint32_t)le(p, 4); break;
    case KILN_GGUF_INT32: i = (int32_t)(uint32_t)le(p, 4); break;
    case KILN_GGUF_INT64: i = (int64_t)le(p, 8); break;
    case KILN_GGUF_UINT64: {
        uint64_t u = le(p, 8);
        if (u > INT64_MAX) return false; /* does not fit the int64 accessor */
        i = (int64_t)u;
        break;
    }
    case KILN_GGUF_FLOAT32: {
        float x;
        uint32_t b = (uint32_t)le(p, 4);
        memcpy(&x, &b, 4);
        f = x;
        *is_int = false;
        break;
    }
    case KILN_GGUF_FLOAT64: {
        uint64_t b = le(p, 8);
        memcpy(&f, &b, 8);
        *is_int = false;
        break;
    }
    default: return false;
    }
    if (*is_int) f = (double)i;
    *iv = i;
    *fv = f;
    return true;
}

static const gg_kv *get_kv(const kiln_gguf *g, const char *key, const char *who, kiln_status *s) {
    if (!g || !key) {
        *s = kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
        return NULL;
    }
    int i = kiln_gguf_find_key(g, key);
    if (i < 0) {
        *s = kiln__errs(KILN_ERR_FORMAT, "%s: %s has no key '%s'", who, g->path, key);
        return NULL;
    }
    return &g->kv[i];
}

static kiln_status get_num(const kiln_gguf *g, uint32_t t, const unsigned char *p, const char *key, bool want_int,
                           int64_t *iv, double *fv, const char *who) {
    bool is_int;
    if (!num_at(t, p, iv, fv, &is_int) || (want_int && !is_int))
        return kiln__errs(KILN_ERR_FORMAT, "%s: %s: key '%s' is not %s", who, g->path, key,
                          want_int ? "an integer (or one past int64)" : "a number");
    return KILN_OK;
}

kiln_status kiln_gguf_get_int(const kiln_gguf *g, const char *key, int64_t *out) {
    kiln_status s = KILN_OK;
    const gg_kv *kv = get_kv(g, key, "kiln_gguf_get_int", &s);
    double f;
    return kv ? get_num(g, kv->type, kv->raw, key, true, out, &f, "kiln_gguf_get_int") : s;
}

kiln_status kiln_gguf_get_float(const kiln_gguf *g, const char *key, double *out) {
    kiln_status s = KILN_OK;
    const gg_kv *kv = get_kv(g, key, "kiln_gguf_get_float", &s);
    int64_t i;
    return kv ? get_num(g, kv->type, kv->raw, key, false, &i, out, "kiln_gguf_get_float") : s;
}

const char *kiln_gguf_get_string(const kiln_gguf *g, const char *key, size_t *len) {
    int i = kiln_gguf_find_key(g, key);
    if (i < 0 || g->kv[i].type != KILN_GGUF_STRING) return NULL;
    if (len) *len = (size_t)g->kv[i].str.len;
    return str_of(g, g->kv[i].str);
}

static const gg_kv *get_array(const kiln_gguf *g, const char *key, const char *who, kiln_status *s) {
    const gg_kv *kv = get_kv(g, key, who, s);
    if (kv && kv->type != KILN_GGUF_ARRAY) {
        *s = kiln__errs(KILN_ERR_FORMAT, "%s: %s: key '%s' is not an array", who, g->path, key);
        return NULL;
    }
    return kv;
}

kiln_status kiln_gguf_get_array(const kiln_gguf *g, const char *key, kiln_gguf_type *elem, uint64_t *n) {
    kiln_status s = KILN_OK;
    const gg_kv *kv = get_array(g, key, "kiln_gguf_get_array", &s);
    if (!kv) return s;
    if (elem) *elem = (kiln_gguf_type)kv->elem;
    if (n) *n = kv->n;
    return KILN_OK;
}

static kiln_status array_num(const kiln_gguf *g, const char *key, uint64_t i, bool want_int, int64_t *iv, double *fv,
                             const char *who) {
    kiln_status s = KILN_OK;
    const gg_kv *kv = get_array(g, key, who, &s);
    if (!kv) return s;
    if (i >= kv->n)
        return kiln__errs(KILN_ERR_ARG, "%s: '%s' has %llu elements, not %llu", who, key, (unsigned long long)kv->n,
                          (unsigned long long)i + 1);
    size_t sz = scalar_size(kv->elem);
    if (!sz) return kiln__errs(KILN_ERR_FORMAT, "%s: %s: '%s' is not an array of numbers", who, g->path, key);
    return get_num(g, kv->elem, kv->raw + i * sz, key, want_int, iv, fv, who);
}

kiln_status kiln_gguf_array_int(const kiln_gguf *g, const char *key, uint64_t i, int64_t *out) {
    double f;
    return array_num(g, key, i, true, out, &f, "kiln_gguf_array_int");
}
kiln_status kiln_gguf_array_float(const kiln_gguf *g, const char *key, uint64_t i, double *out) {
    int64_t v;
    return array_num(g, key, i, false, &v, out, "kiln_gguf_array_float");
}

const char *kiln_gguf_array_string(const kiln_gguf *g, const char *key, uint64_t i, size_t *len) {
    int k = kiln_gguf_find_key(g, key);
    if (k < 0) return NULL;
    const gg_kv *kv = &g->kv[k];
    if (kv->type != KILN_GGUF_ARRAY || kv->elem != KILN_GGUF_STRING || i >= kv->n) return NULL;
    if (len) *len = (size_t)kv->strs[i].len;
    return str_of(g, kv->strs[i]);
}

/* ---- tensors ---- */

int kiln_gguf_tensor_count(const kiln_gguf *g) { return g ? g->n_t : 0; }
int kiln_gguf_find_tensor(const kiln_gguf *g, const char *name) {
    return g && name && g->t_sorted ? bsearch_idx(g, g->t_sorted, g->n_t, name, false) : -1;
}

kiln_status kiln_gguf_tensor_info_at(const kiln_gguf *g, int i, kiln_gguf_tensor_info *out) {
    if (!g || !out) return kiln__errs(KILN_ERR_ARG, "kiln_gguf_tensor_info_at: NULL argument");
    if (i < 0 || i >= g->n_t)
        return kiln__errs(KILN_ERR_ARG, "kiln_gguf_tensor_info_at: index %d not in [0, %d)", i, g->n_t);
    const gg_tensor *t = &g->t[i];
    *out = (kiln_gguf_tensor_info){.name = str_of(g, t->name), .ndim = t->ndim, .ggml_type = t->type,
                                   .type_name = kiln_gguf_type_name(t->type), .kiln_dtype = kiln_gguf_dtype(t->type),
                                   .offset = t->offset, .nbytes = (size_t)t->nbytes, .data = g->data + t->offset};
    for (int d = 0; d < 4; d++) {
        out->ne[d] = t->ne[d];
        out->shape[d] = d < t->ndim ? t->ne[t->ndim - 1 - d] : 1;
    }
    return KILN_OK;
}

static const gg_tensor *find_t(const kiln_gguf *g, const char *name, const char *who) {
    int i = kiln_gguf_find_tensor(g, name);
    if (i < 0) return kiln__err(KILN_ERR_FORMAT, "%s: %s has no tensor '%s'", who, g->path, name);
    return &g->t[i];
}

kiln_tensor *kiln_gguf_load(kiln_gguf *g, kiln_ctx *ctx, const char *name) {
    const char *who = "kiln_gguf_load";
    if (!g || !ctx || !name) return kiln__err(KILN_ERR_ARG, "%s: NULL argument", who);
    const gg_tensor *e = find_t(g, name, who);
    if (!e) return NULL;
    int dt = kiln_gguf_dtype(e->type);
    if (dt < 0)
        return kiln__err(KILN_ERR_DTYPE, "%s: %s: tensor '%s' is %s, which kiln has no dtype for", who, g->path, name,
                         kiln_gguf_type_name(e->type));
    int64_t shape[4];
    for (int d = 0; d < e->ndim; d++) shape[d] = e->ne[e->ndim - 1 - d];
    kiln_tensor *t = kiln_tensor_new(ctx, (kiln_dtype)dt, e->ndim, shape);
    if (!t) return kiln__err_context("%s: %s: tensor '%s'", who, g->path, name), NULL;
    if (kiln_tensor_nbytes(t) != e->nbytes)
        return kiln__err(KILN_ERR_DTYPE, "%s: %s: tensor '%s': kiln's %s takes %zu bytes, the file's %s %llu", who,
                         g->path, name, kiln_dtype_name((kiln_dtype)dt), kiln_tensor_nbytes(t),
                         kiln_gguf_type_name(e->type), (unsigned long long)e->nbytes);
    kiln_tensor_set_name(t, name);
    memcpy(t->data, g->data + e->offset, (size_t)e->nbytes);
    return t;
}

/* mapped tensors start on 32 bytes, as kiln's own storage does at least
 * (GGUF's default alignment): kernels may read a block's fields in place */
#define MAP_ALIGN 32

/* The pages of [p, p + n) in the page tables now (read from the file
 * where they are not cached), as llama.cpp's loader populates its
 * mapping: the first token then pays no page faults. Only a hint: an older
 * kernel reads them ahead in the background instead. */
static void prefault(const void *p, size_t n) {
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0 || !n) return;
    uintptr_t a = (uintptr_t)p / (uintptr_t)pg * (uintptr_t)pg, b = (uintptr_t)p + n;
#ifdef MADV_POPULATE_READ
    if (!madvise((void *)a, b - a, MADV_POPULATE_READ)) return;
#endif
    madvise((void *)a, b - a, MADV_WILLNEED);
}

kiln_tensor *kiln_gguf_map_rows(kiln_gguf *g, kiln_ctx *ctx, const char *const *names, int n) {
    const char *who = "kiln_gguf_map";
    if (!g || !ctx || !names || n < 1) return kiln__err(KILN_ERR_ARG, "%s: NULL argument or no names", who);
    const gg_tensor *e[64] = {0};
    if (n > 64) return kiln__err(KILN_ERR_ARG, "%s: %d tensors (at most 64)", who, n);
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        if (!names[i]) return kiln__err(KILN_ERR_ARG, "%s: name %d is NULL", who, i);
        if (!(e[i] = find_t(g, names[i], who))) return NULL;
        const gg_tensor *a = e[0], *b = e[i];
        if (kiln_gguf_dtype(b->type) < 0)
            return kiln__err(KILN_ERR_DTYPE, "%s: %s: tensor '%s' is %s, which kiln has no dtype for", who, g->path,
                             names[i], kiln_gguf_type_name(b->type));
        if (i && (b->type != a->type || b->ne[0] != a->ne[0] || b->ne[2] * b->ne[3] != 1 || a->ne[2] * a->ne[3] != 1))
            return kiln__err(KILN_ERR_SHAPE, "%s: %s: '%s' (%s, %lld columns) cannot be stacked under '%s' (%s, %lld)",
                             who, g->path, names[i], kiln_gguf_type_name(b->type), (long long)b->ne[0], names[0],
                             kiln_gguf_type_name(a->type), (long long)a->ne[0]);
        if (i && e[i - 1]->offset + e[i - 1]->nbytes != b->offset)
            return kiln__err(KILN_ERR_UNSUPPORTED, "%s: %s: '%s' does not follow '%s' in the file", who, g->path,
                             names[i], names[i - 1]);
        rows += b->ne[1];
    }
    const unsigned char *at = g->data + e[0]->offset;
    if ((uintptr_t)at % MAP_ALIGN)
        return kiln__err(KILN_ERR_UNSUPPORTED,
                         "%s: %s: tensor '%s' starts at byte %zu of the file, not a multiple of %d (general.alignment "
                         "%u): kiln_gguf_load copies it",
                         who, g->path, names[0], (size_t)(at - g->map), MAP_ALIGN, g->alignment);
    int64_t shape[4];
    int ndim = n > 1 ? 2 : e[0]->ndim;
    for (int d = 0; d < ndim; d++) shape[d] = n > 1 ? (d ? e[0]->ne[0] : rows) : e[0]->ne[ndim - 1 - d];
    kiln_dtype dt = (kiln_dtype)kiln_gguf_dtype(e[0]->type);
    uint64_t bytes = e[n - 1]->offset + e[n - 1]->nbytes - e[0]->offset;
    if (kiln__elems_bytes(dt, kiln__numel(ndim, shape)) != bytes)
        return kiln__err(KILN_ERR_DTYPE, "%s: %s: tensor '%s': kiln's %s takes %zu bytes, the file's %s %llu", who,
                         g->path, names[0], kiln_dtype_name(dt), kiln__elems_bytes(dt, kiln__numel(ndim, shape)),
                         kiln_gguf_type_name(e[0]->type), (unsigned long long)bytes);
    atomic_fetch_add(&g->mapping->refs, 1);
    if (kiln__ctx_hold(ctx, mapping_drop, g->mapping)) {
        mapping_drop(g->mapping);
        return kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
    }
    kiln_tensor *t = kiln__tensor_borrowed(ctx, dt, ndim, shape, (void *)at);
    if (!t) return kiln__err_context("%s: %s: tensor '%s'", who, g->path, names[0]), NULL;
    prefault(at, (size_t)bytes);
    return kiln_tensor_set_name(t, names[0]);
}

kiln_tensor *kiln_gguf_map(kiln_gguf *g, kiln_ctx *ctx, const char *name) {
    return kiln_gguf_map_rows(g, ctx, &name, 1);
}

kiln_status kiln_gguf_read_into(kiln_gguf *g, const char *name, kiln_tensor *dst) {
    const char *who = "kiln_gguf_read_into";
    if (!g || !name || !dst) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who);
    const gg_tensor *e = find_t(g, name, who);
    if (!e) return kiln_last_status();
    int64_t shape[4];
    for (int d = 0; d < e->ndim; d++) shape[d] = e->ne[e->ndim - 1 - d];
    /* a 2-d [1, n] and a 1-d [n] are the same data: compare element layouts */
    if (!kiln__shape_eq(e->ndim, shape, dst->ndim, dst->shape)) {
        char a[96], b[96];
        return kiln__errs(KILN_ERR_SHAPE, "%s: %s: tensor '%s' is %s but '%s' is %s", who, g->path, name,
                          kiln__dims_str(e->ndim, shape, a), dst->name, kiln__shape_str(dst, b));
    }
    if (!dst->data || dst->op != KILN_OP_NONE || !kiln_tensor_is_contiguous(dst))
        return kiln__errs(KILN_ERR_ARG, "%s: '%s' is not a contiguous leaf with storage", who, dst->name);
    const void *src = g->data + e->offset;
    int dt = kiln_gguf_dtype(e->type);
    if (dt == (int)dst->dtype && kiln_tensor_nbytes(dst) == e->nbytes) {
        kiln_status s = kiln__host_write(dst);
        if (!s) memcpy(dst->data, src, (size_t)e->nbytes);
        return s;
    }
    /* any float dtype with a to_f32 converts (after the merge of KILN_Q8_0 / KILN_Q4_0 that is their
     * dequantization, if their traits' to_f32 takes n elements as the others do) */
    if (dt < 0 || dt == KILN_I32 || !kiln__types[dt].to_f32 || !kiln__is_float(dst->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "%s: %s: tensor '%s' is %s; '%s' is %s", who, g->path, name,
                          kiln_gguf_type_name(e->type), dst->name, kiln_dtype_name(dst->dtype));
    int64_t n = kiln_tensor_numel(dst);
    float *f = kiln__malloc((size_t)(n ? n : 1) * sizeof *f);
    if (!f) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    void *raw = NULL; /* an alignment of 1 can leave the data unaligned for its type */
    if ((uintptr_t)src % 4 && (raw = kiln__malloc((size_t)e->nbytes))) src = memcpy(raw, src, (size_t)e->nbytes);
    kiln__types[dt].to_f32(src, f, n);
    free(raw);
    kiln_status s = kiln_tensor_set_f32(dst, f, n);
    free(f);
    return s;
}
