/* backend.h — the backend vtable and host/device residency; not installed.
 *
 * A device backend (Vulkan, CUDA) implements this table. The graph
 * executor (core/graph.c) asks `supports` for every node, records the
 * claimed ones with `compute` and runs the rest on the CPU kernels,
 * copying bytes across with `upload`/`download` as needed; `flush`
 * submits what was recorded and waits for it.
 *
 * Residency: a tensor that owns storage (leaf, graph output) always has its
 * host storage; a device backend adds a copy (t->dev) on first use, and
 * t->where says which copies hold the current bytes. Host readers call
 * kiln__host_read(t) first, host writers kiln__host_write(t). Graph
 * intermediates live in the graph's planned buffer, which a device graph
 * holds on the device (and on the host only when a node falls back).
 *
 * Kernels find their operands' device bytes in node->dbuf / node->doff
 * (and the same on each src), set for every node before `compute`, just as
 * node->data is for the CPU kernels. Strides and dtype are the tensor's.
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "internal.h"

enum { KILN_AT_HOST = 1, KILN_AT_DEV = 2 };

typedef struct kiln_devbuf kiln_devbuf; /* defined by each backend */

typedef struct kiln_backend_vt {
    /* Does this backend run node (op, dtypes, sizes)? Unclaimed nodes run on the CPU. */
    bool (*supports)(kiln_backend *b, const kiln_tensor *node);
    /* Device memory of at least bytes, zero-filled; NULL with the error set. */
    kiln_devbuf *(*alloc)(kiln_backend *b, size_t bytes);
    void (*free)(kiln_backend *b, kiln_devbuf *d);
    /* Copies; they wait for recorded work first. */
    kiln_status (*upload)(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n);
    kiln_status (*download)(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n);
    /* Set n bytes (a multiple of 4) to zero, in order with recorded work. */
    kiln_status (*zero)(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n);
    /* Record node (its operands' dbuf/doff are set). */
    kiln_status (*compute)(kiln_backend *b, kiln_tensor *node, const kiln_exec *ex);
    /* Submit what was recorded and wait until it is done. */
    kiln_status (*flush)(kiln_backend *b);
} kiln_backend_vt;

struct kiln_backend {
    const char *name;
    const kiln_backend_vt *vt; /* NULL for the CPU */
    void *impl;
    char device[320];
    int64_t validation_messages;
};

/* The CPU backend (never NULL). */
kiln_backend *kiln__backend_cpu(void);
static inline bool kiln__is_device(const kiln_backend *b) { return b && b->vt; }

/* Each device backend's constructor: NULL with the error set when it was
 * not built in or finds no device (backends/vulkan, backends/cuda). */
kiln_backend *kiln__vulkan_backend_new(void);
kiln_backend *kiln__cuda_backend_new(void);

/* The tensor owning t's storage. */
static inline kiln_tensor *kiln__owner(kiln_tensor *t) { return t->view_src ? t->view_src : t; }

/* Make t's host bytes current (downloading if the device has newer ones). */
kiln_status kiln__host_read(const kiln_tensor *t);
/* The same, then mark the device copy stale: the host is about to write. */
kiln_status kiln__host_write(const kiln_tensor *t);
/* Make owner o's device copy on b current (allocating it, uploading if the
 * host has newer bytes); counts into *st when not NULL. */
kiln_status kiln__dev_read(kiln_backend *b, kiln_tensor *o, kiln_graph_stats *st);
/* Device memory held for ctx (freed with it, or early by kiln__devbuf_free). */
kiln_devbuf *kiln__devbuf_new(kiln_ctx *ctx, kiln_backend *b, size_t bytes);
void kiln__devbuf_free(kiln_ctx *ctx, kiln_devbuf *d);
/* Give owner o a device copy on b (contents not made current) and point
 * o->dbuf at it. */
kiln_status kiln__dev_alloc(kiln_backend *b, kiln_tensor *o);
/* Zero a tensor that owns storage (gradients), wherever it lives. */
kiln_status kiln__tensor_zero(kiln_tensor *t);
/* Free every device copy held by ctx's tensors (kiln_ctx_free). */
void kiln__ctx_free_device(kiln_ctx *ctx);

#endif
