/* gguf_write.c — kiln's GGUF writer (version 3, little-endian). The
 * metadata is serialized as it is set; tensors are remembered and their
 * bytes streamed at save through the atomic write of atomic_file.c, each
 * at the next multiple of the alignment, so a file of many GiB never sits
 * in memory. */
#include "gguf.h"
#include "backend.h"
#include "safetensors.h"

#include <errno.h>

typedef struct gw_tensor {
    char *name;
    uint32_t type;
    int ndim;
    int64_t ne[4];
    uint64_t nbytes, offset;
    kiln_tensor *t;   /* or raw */
    const void *raw;
} gw_tensor;

struct kiln_gguf_writer {
    kiln__buf kv; /* serialized metadata */
    int64_t n_kv;
    char **keys;
    uint32_t alignment;
    gw_tensor *t;
    int n_t, cap_t;
    kiln_status sticky; /* the first error of a set/add call, reported again at save */
};

kiln_gguf_writer *kiln_gguf_writer_new(void) {
    kiln_gguf_writer *w = kiln__calloc(1, sizeof *w);
    if (!w) return kiln__err(KILN_ERR_OOM, "kiln_gguf_writer_new: out of memory");
    w->alignment = 32;
    return w;
}

void kiln_gguf_writer_free(kiln_gguf_writer *w) {
    if (!w) return;
    kiln__buf_free(&w->kv);
    for (int64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (int i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->t);
    free(w);
}

static void put(kiln__buf *b, uint64_t v, int k) {
    unsigned char x[8];
    for (int i = 0; i < k; i++) x[i] = (unsigned char)(v >> (8 * i));
    kiln__buf_add(b, x, (size_t)k);
}
static void put_str(kiln__buf *b, const char *s, size_t n) {
    put(b, n, 8);
    kiln__buf_add(b, s, n);
}

/* A new key: checked, remembered, its name and type written. */
static kiln_status begin_kv(kiln_gguf_writer *w, const char *key, uint32_t type, const char *who) {
    if (!w || !key || !*key) return kiln__errs(KILN_ERR_ARG, "%s: NULL writer or empty key", who);
    for (int64_t i = 0; i < w->n_kv; i++)
        if (!strcmp(w->keys[i], key)) return kiln__errs(KILN_ERR_ARG, "%s: key '%s' set twice", who, key);
    char **k = kiln__realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *k);
    if (!k) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    w->keys = k;
    if (!(k[w->n_kv] = kiln__strdup(key))) return kiln__errs(KILN_ERR_OOM, "%s: out of memory", who);
    w->n_kv++;
    put_str(&w->kv, key, strlen(key));
    put(&w->kv, type, 4);
    return KILN_OK;
}

static int int_size(kiln_gguf_type t) {
    switch (t) {
    case KILN_GGUF_UINT8: case KILN_GGUF_INT8: case KILN_GGUF_BOOL: return 1;
    case KILN_GGUF_UINT16: case KILN_GGUF_INT16: return 2;
    case KILN_GGUF_UINT32: case KILN_GGUF_INT32: return 4;
    case KILN_GGUF_UINT64: case KILN_GGUF_INT64: return 8;
    default: return 0;
    }
}

static bool int_fits(kiln_gguf_type t, int64_t v) {
    switch (t) {
    case KILN_GGUF_BOOL: return v == 0 || v == 1;
    case KILN_GGUF_UINT8: return v >= 0 && v <= UINT8_MAX;
    case KILN_GGUF_INT8: return v >= INT8_MIN && v <= INT8_MAX;
    case KILN_GGUF_UINT16: return v >= 0 && v <= UINT16_MAX;
    case KILN_GGUF_INT16: return v >= INT16_MIN && v <= INT16_MAX;
    case KILN_GGUF_UINT32: return v >= 0 && v <= UINT32_MAX;
    case KILN_GGUF_INT32: return v >= INT32_MIN && v <= INT32_MAX;
    case KILN_GGUF_UINT64: return v >= 0;
    default: return true;
    }
}

static kiln_status done(kiln_gguf_writer *w, kiln_status s) {
    if (!s && w->kv.oom) s = kiln__errs(KILN_ERR_OOM, "kiln_gguf_writer: out of memory");
    if (s && w && !w->sticky) w->sticky = s;
    return s;
}

kiln_status kiln_gguf_set_int(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, int64_t v) {
    const char *who = "kiln_gguf_set_int";
    if (!int_size(type)) return kiln__errs(KILN_ERR_ARG, "%s: '%s': type %d is not an integer type", who, key, type);
    if (!int_fits(type, v))
        return kiln__errs(KILN_ERR_ARG, "%s: '%s': %lld does not fit type %d", who, key, (long long)v, type);
    kiln_status s = begin_kv(w, key, type, who);
    if (s) return s;
    put(&w->kv, (uint64_t)v, int_size(type));
    if (!strcmp(key, "general.alignment")) {
        if (type != KILN_GGUF_UINT32 || !v || (v & (v - 1)))
            return done(w, kiln__errs(KILN_ERR_ARG, "%s: general.alignment must be a u32 power of two", who));
        w->alignment = (uint32_t)v;
    }
    return done(w, KILN_OK);
}

