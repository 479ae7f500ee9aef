/* backend.h — backends, the one graph executor, and host/device
 * residency; not installed.
 *
 * Backends. The CPU, Vulkan and CUDA each implement the vtable below and
 * register with core from a constructor in their own files
 * (kiln__backend_register), so core names none of them: kiln_backend_get
 * looks a name up in the table and starts that backend on first use. One
 * backend works on host memory, the CPU (the host backend): it runs every
 * graph that has no backend of its own and every node another backend
 * leaves. Its vtable has no memory functions; a device backend's has them.
 *
 *     static kiln_backend *open_mine(void);     // NULL with the error set: no device
 *     __attribute__((constructor)) static void register_mine(void) {
 *         kiln__backend_register("mine", open_mine, false);
 *     }
 *
 * The executor (core/graph_exec.c) runs a planned graph on its backend b:
 * node by node in order, each on b when b `supports` it, else on the host
 * backend (the fallback), always through the vtable. Operands cross
 * between host and device memory only when the side that runs a node lacks
 * their current bytes (core/graph_device.c); a graph whose backend is the
 * host copies nothing and keeps no residency books. A device backend
 * records with `compute` and runs what it recorded at `flush`; one with
 * the record_* entries also keeps a graph's recording to run it again
 * as one launch (core/graph_replay.c).
 *
 * The rewrite (core/fuse.c), decided at plan time from op facts and
 * invisible in the results, has four fused forms; a backend runs those it
 * sets in vt->fuses (the CPU all four, Vulkan and CUDA CHAIN and ACC), and
 * the host backend must run all four:
 *  - KILN_FUSE_CHAIN: consecutive element-wise nodes, each read only by
 *    the next and on operands that tile with the output (kiln__fuse_operand),
 *    run by `compute_chain` as one pass that writes only the last node;
 *  - KILN_FUSE_SIDE: a chain may also hold a side link, a node that does not
 *    read the link before it, both read (only) by the node after it;
 *  - KILN_FUSE_ACC: a product (MATMUL, DFP_MATMUL on a plain B, or
 *    CONV2D_GRAD_W through its reshape) read only by the ACC_GRAD that adds
 *    it into a gradient is computed with ex->accumulate into the gradient
 *    itself; the ACC_GRAD never runs;
 *  - KILN_FUSE_NORM_RELU: a training batch_norm read only by the ReLU after
 *    it (or by an add of a residual of its shape that only that ReLU
 *    reads), run by `compute_chain` as the norm's kernel adding and
 *    clamping as it writes the ReLU's output (the norm's own output and the
 *    add's are never stored); and the ReLU's gradient mask (cmp), its mul
 *    and the batch_norm_grad that alone reads the product, run as the
 *    norm's gradient masking gy as it reads it.
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
 * node->data is for the host backend's kernels. Strides and dtype are the
 * tensor's.
 */
#ifndef KILN_BACKEND_H
#define KILN_BACKEND_H

#include "internal.h"

#include <stdio.h>

enum { KILN_AT_HOST = 1, KILN_AT_DEV = 2 };

typedef struct kiln_devbuf kiln_devbuf; /* defined by each backend */
typedef struct kiln_record kiln_record; /* a recorded graph (vt->record_end), defined by each backend */

/* The fused forms a backend runs (vt->fuses; see above). */
enum { KILN_FUSE_CHAIN = 1, KILN_FUSE_ACC = 2, KILN_FUSE_NORM_RELU = 4, KILN_FUSE_SIDE = 8 };

