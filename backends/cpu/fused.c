/* fused.c — element-wise chains run tile by tile. A chain is a run of
 * element-wise nodes where each feeds only the next (core/fuse.c chooses
 * them); running the whole chain on one cache-sized tile before the next
 * keeps the intermediates in L1, so only the chain's inputs are read from
 * memory and only its result is written. Each node's own kernel does the
 * work, called on tile-sized shadow tensors, so every SIMD path is reused.
 *
 * Operands other than the previous link are laid out so that a tile of the
 * output maps to a tile of them (kiln__fuse_operand: FULL, SCALAR, ROW or
 * CHAN). With a CHAN operand the tiles are runs of whole channel planes of
 * one sample, seen as [k, inner/c, c]: the CHAN operand is then a [k, 1, 1]
 * slice and a ROW operand still broadcasts over the last axis. A
 * batch_norm, [a residual add,] and its ReLU are the norm's kernel alone,
 * as are a ReLU's gradient mask and batch_norm_grad (nn_norm_chan.c). */
#include "backend.h"
#include "cpu.h"
#include "pool.h"
#include "scratch.h"

#define TILE 4096 /* elements: two f64 tiles per thread stay in a 48 KiB L1 */

/* How the output is cut: flat runs, whole rows of c, or runs of whole
 * channel planes (inner elements each) of one sample. */
typedef struct tiling {
    bool rows, chan;
    int64_t c, inner, planes, chunks; /* chan: channels per tile, tiles per sample */
} tiling;

/* The tile's shape: [len], [len/c, c] or [planes, inner/c, c]. */
static void tile_shape(kiln_tensor *sh, const tiling *tl, int64_t len) {
    if (tl->chan) {
        sh->ndim = 3;
        sh->shape[0] = len / tl->inner, sh->shape[1] = tl->inner / tl->c, sh->shape[2] = tl->c;
    } else {
        sh->ndim = tl->rows ? 2 : 1;
        sh->shape[0] = tl->rows ? len / tl->c : len;
        sh->shape[1] = tl->c;
    }
}

/* A shadow of s for the tile [e0, e0 + len) of the output. */
static void shadow_operand(kiln_tensor *sh, const kiln_tensor *s, const kiln_tensor *t, int64_t e0, int64_t len,
                           const tiling *tl, size_t es) {
    *sh = *s;
    switch (kiln__fuse_operand(s, t)) {
    case KILN_OPND_FULL:
        tile_shape(sh, tl, len);
        sh->data = (char *)s->data + (size_t)e0 * es;
        break;
    case KILN_OPND_SCALAR: sh->ndim = 1, sh->shape[0] = 1; break;
    case KILN_OPND_CHAN: /* the tile's channels, first = e0 / inner mod C */
        sh->ndim = 3, sh->shape[0] = len / tl->inner, sh->shape[1] = sh->shape[2] = 1;
        sh->data = (char *)s->data + (size_t)(e0 / tl->inner % t->shape[1]) * es;
        break;
    default: sh->ndim = 1, sh->shape[0] = tl->c; break; /* KILN_OPND_ROW */
    }
    kiln__set_contiguous_strides(sh);
}

/* The link of the chain before node i that node i reads as s, or -1: the
 * one before it, or, past a side link (core/fuse.c), the one before that. */
static int link_of(kiln_tensor *const *nodes, int i, const kiln_tensor *s) {
    for (int j = i - 1; j >= 0 && j >= i - 2; j--)
        if (nodes[j] == s) return j;
    return -1;
}

typedef struct chain_job {
    kiln_tensor *const *nodes;
    int n, nbuf; /* tiles per thread: 2, or 3 when a side link's result waits a node */
    kiln_exec one; /* the nodes' kernels run on one thread each */
    tiling tl;
    int64_t tile, total;
    size_t es;
    char *scratch; /* nbuf tiles per thread */
    kiln_status status; /* the first error */
} chain_job;

