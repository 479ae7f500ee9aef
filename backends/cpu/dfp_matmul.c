/* dfp_matmul.c — KILN_OP_DFP_MATMUL on the CPU (ops/dfp.c): quantize each
 * f32 operand to 14-bit codes with one exponent (quant/dfp.h), in its own
 * layout, and multiply (backends/cpu/gemm_dfp.h, whose packers read A as
 * [m, k] or [k, m] and B as [n, k] or [k, n]); an operand's codes are
 * reused by the other products of the same compute that read it. A
 * convolution's product (ip[2] = 1) quantizes its image x instead of the
 * columns and hands the codes to kiln__gemm_dfp_conv_t, whose packer
 * gathers the columns from them; a convolution's data gradient (ip[2] = 2,
 * ops/dfp.c) reads the output gradient's codes the same way, its taps
 * running back. A product the graph adds into a gradient (ex->accumulate,
 * core/fuse.c) adds C into node->data. */
#include "gemm_dfp.h"

#include "coders.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define DFP_BITS 14
#define SLACK 16

/* Each operand quantized once per compute. A DFP layer's three products
 * share their operands as graph nodes: the forward quantizes x and W, the
 * backward-data product needs W and the incoming gradient G, the
 * backward-weight product G and x (for a convolution, the image whose
 * columns the packer gathers) again. The codes of every operand are kept until the compute ends and
 * reused, keyed by the node, its data and the compute's serial (unique
 * process-wide, so a weight shared by two graphs and updated between their
 * computes is quantized anew). Quantizing is deterministic, so a reused
 * code is the one a second quantization would give: results are the same
 * bit for bit. Per thread: a graph runs its kernels one after another on
 * the thread that computes it, so no entry is freed while a kernel reads
 * it; the codes of the latest compute stay until the thread's next one.
 * A node's value is fixed once computed: kiln's graphs never rewrite an
 * operand in place between two of its readers (the f32 backward products
 * would read the rewrite too), so codes made from it stay its codes. */
typedef struct qentry {
    const kiln_tensor *node;
    const void *data;
    int64_t n, cap; /* values quantized; int16 room of q */
    int16_t *q;
    int e, qmax;
} qentry;
/* Entries [0, n) hold this compute's operands; every one up to cap keeps
 * its buffer for the next compute, whose i-th operand usually has the
 * i-th size again (a graph runs its nodes in one order): no allocation,
 * no page faults in a training loop's steady state. On the heap, owned by
 * a pthread key whose destructor frees it when the thread exits (OpenMP
 * or application threads that computed graphs would leak it otherwise). */
typedef struct code_cache {
    uint64_t serial;
    qentry *e;
    int n, cap;
} code_cache;

static _Thread_local code_cache *cache;
static pthread_key_t cache_key;
static pthread_once_t cache_once = PTHREAD_ONCE_INIT;
static bool cache_key_ok;

static void cache_free(void *p) {
    code_cache *c = p;
    for (int i = 0; i < c->cap; i++) free(c->e[i].q);
    free(c->e);
    free(c);
}

static void cache_key_make(void) { cache_key_ok = pthread_key_create(&cache_key, cache_free) == 0; }

/* This thread's cache, made on first use; NULL without memory (every
 * operand is then quantized into a buffer of its own). */
static code_cache *cache_get(void) {
    if (cache) return cache;
    pthread_once(&cache_once, cache_key_make);
    code_cache *c = cache_key_ok ? kiln__calloc(1, sizeof *c) : NULL;
    if (!c) return NULL;
    if (pthread_setspecific(cache_key, c) != 0) {
        free(c);
        return NULL;
    }
    return cache = c;
}

/* The cached codes of (src, n) in this compute, or NULL. */
static const qentry *lookup(const code_cache *c, const kiln_tensor *src, int64_t n, uint64_t serial) {
    if (!c || !serial || serial != c->serial) return NULL;
    for (int i = 0; i < c->n; i++)
        if (c->e[i].node == src && c->e[i].data == src->data && c->e[i].n == n) return &c->e[i];
    return NULL;
}

/* Room for n codes and SLACK more (the columns' packer gathers 4 bytes per
 * code, gemm_dfp.h): the next cache entry's buffer (*slot set; the caller
 * fills it and calls commit), or, with serial 0 or no memory for an entry,
 * a buffer of its own (*owned, which the caller frees). */
