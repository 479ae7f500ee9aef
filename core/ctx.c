/* ctx.c — the context: an arena for metadata, a list of owned storage,
 * the parameter list, and global settings (threads). */
#if defined(__linux__)
#include <sys/mman.h>
#endif
#include "backend.h"
#include "pool.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>

#define ARENA_CHUNK (64 * 1024)

struct kiln_arena_chunk {
    kiln_arena_chunk *next;
    size_t used, size;
    _Alignas(16) unsigned char mem[];
};

/* Owned storage: a header before each block so it can be freed early. */
struct kiln_owned {
    kiln_owned *prev, *next;
    void *raw;
    size_t mapped; /* the length of raw's mapping (kiln__huge_map), or 0: raw is calloc'd */
    uint64_t seq;  /* allocation order: the list runs newest first */
    void (*drop)(void *); /* kiln__ctx_hold's: let go of drop_arg, then free raw */
    void *drop_arg;
};

static void owned_release(kiln_owned *o) {
    if (o->drop) o->drop(o->drop_arg);
#ifdef KILN_HUGE_MAP
    if (o->mapped) {
        kiln__huge_unmap(o->raw, o->mapped);
        return;
    }
#endif
    free(o->raw);
}

kiln_ctx *kiln_ctx_new(void) {
    kiln__ops_init();
    kiln_backend *host = kiln__backend_host();
    if (!host) {
        kiln__err_context("kiln_ctx_new");
        return NULL;
    }
    if (host->vt->ready && host->vt->ready(host, "kiln_ctx_new")) return NULL;
    kiln_ctx *ctx = kiln__calloc(1, sizeof *ctx);
    if (!ctx) return kiln__err(KILN_ERR_OOM, "kiln_ctx_new: out of memory");
    ctx->grad_enabled = true;
    return ctx;
}