/* Tiles [t0, t1): the whole chain on each, through the thread's tiles. */
static void chain_tiles(void *arg, int64_t t0, int64_t t1, int tid) {
    chain_job *j = arg;
    kiln_tensor *const *nodes = j->nodes;
    const kiln_tensor *last = nodes[j->n - 1];
    const tiling *tl = &j->tl;
    const int64_t tile = j->tile, total = j->total;
    const size_t es = j->es;
    char *buf[3];
    for (int b = 0; b < j->nbuf; b++) buf[b] = j->scratch + (size_t)(j->nbuf * tid + b) * (size_t)tile * es;
    for (int64_t ti = t0; ti < t1 && !__atomic_load_n(&j->status, __ATOMIC_RELAXED); ti++) {
        int64_t e0 = ti * tile, len = total - e0 < tile ? total - e0 : tile;
        if (tl->chan) { /* sample ti / chunks, its channels from (ti % chunks) * planes */
            int64_t ch = last->shape[1], c0 = ti % tl->chunks * tl->planes,
                    kc = ch - c0 < tl->planes ? ch - c0 : tl->planes;
            e0 = (ti / tl->chunks * ch + c0) * tl->inner, len = kc * tl->inner;
        }
        kiln_tensor srcs[KILN_MAX_SRC], link_sh[3]; /* link i's tile shadow at [i % 3] */
        for (int i = 0; i < j->n; i++) {
            const kiln_tensor *t = nodes[i];
            kiln_tensor *sh = &link_sh[i % 3];
            *sh = *t;
            tile_shape(sh, tl, len);
            kiln__set_contiguous_strides(sh);
            sh->data = i == j->n - 1 ? (char *)t->data + (size_t)e0 * es : buf[i % j->nbuf];
            for (int k = 0; k < t->nsrc; k++) {
                int l = link_of(nodes, i, t->src[k]);
                if (l >= 0) {
                    sh->src[k] = &link_sh[l % 3]; /* the next links read only its data and layout */
                } else {
                    shadow_operand(&srcs[k], t->src[k], t, e0, len, tl, es);
                    sh->src[k] = &srcs[k];
                }
            }
            kiln_status s = kiln__cpu_compute(sh, &j->one);
            if (s) {
                kiln_status none = KILN_OK;
                __atomic_compare_exchange_n(&j->status, &none, s, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
                break;
            }
        }
    }
}

kiln_status kiln__cpu_compute_chain(kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    if (nodes[0]->op == KILN_OP_BATCH_NORM) return kiln__cpu_batch_norm_relu(nodes, n, ex);
    if (nodes[n - 1]->op == KILN_OP_BATCH_NORM_GRAD) return kiln__cpu_batch_norm_grad_relu(nodes, ex);
    const kiln_tensor *last = nodes[n - 1];
    int64_t total = kiln_tensor_numel(last), c = last->shape[last->ndim - 1];
    if (!total) return KILN_OK; /* an empty result: nothing to write (its links are empty too) */
    size_t es = kiln__types[last->dtype].size;
    tiling tl = {.c = c}; /* tiles of whole rows when some operand is a broadcast row */
    int nbuf = 2;
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nodes[i]->nsrc; k++) {
            int l = link_of(nodes, i, nodes[i]->src[k]);
            if (l == i - 2) nbuf = 3;
            if (l >= 0) continue;
            kiln_fuse_operand kind = kiln__fuse_operand(nodes[i]->src[k], nodes[i]);
            tl.rows |= kind == KILN_OPND_ROW, tl.chan |= kind == KILN_OPND_CHAN;
        }
    int64_t tile = tl.rows ? (c >= TILE ? c : TILE / c * c) : TILE, ntiles;
    if (tl.chan) { /* as many whole planes of one sample as fit a tile */
        int64_t ch = last->shape[1];
        tl.inner = total / last->shape[0] / ch;
        tl.planes = tl.inner >= TILE ? 1 : TILE / tl.inner < ch ? TILE / tl.inner : ch;
        tl.chunks = (ch + tl.planes - 1) / tl.planes;
        tile = tl.planes * tl.inner;
        ntiles = last->shape[0] * tl.chunks;
    } else {
        ntiles = (total + tile - 1) / tile;
    }
    int nt = ex->n_threads > 1 && total > 4 * TILE ? ex->n_threads : 1;
    chain_job j = {nodes, n, nbuf, *ex, tl, tile, total, es, NULL, KILN_OK};
    j.one.n_threads = 1;
    /* the calling thread's kept scratch: a malloc per chain per compute cost more than some chains */
    bool owned;
    size_t bytes = ((size_t)nt * (size_t)nbuf * (size_t)tile * es + 63) / 64 * 64;
    j.scratch = kiln__scratch_get(bytes, &owned);
    if (!j.scratch) return kiln__errs(KILN_ERR_OOM, "fused element-wise chain: out of memory for %d tiles", nbuf * nt);
    kiln__pool_for(ntiles, 1, nt, chain_tiles, &j);
    if (owned) free(j.scratch);
    return j.status;
}
