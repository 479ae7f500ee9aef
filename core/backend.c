/* backend.c — choosing backends, and keeping a tensor's host and device
 * copies coherent (see backend.h for the rules). */
#include "backend.h"

#include <stdio.h>

struct kiln_devalloc {
    kiln_backend *b;
    kiln_devbuf *d;
};

static kiln_backend cpu_backend = {.name = "cpu", .device = "host CPU"};

kiln_backend *kiln__backend_cpu(void) { return &cpu_backend; }

#ifndef KILN_VULKAN
kiln_backend *kiln__vulkan_backend_new(void) {
    return kiln__err(KILN_ERR_UNSUPPORTED, "kiln_backend_get: this kiln was built without Vulkan (make VULKAN=1)");
}
#endif
#ifndef KILN_CUDA
kiln_backend *kiln__cuda_backend_new(void) {
    return kiln__err(KILN_ERR_UNSUPPORTED, "kiln_backend_get: this kiln was built without CUDA (make CUDA=1)");
}
#endif

kiln_backend *kiln_backend_get(const char *name) {
    static kiln_backend *vulkan;
    static kiln_status vulkan_status = KILN_OK;
    static char vulkan_error[256];
    if (!name) return kiln__err(KILN_ERR_ARG, "kiln_backend_get: name is NULL");
    if (!strcmp(name, "cpu")) {
        snprintf(cpu_backend.device, sizeof cpu_backend.device, "host CPU (%s)", kiln_cpu_describe());
        return &cpu_backend;
    }
    if (!strcmp(name, "vulkan")) {
        /* started once; a failure is remembered so callers get the same answer */
        if (!vulkan && !vulkan_status) {
            vulkan = kiln__vulkan_backend_new();
            if (!vulkan) {
                vulkan_status = kiln_last_status() ? kiln_last_status() : KILN_ERR_UNSUPPORTED;
                snprintf(vulkan_error, sizeof vulkan_error, "%s", kiln_last_error());
            }
        }
        if (!vulkan) return kiln__err(vulkan_status, "%s", vulkan_error);
        return vulkan;
    }
    if (!strcmp(name, "cuda")) {
        static kiln_backend *cuda;
        static kiln_status cuda_status = KILN_OK;
        static char cuda_error[256];
        if (!cuda && !cuda_status) {
            cuda = kiln__cuda_backend_new();
            if (!cuda) {
                cuda_status = kiln_last_status() ? kiln_last_status() : KILN_ERR_UNSUPPORTED;
                snprintf(cuda_error, sizeof cuda_error, "%s", kiln_last_error());
            }
        }
        if (!cuda) return kiln__err(cuda_status, "%s", cuda_error);
        return cuda;
    }
    return kiln__err(KILN_ERR_ARG, "kiln_backend_get: unknown backend '%s' (expected cpu, vulkan or cuda)", name);
}

const char *kiln_backend_name(const kiln_backend *b) { return b ? b->name : "cpu"; }
const char *kiln_backend_device(const kiln_backend *b) { return b ? b->device : cpu_backend.device; }
int64_t kiln_backend_validation_messages(const kiln_backend *b) { return b ? b->validation_messages : 0; }

kiln_status kiln_ctx_set_backend(kiln_ctx *ctx, kiln_backend *b) {
    if (!ctx) return kiln__errs(KILN_ERR_ARG, "kiln_ctx_set_backend: ctx is NULL");
    ctx->backend = kiln__is_device(b) ? b : NULL;
    return KILN_OK;
}

kiln_backend *kiln_ctx_backend(const kiln_ctx *ctx) {
    return ctx && ctx->backend ? ctx->backend : &cpu_backend;
}

/* ---- device memory owned by a context ---- */

static kiln_devbuf *devbuf_new(kiln_ctx *ctx, kiln_backend *b, size_t bytes) {
    if (kiln__owned_grow(ctx, (void **)&ctx->devbufs, &ctx->cap_devbufs, ctx->n_devbufs + 1, sizeof *ctx->devbufs))
        return NULL;
    kiln_devbuf *d = b->vt->alloc(b, bytes ? bytes : 4);
    if (d) ctx->devbufs[ctx->n_devbufs++] = (struct kiln_devalloc){b, d};
    return d;
}

void kiln__devbuf_free(kiln_ctx *ctx, kiln_devbuf *d) {
    for (int i = 0; d && i < ctx->n_devbufs; i++)
        if (ctx->devbufs[i].d == d) {
            ctx->devbufs[i].b->vt->free(ctx->devbufs[i].b, d);
            ctx->devbufs[i] = ctx->devbufs[--ctx->n_devbufs];
            return;
        }
}

kiln_devbuf *kiln__devbuf_new(kiln_ctx *ctx, kiln_backend *b, size_t bytes) { return devbuf_new(ctx, b, bytes); }

void kiln__ctx_free_device(kiln_ctx *ctx) {
    for (int i = 0; i < ctx->n_devbufs; i++) ctx->devbufs[i].b->vt->free(ctx->devbufs[i].b, ctx->devbufs[i].d);
    ctx->n_devbufs = 0;
}

/* ---- residency ---- */

static size_t dev_bytes(const kiln_tensor *o) { return (o->storage_bytes + 3) & ~(size_t)3; }

kiln_status kiln__host_read(const kiln_tensor *t) {
    kiln_tensor *o = kiln__owner((kiln_tensor *)t);
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
 * them. */
kiln_status kiln__tensor_zero(kiln_tensor *t) {
    kiln_tensor *o = kiln__owner(t);
    if (o->dev && !o->dev_backend->vt->zero(o->dev_backend, o->dev, 0, dev_bytes(o))) {
        o->where = KILN_AT_DEV;
        return KILN_OK;
    }
    memset(o->data, 0, o->storage_bytes);
    o->where = KILN_AT_HOST;
    return KILN_OK;
}