static void put_float(kiln__buf *b, kiln_gguf_type type, double v) {
    if (type == KILN_GGUF_FLOAT32) {
        float f = (float)v;
        uint32_t u;
        memcpy(&u, &f, 4);
        put(b, u, 4);
    } else {
        uint64_t u;
        memcpy(&u, &v, 8);
        put(b, u, 8);
    }
}

kiln_status kiln_gguf_set_float(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, double v) {
    const char *who = "kiln_gguf_set_float";
    if (type != KILN_GGUF_FLOAT32 && type != KILN_GGUF_FLOAT64)
        return kiln__errs(KILN_ERR_ARG, "%s: '%s': type %d is not a float type", who, key, type);
    kiln_status s = begin_kv(w, key, type, who);
    if (!s) put_float(&w->kv, type, v);
    return done(w, s);
}

kiln_status kiln_gguf_set_string(kiln_gguf_writer *w, const char *key, const char *v) {
    if (!v) return kiln__errs(KILN_ERR_ARG, "kiln_gguf_set_string: '%s': NULL value", key);
    kiln_status s = begin_kv(w, key, KILN_GGUF_STRING, "kiln_gguf_set_string");
    if (!s) put_str(&w->kv, v, strlen(v));
    return done(w, s);
}

kiln_status kiln_gguf_set_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem, const void *elems,
                                uint64_t n) {
    const char *who = "kiln_gguf_set_array";
    if (elem == KILN_GGUF_ARRAY || elem >= KILN_GGUF_TYPE_COUNT || (n && !elems))
        return kiln__errs(KILN_ERR_ARG, "%s: '%s': bad element type or NULL elements", who, key);
    if (elem == KILN_GGUF_STRING)
        for (uint64_t i = 0; i < n; i++)
            if (!((const char *const *)elems)[i])
                return kiln__errs(KILN_ERR_ARG, "%s: '%s': string %llu is NULL", who, key, (unsigned long long)i);
    kiln_status s = begin_kv(w, key, KILN_GGUF_ARRAY, who);
    if (s) return s;
    put(&w->kv, elem, 4);
    put(&w->kv, n, 8);
    if (elem == KILN_GGUF_STRING) {
        for (uint64_t i = 0; i < n; i++) {
            const char *e = ((const char *const *)elems)[i];
            put_str(&w->kv, e, strlen(e));
        }
    } else {
        static const size_t sz[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        if (n > SIZE_MAX / sz[elem]) return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': too many elements", who, key));
        kiln__buf_add(&w->kv, elems, (size_t)n * sz[elem]); /* the host is little-endian (checked at save) */
    }
    return done(w, KILN_OK);
}

static kiln_status add(kiln_gguf_writer *w, const char *name, uint32_t type, int ndim, const int64_t *shape,
                       kiln_tensor *t, const void *raw, size_t nbytes, const char *who) {
    if (!w || !name || !*name) return kiln__errs(KILN_ERR_ARG, "%s: NULL writer or empty name", who);
    for (int i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return done(w, kiln__errs(KILN_ERR_ARG, "%s: tensor '%s' added twice", who, name));
    if (ndim < 1 || ndim > 4 || !shape)
        return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': %d dims (GGUF holds 1 to 4)", who, name, ndim));
    gw_tensor e = {.type = type, .ndim = ndim, .t = t, .raw = raw};
    for (int d = 0; d < 4; d++) e.ne[d] = d < ndim ? shape[ndim - 1 - d] : 1;
    for (int d = 0; d < 4; d++)
        if (e.ne[d] < 0) return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': a negative dim", who, name));
    const kiln__ggml_type *g = kiln__ggml_type_of(type);
    if (!g) return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': unknown ggml type %u", who, name, type));
    if (!kiln__ggml_nbytes(type, e.ne, &e.nbytes))
        return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': the innermost dim %lld is not whole %s blocks of %d", who,
                                  name, (long long)e.ne[0], g->name, g->blck));
    if (!t && e.nbytes != nbytes)
        return done(w, kiln__errs(KILN_ERR_ARG, "%s: '%s': %s of this shape takes %llu bytes, not %zu", who, name,
                                  g->name, (unsigned long long)e.nbytes, nbytes));
    if (w->n_t == w->cap_t) {
        int cap = w->cap_t ? 2 * w->cap_t : 16;
        gw_tensor *p = kiln__realloc(w->t, (size_t)cap * sizeof *p);
        if (!p) return done(w, kiln__errs(KILN_ERR_OOM, "%s: out of memory", who));
        w->t = p;
        w->cap_t = cap;
    }
    if (!(e.name = kiln__strdup(name))) return done(w, kiln__errs(KILN_ERR_OOM, "%s: out of memory", who));
    w->t[w->n_t++] = e;
    return KILN_OK;
}

