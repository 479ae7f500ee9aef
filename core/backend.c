/* backend.c — choosing backends, and keeping a tensor's host and device
 * copies coherent (see backend.h for the rules). */
#include "backend.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

struct kiln_devalloc { /* device memory, or a recording */
    kiln_backend *b;
    kiln_devbuf *d;
    kiln_record *r;
};

static void devalloc_free(const struct kiln_devalloc *a) {
    if (a->r) a->b->vt->record_free(a->b, a->r);
    else a->b->vt->free(a->b, a->d);
}

/* ---- the table of backends ---- */

#define MAX_BACKENDS 8

typedef struct entry {
    const char *name;
    kiln_backend *(*open)(void);
    bool host;
    kiln_backend *b;    /* started */
    kiln_status status; /* its start failed: the same answer every time */
    char error[256];
} entry;

static entry table[MAX_BACKENDS];
static int n_table;
static kiln_backend *host_backend; /* once found */
static pthread_mutex_t table_lock = PTHREAD_MUTEX_INITIALIZER;

void kiln__backend_register(const char *name, kiln_backend *(*open)(void), bool host) {
    pthread_mutex_lock(&table_lock);
    if (n_table < MAX_BACKENDS) table[n_table++] = (entry){.name = name, .open = open, .host = host};
    pthread_mutex_unlock(&table_lock);
}

/* e's backend, started on first use; call with table_lock held. */
static kiln_backend *open_entry(entry *e) {
    if (!e->b && !e->status && !(e->b = e->open())) {
        e->status = kiln_last_status() ? kiln_last_status() : KILN_ERR_UNSUPPORTED;
        snprintf(e->error, sizeof e->error, "%s", kiln_last_error());
    }
    return e->b ? e->b : kiln__err(e->status, "%s", e->error);
}

kiln_backend *kiln__backend_host(void) {
    kiln_backend *h = __atomic_load_n(&host_backend, __ATOMIC_ACQUIRE);
    if (h) return h;
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < n_table && !h; i++)
        if (table[i].host) h = open_entry(&table[i]);
    if (h) __atomic_store_n(&host_backend, h, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&table_lock);
    /* the CPU registers from a constructor, which a link that picked
     * libkiln's objects one by one would leave out (Makefile: libkiln.a) */
    return h ? h : kiln__err(KILN_ERR_STATE, "no CPU backend is registered (libkiln's constructors did not run)");
}

/* Backends a build may leave out, and how to build them in. */
static const struct {
    const char *name, *what, *how;
} optional[] = {{"vulkan", "Vulkan", "make VULKAN=1"}, {"cuda", "CUDA", "make CUDA=1"}};

kiln_backend *kiln_backend_get(const char *name) {
    if (!name) return kiln__err(KILN_ERR_ARG, "kiln_backend_get: name is NULL");
    kiln_backend *b = NULL;
    bool found = false;
    pthread_mutex_lock(&table_lock);
    for (int i = 0; i < n_table && !found; i++)
        if ((found = !strcmp(table[i].name, name))) b = open_entry(&table[i]);
    pthread_mutex_unlock(&table_lock);
    if (found) return b;
    for (size_t i = 0; i < sizeof optional / sizeof *optional; i++)
        if (!strcmp(name, optional[i].name))
            return kiln__err(KILN_ERR_UNSUPPORTED, "kiln_backend_get: this kiln was built without %s (%s)",
                             optional[i].what, optional[i].how);
    return kiln__err(KILN_ERR_ARG, "kiln_backend_get: unknown backend '%s' (expected cpu, vulkan or cuda)", name);
}

/* b, or the host backend for NULL (the CPU, in the public API) */
static const kiln_backend *or_host(const kiln_backend *b) { return b ? b : kiln__backend_host(); }

const char *kiln_backend_name(const kiln_backend *b) { return (b = or_host(b)) ? b->name : "cpu"; }
const char *kiln_backend_device(const kiln_backend *b) {
    if (!(b = or_host(b))) return "";
    return b->vt->describe ? b->vt->describe(b) : b->device;
}
int64_t kiln_backend_validation_messages(const kiln_backend *b) { return b ? b->validation_messages : 0; }

kiln_status kiln_ctx_set_backend(kiln_ctx *ctx, kiln_backend *b) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_ctx_set_backend: ctx is NULL");
    ctx->backend = b == kiln__backend_host() ? NULL : b;
    return KILN_OK;
}

kiln_backend *kiln_ctx_backend(const kiln_ctx *ctx) {
    return ctx && ctx->backend ? ctx->backend : kiln__backend_host();
}

/* ---- device memory owned by a context ---- */

static kiln_devbuf *devbuf_new(kiln_ctx *ctx, kiln_backend *b, size_t bytes) {
    if (kiln__owned_grow(ctx, (void **)&ctx->devbufs, &ctx->cap_devbufs, ctx->n_devbufs + 1, sizeof *ctx->devbufs))
        return NULL;
    kiln_devbuf *d = b->vt->alloc(b, bytes ? bytes : 4);
    if (d) ctx->devbufs[ctx->n_devbufs++] = (struct kiln_devalloc){b, d, NULL};
    return d;
}

static void devalloc_drop(kiln_ctx *ctx, const kiln_devbuf *d, const kiln_record *r) {
    for (int i = 0; (d || r) && i < ctx->n_devbufs; i++)
        if (r ? ctx->devbufs[i].r == r : ctx->devbufs[i].d == d) {
            devalloc_free(&ctx->devbufs[i]);
            ctx->devbufs[i] = ctx->devbufs[--ctx->n_devbufs];
            return;
        }
}