typedef struct kiln_backend_vt {
    /* Does this backend run node (op, dtypes, sizes)? The rest run on the host backend. */
    bool (*supports)(kiln_backend *b, const kiln_tensor *node);
    /* Device memory (NULL, all five, on the host backend): at least bytes,
     * zero-filled; NULL with the error set. */
    kiln_devbuf *(*alloc)(kiln_backend *b, size_t bytes);
    void (*free)(kiln_backend *b, kiln_devbuf *d);
    /* Copies; they wait for recorded work first. */
    kiln_status (*upload)(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n);
    kiln_status (*download)(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n);
    /* Set n bytes (a multiple of 4) to zero, in order with recorded work. */
    kiln_status (*zero)(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n);
    /* Run (host) or record (device) node; its operands' data or dbuf/doff are set. */
    kiln_status (*compute)(kiln_backend *b, kiln_tensor *node, const kiln_exec *ex);
    /* Submit what was recorded and wait until it is done (NULL: nothing is deferred). */
    kiln_status (*flush)(kiln_backend *b);
    /* KILN_FUSE_* bits: the fused forms this backend runs. */
    unsigned fuses;
    /* KILN_FUSE_CHAIN: nodes[0..n) as one pass; only nodes[n - 1] is
     * written, the others' storage is not real. */
    kiln_status (*compute_chain)(kiln_backend *b, kiln_tensor *const *nodes, int n, const kiln_exec *ex);
    /* Can the backend be used as configured? KILN_OK, or an error naming
     * who (the host backend's, at kiln_ctx_new: the CPU checks $KILN_SIMD).
     * NULL: always. */
    kiln_status (*ready)(kiln_backend *b, const char *who);
    /* What kiln_backend_device says (NULL: b->device). */
    const char *(*describe)(const kiln_backend *b);
    /* Graph replay (core/graph_replay.c; NULL, all six: none). Between
     * record_begin and record_end, what compute and compute_chain queue is
     * recorded, not run; record_end returns the recording, or NULL with the
     * error set when it could not be made (then nothing of it ran, and the
     * backend records and runs as before). replay queues a recording to run
     * once more (flush waits for it); record_free drops one no longer run.
     * recordable: may node's kernels be recorded once and run again as
     * recorded (false: recording them would read or wait on the host)? */
    kiln_status (*record_begin)(kiln_backend *b);
    kiln_record *(*record_end)(kiln_backend *b);
    kiln_status (*replay)(kiln_backend *b, kiln_record *r);
    void (*record_free)(kiln_backend *b, kiln_record *r);
    bool (*recordable)(kiln_backend *b, const kiln_tensor *node);
    /* What a recording binding d baked in, never the same for other memory
     * while d lives nor for memory made after it is freed (CUDA: its device
     * address; Vulkan: a serial number, since a new VkBuffer is another
     * binding even at a freed one's address). */
    uint64_t (*buffer_id)(const kiln_devbuf *d);
    /* A compute of a graph with a training dropout starts (before its
     * uploads and kernels): write run, the graph's run number, where the
     * dropout kernels read it, in device memory, so that a recording reads
     * each run's anew (NULL: none; a backend that records has it if it
     * runs dropout). */
    kiln_status (*set_run)(kiln_backend *b, uint64_t run);
    /* A compute of a graph holding kiln_attention_cached ended (flushed):
     * the CPU's error for a row outside the cache that its kernels met
     * since the last call, which they note in a device word of the
     * backend's (the word is cleared), else KILN_OK (NULL: none noted). */
    kiln_status (*rows_error)(kiln_backend *b);
} kiln_backend_vt;

struct kiln_backend {
    const char *name;
    const kiln_backend_vt *vt;
    void *impl;
    char device[320];
    int64_t validation_messages;
};

/* $KILN_PROFILE=1 (core/profile.c): kernel time per op and backend, a
 * table per backend on stderr at exit. The executor times the host's
 * kernels itself; a device backend times its own on the device (in
 * `compute` and `compute_chain`), for the steps whose ex->profile is set,
 * and adds each step's time to row ex->profile - 1 (an op, or
 * KILN_OP_COUNT for fused chains) once it has run, with 1 call (0 for a
 * later piece of the same step). */
bool kiln__profiling(void);
void kiln__profile_add(const kiln_backend *b, int row, double sec, long calls);
/* The totals so far (tests), and the tables as printed at exit. */
void kiln__profile_get(const kiln_backend *b, int row, double *sec, long *calls);
void kiln__profile_print(FILE *f);

/* Put a backend in core's table (from a constructor, before main): open
 * starts it, on the first kiln_backend_get(name), and returns it or NULL
 * with the error set (kiln_backend_get then gives that answer every time).
 * host: the host backend (one, the CPU). At most 8 backends. */
void kiln__backend_register(const char *name, kiln_backend *(*open)(void), bool host);
/* The host backend, or NULL with the error set when none registered. */
kiln_backend *kiln__backend_host(void);
/* Does b keep its own memory (a device backend)? */
static inline bool kiln__is_device(const kiln_backend *b) { return b && b->vt->alloc; }