void kiln_ctx_free(kiln_ctx *ctx) {
    if (!ctx) return;
    kiln__ctx_free_device(ctx);
    for (kiln_owned *o = ctx->owned, *next; o; o = next) {
        next = o->next;
        owned_release(o);
    }
    for (kiln_arena_chunk *c = ctx->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    free(ctx);
}

void *kiln__arena_alloc(kiln_ctx *ctx, size_t bytes) {
    bytes = (bytes + 15) & ~(size_t)15;
    kiln_arena_chunk *c = ctx->chunks;
    if (!c || c->size - c->used < bytes) {
        size_t size = bytes > ARENA_CHUNK ? bytes : ARENA_CHUNK;
        c = kiln__malloc(sizeof *c + size);
        if (!c) return kiln__err(KILN_ERR_OOM, "out of memory for %zu bytes of metadata", bytes);
        c->size = size;
        c->used = 0;
        c->next = ctx->chunks;
        ctx->chunks = c;
    }
    void *p = c->mem + c->used;
    c->used += bytes;
    memset(p, 0, bytes);
    return p;
}

/* Layout: raw -> [padding][kiln_owned*][aligned block]. */
static void *owned_link(kiln_ctx *ctx, void *raw, size_t mapped, size_t head) {
    kiln_owned *o = raw;
    uintptr_t p = ((uintptr_t)raw + head + KILN_ALIGN - 1) & ~(uintptr_t)(KILN_ALIGN - 1);
    ((kiln_owned **)p)[-1] = o;
    o->raw = raw;
    o->mapped = mapped;
    o->seq = ++ctx->owned_seq;
    o->prev = NULL;
    o->next = ctx->owned;
    if (ctx->owned) ctx->owned->prev = o;
    ctx->owned = o;
    return (void *)p;
}

/* Large scratch (a graph's buffer for a big batch) in 2 MiB pages where
 * the kernel gives them on request (THP "madvise"): the 2 MiB-aligned
 * interior of the block only; calloc's fresh mmap'd pages are not touched
 * yet. */
static void huge_pages(void *p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    const uintptr_t huge = (uintptr_t)2 << 20, a = ((uintptr_t)p + huge - 1) & ~(huge - 1),
                    b = ((uintptr_t)p + bytes) & ~(huge - 1);
    if (bytes >= 4 * huge && b > a) madvise((void *)a, b - a, MADV_HUGEPAGE);
#else
    (void)p, (void)bytes;
#endif
}

void *kiln__owned_alloc(kiln_ctx *ctx, size_t bytes) {
    const size_t head = sizeof(kiln_owned) + sizeof(void *);
    if (bytes > SIZE_MAX - KILN_ALIGN - head) return kiln__err(KILN_ERR_OOM, "out of memory: %zu bytes requested", bytes);
    void *raw = kiln__calloc(1, head + KILN_ALIGN + bytes);
    if (!raw) return kiln__err(KILN_ERR_OOM, "out of memory: %zu bytes requested", bytes);
    void *p = owned_link(ctx, raw, 0, head);
    huge_pages(p, bytes);
    return p;
}

/* A tensor's storage (weights a token streams, caches, optimizer state):
 * from 2 MiB up, mapped on a 2 MiB boundary with its whole 2 MiB pages
 * advised as huge: one TLB entry per 2 MiB instead of 512, and no 4 KiB
 * page boundary for the hardware prefetcher to stop at. TinyLlama's
 * per-layer weights (2.2-12 MiB each) were half on 4 KiB pages when only
 * the aligned interior of blocks over 8 MiB was advised, and its Q4_0
 * batch-1 products ran at 0.65-0.9x their rate on huge pages. Not for
 * scratch remade every step: a fresh mapping is faulted in again each
 * time, where calloc reuses the heap. */
void *kiln__owned_alloc_lasting(kiln_ctx *ctx, size_t bytes) {
#ifdef KILN_HUGE_MAP
    const size_t head = sizeof(kiln_owned) + sizeof(void *);
    if (bytes >= ((size_t)2 << 20)) {
        size_t mapped = 0;
        void *raw = kiln__huge_map(head, bytes, &mapped);
        if (!raw) return kiln__err(KILN_ERR_OOM, "out of memory: %zu bytes requested", bytes);
        return owned_link(ctx, raw, mapped, head);
    }
#endif
    return kiln__owned_alloc(ctx, bytes);
}

kiln_status kiln__ctx_hold(kiln_ctx *ctx, void (*drop)(void *), void *arg) {
    const size_t head = sizeof(kiln_owned) + sizeof(void *);
    void *raw = kiln__calloc(1, head + KILN_ALIGN);
    if (!raw) return kiln__errs(KILN_ERR_OOM, "out of memory");
    owned_link(ctx, raw, 0, head);
    ((kiln_owned *)raw)->drop = drop;
    ((kiln_owned *)raw)->drop_arg = arg;
    return KILN_OK;
}

void kiln__owned_free(kiln_ctx *ctx, void *p) {
    if (!p) return;
    kiln_owned *o = ((kiln_owned **)p)[-1];
    if (o->prev) o->prev->next = o->next;
    else ctx->owned = o->next;
    if (o->next) o->next->prev = o->prev;
    owned_release(o);
}

kiln_status kiln__owned_grow(kiln_ctx *ctx, void **p, int *cap, int need, size_t elem) {
    if (need <= *cap) return KILN_OK;
    int ncap = *cap ? *cap : 16;
    while (ncap < need) ncap *= 2;
    void *np = kiln__owned_alloc(ctx, (size_t)ncap * elem);
    if (!np) return KILN_ERR_OOM;
    if (*p) {
        memcpy(np, *p, (size_t)*cap * elem);
        kiln__owned_free(ctx, *p);
    }
    *p = np;
    *cap = ncap;
    return KILN_OK;
}

/* ---- scratch: mark and rewind ---- */

kiln_ctx_mark kiln_ctx_get_mark(const kiln_ctx *ctx) {
    kiln_ctx_mark m = {0};
    if (!ctx) return m;
    m.chunk = ctx->chunks;
    m.used = ctx->chunks ? ctx->chunks->used : 0;
    m.owned = ctx->owned_seq;
    m.tensors = ctx->n_tensors;
    m.params = ctx->n_params;
    m.buffers = ctx->n_buffers;
    m.devbufs = ctx->n_devbufs;
    m.storage = ctx->storage_bytes;
    return m;
}

kiln_status kiln_ctx_rewind(kiln_ctx *ctx, kiln_ctx_mark m) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_ctx_rewind: ctx is NULL");
    if (ctx->n_params != m.params || ctx->n_buffers != m.buffers || ctx->n_devbufs != m.devbufs ||
        ctx->n_tensors < m.tensors || ctx->owned_seq < m.owned)
        return kiln__errs(KILN_ERR_STATE, "kiln_ctx_rewind: the context got parameters, buffers or device "
                                          "memory since the mark (or the mark is from a later point): nothing freed");
    bool found = !m.chunk;
    for (kiln_arena_chunk *c = ctx->chunks; c && !found; c = c->next) found = c == m.chunk;
    if (!found) return kiln__errs(KILN_ERR_STATE, "kiln_ctx_rewind: the mark is not this context's");
    while (ctx->owned && ctx->owned->seq > m.owned) {
        kiln_owned *o = ctx->owned;
        ctx->owned = o->next;
        if (o->next) o->next->prev = NULL;
        owned_release(o);
    }
    while (ctx->chunks != m.chunk) {
        kiln_arena_chunk *c = ctx->chunks;
        ctx->chunks = c->next;
        free(c);
    }
    if (ctx->chunks) ctx->chunks->used = m.used;
    ctx->n_tensors = m.tensors;
    ctx->storage_bytes = m.storage;
    return KILN_OK;
}