void kiln__devbuf_free(kiln_ctx *ctx, kiln_devbuf *d) { devalloc_drop(ctx, d, NULL); }

kiln_status kiln__record_keep(kiln_ctx *ctx, kiln_backend *b, kiln_record *r) {
    kiln_status s = kiln__owned_grow(ctx, (void **)&ctx->devbufs, &ctx->cap_devbufs, ctx->n_devbufs + 1, sizeof *ctx->devbufs);
    if (s) b->vt->record_free(b, r);
    else ctx->devbufs[ctx->n_devbufs++] = (struct kiln_devalloc){b, NULL, r};
    return s;
}

void kiln__record_free(kiln_ctx *ctx, kiln_record *r) { devalloc_drop(ctx, NULL, r); }

kiln_devbuf *kiln__devbuf_new(kiln_ctx *ctx, kiln_backend *b, size_t bytes) { return devbuf_new(ctx, b, bytes); }

void kiln__ctx_free_device(kiln_ctx *ctx) {
    for (int i = ctx->n_devbufs - 1; i >= 0; i--) devalloc_free(&ctx->devbufs[i]); /* recordings before their memory */
    ctx->n_devbufs = 0;
}

/* ---- residency ---- */

static size_t dev_bytes(const kiln_tensor *o) { return (o->storage_bytes + 3) & ~(size_t)3; }

void kiln__zeros_settle(kiln_tensor *t) {
    kiln_tensor *o = kiln__owner(t);
    if (!(o->flags & KILN_FLAG_ZEROS)) return;
    memset(o->data, 0, o->storage_bytes);
    o->flags &= ~(uint32_t)KILN_FLAG_ZEROS;
}

kiln_status kiln__host_read(const kiln_tensor *t) {
    kiln_tensor *o = kiln__owner((kiln_tensor *)t);
    kiln__zeros_settle(o);
    if (!o->dev || (o->where & KILN_AT_HOST)) return KILN_OK;
    kiln_backend *b = o->dev_backend;
    kiln_status s = b->vt->download(b, o->dev, 0, o->data, o->storage_bytes);
    if (!s) o->where |= KILN_AT_HOST;
    return s;
}

kiln_status kiln__host_write(const kiln_tensor *t) {
    kiln_status s = kiln__host_read(t);
    if (!s) kiln__owner((kiln_tensor *)t)->where = KILN_AT_HOST;
    return s;
}

kiln_status kiln__dev_alloc(kiln_backend *b, kiln_tensor *o) {
    if (o->dev && o->dev_backend != b) { /* moving to another device: through the host */
        kiln_status s = kiln__host_read(o);
        if (s) return s;
        kiln__devbuf_free(o->ctx, o->dev);
        o->dev = NULL;
    }
    if (!o->dev) {
        if (!(o->dev = devbuf_new(o->ctx, b, dev_bytes(o)))) return kiln_last_status();
        o->dev_backend = b;
        o->where = KILN_AT_HOST;
    }
    o->dbuf = o->dev;
    o->doff = 0;
    return KILN_OK;
}

kiln_status kiln__dev_read(kiln_backend *b, kiln_tensor *o, kiln_graph_stats *st) {
    kiln_status s = kiln__dev_alloc(b, o);
    if (s || (o->where & KILN_AT_DEV)) return s;
    kiln__zeros_settle(o);
    if ((s = b->vt->upload(b, o->dev, 0, o->data, o->storage_bytes))) return s;
    o->where |= KILN_AT_DEV;
    if (st) {
        st->uploads++;
        st->upload_bytes += (int64_t)o->storage_bytes;
    }
    return KILN_OK;
}

/* With a device copy only that one is zeroed (the host's is stale until
 * read): optimizer steps zero every gradient, and the host need not touch
 * them. Without one the zeros wait for the first reader or writer
 * (KILN_FLAG_ZEROS): the convolution or matmul that next adds into a
 * gradient stores its product instead, and no pass writes the zeros. */
kiln_status kiln__tensor_zero(kiln_tensor *t) {
    kiln_tensor *o = kiln__owner(t);
    if (o->dev && !o->dev_backend->vt->zero(o->dev_backend, o->dev, 0, dev_bytes(o))) {
        o->flags &= ~(uint32_t)KILN_FLAG_ZEROS;
        o->where = KILN_AT_DEV;
        return KILN_OK;
    }
    if (o->dev) memset(o->data, 0, o->storage_bytes);
    else o->flags |= KILN_FLAG_ZEROS;
    o->where = KILN_AT_HOST;
    return KILN_OK;
}

int64_t kiln__qgemm_tile_rows(kiln_dtype t, int64_t n, int64_t k, int64_t elem_bytes) {
    const char *e = getenv("KILN_QGEMM_TILE_BYTES");
    const long long env = e ? atoll(e) : 0;
    const int64_t bytes = env > 0 ? env : (int64_t)64 << 20, blck = kiln__types[t].blck;
    int64_t g = k, r = blck; /* gcd(k, blck) */
    while (r) {
        const int64_t x = g % r;
        g = r, r = x;
    }
    const int64_t unit = blck / g, rows = bytes / (elem_bytes * k) / unit * unit;
    return rows < unit ? unit : rows > n ? n : rows;
}