static int16_t *room(code_cache *c, int64_t n, uint64_t serial, qentry **slot, int16_t **owned) {
    *slot = NULL, *owned = NULL;
    if (c && serial) {
        if (serial != c->serial) c->serial = serial, c->n = 0;
        if (c->n == c->cap) {
            int cap = c->cap ? 2 * c->cap : 16;
            qentry *grown = kiln__realloc(c->e, (size_t)cap * sizeof *grown);
            if (grown) {
                memset(grown + c->cap, 0, (size_t)(cap - c->cap) * sizeof *grown);
                c->e = grown, c->cap = cap;
            }
        }
        if (c->n < c->cap) {
            qentry *s = &c->e[c->n];
            if (s->cap < n) {
                int16_t *grown = kiln__realloc(s->q, (size_t)(n + SLACK) * 2);
                if (grown) s->q = grown, s->cap = n;
            }
            if (s->cap >= n) {
                *slot = s;
                return s->q;
            }
        }
    }
    return *owned = kiln__malloc((size_t)(n + SLACK) * 2);
}

static void commit(code_cache *c, qentry *slot, const kiln_tensor *src, int64_t n, int e, int qmax) {
    if (!slot) return;
    slot->node = src, slot->data = src->data, slot->n = n, slot->e = e, slot->qmax = qmax;
    c->n++;
}

/* The codes of src (n values), from the cache or quantized into it; a
 * buffer of their own in *owned when not cached (the caller frees it). */
static kiln_status operand(const kiln_tensor *src, int64_t n, uint64_t serial, const int16_t **q, int *e, int *qmax,
                           int16_t **owned) {
    code_cache *c = cache_get();
    const qentry *hit = lookup(c, src, n, serial);
    *owned = NULL;
    if (hit) {
        *q = hit->q, *e = hit->e, *qmax = hit->qmax;
        return KILN_OK;
    }
    qentry *slot;
    int16_t *codes = room(c, n, serial, &slot, owned);
    if (!codes) return kiln__errs(KILN_ERR_OOM, "dfp_matmul: out of memory quantizing an operand");
    kiln__dfp_quantize(src->data, n, DFP_BITS, codes, e, qmax, false, 0);
    *q = codes;
    commit(c, slot, src, n, *e, *qmax);
    return KILN_OK;
}

static kiln_status dfp_matmul_kernel(kiln_tensor *node, const kiln_exec *ex) {
    const kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1], im = node->ip[2] == 1, tc = node->ip[2] == 2;
    int64_t m = node->shape[0], n = node->shape[1], k = a->shape[ta ? 0 : 1];
    if (!k) { /* K = 0: zeros, or nothing to add */
        if (!ex->accumulate) memset(node->data, 0, kiln_tensor_nbytes(node));
        return KILN_OK;
    }
    const int16_t *qa = NULL, *qb = NULL;
    int ea, eb, ma, mb;
    int16_t *own_a, *own_b = NULL;
    /* A stored [m, k], or [k, m] when transposed; B stored [k, n], or [n, k]
     * when transposed (as columns too: [C kh kw, N OH OW]): the GEMM's
     * packers read either layout */
    kiln_status s = operand(a, m * k, ex->serial, &qa, &ea, &ma, &own_a);
    if (s == KILN_OK) s = operand(b, im || tc ? kiln_tensor_numel(b) : n * k, ex->serial, &qb, &eb, &mb, &own_b);
    if (s == KILN_OK && im) { /* B: the columns of the image b, gathered by the GEMM's packer */
        const int64_t *g = node->ip + 3;
        kiln_dfp_image img = {qb, b->shape[0], b->shape[1], b->shape[2], b->shape[3], g[8], g[9],
                              {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}, 0, 0, false};
        s = kiln__gemm_dfp_conv_t(ta, tb, m, n, k, qa, ta ? m : k, ma, ea, &img, mb, eb, node->data, n,
                                  ex->n_threads);
    } else if (s == KILN_OK && tc) { /* a convolution's data gradient: B the columns of the output gradient b
                                       * [O, N OH OW] with taps running back (ops/dfp.c) */
        const int64_t *g = node->ip + 3;
        kiln_dfp_image img = {qb,   node->ip[13], b->shape[0], node->ip[14], node->ip[15], node->ip[11], node->ip[12],
                              {g[0], g[1], g[2], g[3], g[4], g[5], g[6], g[7]}, b->shape[1], node->ip[14] * node->ip[15],
                              true};
        s = kiln__gemm_dfp_conv_t(false, false, m, n, k, qa, k, ma, ea, &img, mb, eb, node->data, n, ex->n_threads);
    } else if (s == KILN_OK)
        s = (ex->accumulate ? kiln__gemm_dfp_add_t : kiln__gemm_dfp_t)(ta, !tb, m, n, k, qa, ta ? m : k, ma, ea, qb,
                                                                      tb ? k : n, mb, eb, node->data, n, ex->n_threads);
    free(own_a), free(own_b);
    return s;
}

void kiln__cpu_register_dfp(kiln_cpu_kernel *tab) { tab[KILN_OP_DFP_MATMUL] = dfp_matmul_kernel; }