void kiln_ctx_set_grad_enabled(kiln_ctx *ctx, bool enabled) { ctx->grad_enabled = enabled; }
bool kiln_ctx_grad_enabled(const kiln_ctx *ctx) { return ctx->grad_enabled; }
size_t kiln_ctx_storage_bytes(const kiln_ctx *ctx) { return ctx->storage_bytes; }

int kiln_ctx_params(kiln_ctx *ctx, kiln_tensor **out, int max) {
    for (int i = 0; out && i < ctx->n_params && i < max; i++) out[i] = ctx->params[i];
    return ctx->n_params;
}

int kiln_ctx_buffers(kiln_ctx *ctx, kiln_tensor **out, int max) {
    for (int i = 0; out && i < ctx->n_buffers && i < max; i++) out[i] = ctx->buffers[i];
    return ctx->n_buffers;
}

void kiln_zero_grad(kiln_ctx *ctx) {
    for (int i = 0; i < ctx->n_params; i++) {
        kiln_tensor *g = ctx->params[i]->grad;
        if (g) kiln__tensor_zero(g);
    }
}

/* ---- threads ---- */

static int n_threads; /* 0: the default */
static int default_threads;
static pthread_once_t default_once = PTHREAD_ONCE_INIT;

/* $KILN_THREADS, else the cores (pool.h), read once; a value that is not
 * a count from 1 to KILN_MAX_THREADS is said on stderr (there is no call
 * to return an error from) and replaced: too many by the most, anything
 * else by the cores. "0" or "" asks for the default. */
static void default_init(void) {
    const int cores = kiln__pool_default_threads();
    const char *env = getenv("KILN_THREADS");
    default_threads = cores;
    if (!env || !*env) return;
    char *end;
    errno = 0;
    const long v = strtol(env, &end, 10);
    while (*end == ' ' || *end == '\t' || *end == '\n') end++;
    if (end == env || *end || errno == ERANGE || v < 0)
        fprintf(stderr, "kiln: KILN_THREADS=\"%s\" is not a thread count (0: the default, or 1 to %d); using %d\n",
                env, KILN_MAX_THREADS, cores);
    else if (v > KILN_MAX_THREADS)
        fprintf(stderr, "kiln: KILN_THREADS=%s is more than %d threads; using %d\n", env, KILN_MAX_THREADS,
                default_threads = KILN_MAX_THREADS);
    else if (v > 0)
        default_threads = (int)v;
}

kiln_status kiln_set_threads(int n) {
    if (n < 0 || n > KILN_MAX_THREADS)
        return kiln__errs(KILN_ERR_ARG, "kiln_set_threads: %d threads: want 1 to %d, or 0 for the default", n,
                          KILN_MAX_THREADS);
    __atomic_store_n(&n_threads, n, __ATOMIC_RELAXED);
    return KILN_OK;
}

int kiln__threads(void) {
    const int n = __atomic_load_n(&n_threads, __ATOMIC_RELAXED);
    if (n > 0) return n;
    pthread_once(&default_once, default_init);
    return default_threads;
}

int kiln_get_threads(void) { return kiln__threads(); }

/* ---- matmul precision ---- */

static kiln_matmul_precision matmul_precision = KILN_MATMUL_F32;

kiln_status kiln_set_matmul_precision(kiln_matmul_precision p) {
    if (p != KILN_MATMUL_F32 && p != KILN_MATMUL_BF16 && p != KILN_MATMUL_TF32)
        return kiln__errs(KILN_ERR_ARG, "kiln_set_matmul_precision: unknown precision %d", (int)p);
    matmul_precision = p;
    return KILN_OK;
}

kiln_matmul_precision kiln_get_matmul_precision(void) { return matmul_precision; }