/* How an operand s of element-wise node t, other than the chain's previous
 * node, maps onto a tile of t's output (core/fuse.c), for the chain
 * kernels: the same shape, contiguous (FULL); one element (SCALAR); one
 * row broadcast over every row (ROW, e.g. a bias); one value per index of
 * axis 1 of a tensor of 3 or more dims (CHAN, a convolution's bias
 * [1, C, 1, 1]); else BAD (no chain). Every one is contiguous and of t's
 * dtype. */
typedef enum kiln_fuse_operand {
    KILN_OPND_BAD,
    KILN_OPND_FULL,
    KILN_OPND_SCALAR,
    KILN_OPND_ROW,
    KILN_OPND_CHAN
} kiln_fuse_operand;
kiln_fuse_operand kiln__fuse_operand(const kiln_tensor *s, const kiln_tensor *t);

/* A chain (or a piece of it) as a program for the device backends' chain
 * kernels (core/chain_prog.c): inputs, each read once per output element i
 * at the index its kind gives (FULL i, SCALAR 0, ROW i % c, CHAN
 * i / inner % chans), and steps run in order, each an element-wise op
 * (fp[0] as p, CMP's comparison) on refs: 0 the previous step's value,
 * 1 + k input k. Each step's value is rounded to the chain's dtype, as
 * a stored node's would be, so a chain gives its nodes' values bit for bit. */
#define KILN_CHAIN_MAX_IN 8
#define KILN_CHAIN_MAX_STEPS 32
typedef struct kiln_chain_input {
    const kiln_tensor *t;
    kiln_fuse_operand kind;
} kiln_chain_input;
typedef struct kiln_chain_step {
    kiln_op op;
    int cmp;
    int a, b; /* b: -1 for a unary op */
    double p;
} kiln_chain_step;
typedef struct kiln_chain_prog {
    int n_in, n_steps;
    kiln_chain_input in[KILN_CHAIN_MAX_IN];
    kiln_chain_step step[KILN_CHAIN_MAX_STEPS];
    int64_t n, c, inner, chans; /* the output's elements; ROW's and CHAN's periods */
} kiln_chain_prog;
/* The program of nodes[at..] (of a chain of n), as many as fit max_in
 * inputs (at least 3) and max_steps steps; prev: the tensor holding
 * nodes[at - 1]'s values when at > 0. Returns the index after the last
 * node taken (n: the rest of the chain). */
int kiln__chain_compile(kiln_tensor *const *nodes, int n, int at, const kiln_tensor *prev, int max_in, int max_steps,
                        kiln_chain_prog *p);

/* Many-row quantized products on a device (cu_qgemm.c, vk_quant.c): W
 * [n, k] of block dtype t dequantized to elements of elem_bytes a tile of
 * rows at a time, at most 64 MiB (or $KILN_QGEMM_TILE_BYTES) but at
 * least the fewest rows that end on a block. The rows a tile takes. */
int64_t kiln__qgemm_tile_rows(kiln_dtype t, int64_t n, int64_t k, int64_t elem_bytes);

/* The tensor owning t's storage. */
static inline kiln_tensor *kiln__owner(kiln_tensor *t) { return t->view_src ? t->view_src : t; }

/* Write the zeros an owner's KILN_FLAG_ZEROS defers into its host bytes. */
void kiln__zeros_settle(kiln_tensor *t);
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
/* A recording held for ctx (freed with it, or early by kiln__record_free). */
kiln_status kiln__record_keep(kiln_ctx *ctx, kiln_backend *b, kiln_record *r);
void kiln__record_free(kiln_ctx *ctx, kiln_record *r);
/* Give owner o a device copy on b (contents not made current) and point
 * o->dbuf at it. */
kiln_status kiln__dev_alloc(kiln_backend *b, kiln_tensor *o);
/* Zero a tensor that owns storage (gradients), wherever it lives; on the
 * host only when first read or written (KILN_FLAG_ZEROS). */
kiln_status kiln__tensor_zero(kiln_tensor *t);
/* Free every device copy and recording held by ctx (kiln_ctx_free). */
void kiln__ctx_free_device(kiln_ctx *ctx);

#endif