kiln_status kiln_gguf_add_tensor(kiln_gguf_writer *w, const char *name, kiln_tensor *t) {
    const char *who = "kiln_gguf_add_tensor";
    if (!t) return kiln__errs(KILN_ERR_ARG, "%s: '%s': NULL tensor", who, name ? name : "?");
    uint32_t type = UINT32_MAX;
    for (uint32_t g = 0; g < KILN__GGML_TYPES && type == UINT32_MAX; g++)
        if (g != 26 && g != 28 && kiln_gguf_dtype(g) == (int)t->dtype) type = g; /* not ggml's I32/F64 */
    if (type == UINT32_MAX)
        return kiln__errs(KILN_ERR_DTYPE, "%s: '%s' is %s, which GGUF has no type for", who, name,
                          kiln_dtype_name(t->dtype));
    if (!kiln_tensor_is_contiguous(t)) return kiln__errs(KILN_ERR_ARG, "%s: '%s' is not contiguous", who, name);
    return add(w, name, type, t->ndim, t->shape, t, NULL, 0, who);
}

kiln_status kiln_gguf_add_raw(kiln_gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                              const int64_t *shape, const void *data, size_t nbytes) {
    if (nbytes && !data) return kiln__errs(KILN_ERR_ARG, "kiln_gguf_add_raw: '%s': NULL data", name ? name : "?");
    return add(w, name, ggml_type, ndim, shape, NULL, data, nbytes, "kiln_gguf_add_raw");
}

/* ---- save ---- */

static kiln_status write_all(FILE *f, const void *p, size_t n, const char *tmp) {
    if (n && fwrite(p, 1, n, f) != n)
        return kiln__errs(KILN_ERR_IO, "kiln_gguf_writer_save: writing %s: %s", tmp, strerror(errno ? errno : EIO));
    return KILN_OK;
}

static kiln_status pad(FILE *f, uint64_t at, uint32_t align, const char *tmp) {
    static const char zeros[256];
    uint64_t n = (align - at % align) % align;
    kiln_status s = KILN_OK;
    while (n && !s) {
        size_t k = n < sizeof zeros ? (size_t)n : sizeof zeros;
        s = write_all(f, zeros, k, tmp);
        n -= k;
    }
    return s;
}

static kiln_status body(FILE *f, const char *tmp, void *arg) {
    kiln_gguf_writer *w = arg;
    kiln__buf h = {0};
    kiln__buf_add(&h, "GGUF", 4);
    put(&h, 3, 4);
    put(&h, (uint64_t)w->n_t, 8);
    put(&h, (uint64_t)w->n_kv, 8);
    kiln__buf_add(&h, w->kv.p, w->kv.len);
    uint64_t off = 0;
    for (int i = 0; i < w->n_t; i++) {
        gw_tensor *e = &w->t[i];
        e->offset = off;
        put_str(&h, e->name, strlen(e->name));
        put(&h, (uint64_t)e->ndim, 4);
        for (int d = 0; d < e->ndim; d++) put(&h, (uint64_t)e->ne[d], 8);
        put(&h, e->type, 4);
        put(&h, e->offset, 8);
        off += (e->nbytes + w->alignment - 1) / w->alignment * w->alignment;
    }
    if (h.oom) {
        kiln__buf_free(&h);
        return kiln__errs(KILN_ERR_OOM, "kiln_gguf_writer_save: out of memory for the header");
    }
    kiln_status s = write_all(f, h.p, h.len, tmp);
    if (!s) s = pad(f, h.len, w->alignment, tmp);
    kiln__buf_free(&h);
    for (int i = 0; i < w->n_t && !s; i++) {
        const gw_tensor *e = &w->t[i];
        const void *p = e->raw;
        if (e->t) {
            if (!e->t->data)
                return kiln__errs(KILN_ERR_STATE, "kiln_gguf_writer_save: tensor '%s' has no data", e->name);
            if ((s = kiln__host_read(e->t))) return s;
            p = e->t->data;
        }
        s = write_all(f, p, (size_t)e->nbytes, tmp);
        if (!s) s = pad(f, e->nbytes, w->alignment, tmp); /* llama.cpp reads the padded total */
    }
    return s;
}

kiln_status kiln_gguf_writer_save(kiln_gguf_writer *w, const char *path) {
    const char *who = "kiln_gguf_writer_save";
    if (!w || !path || !*path) return kiln__errs(KILN_ERR_ARG, "%s: NULL writer or empty path", who);
    const uint16_t one = 1;
    if (*(const unsigned char *)&one != 1)
        return kiln__errs(KILN_ERR_UNSUPPORTED, "%s: big-endian hosts are not supported", who);
    if (w->sticky)
        return kiln__errs(w->sticky, "%s: an earlier set or add call failed (%s); nothing written", who,
                          kiln_status_name(w->sticky));
    return kiln__atomic_write(path, who, body, w);
}
