/* fused.c — element-wise chains run tile by tile. A chain is a run of
 * element-wise nodes where each feeds only the next (core/fuse.c finds
 * them); running the whole chain on one cache-sized tile before the next
 * keeps the intermediates in L1, so only the chain's inputs are read from
 * memory and only its result is written. Each node's own kernel does the
 * work, called on tile-sized shadow tensors, so every SIMD path is reused.
 *
 * Operands other than the previous link must be laid out so a tile of the
 * output maps to a tile of them: the same shape and contiguous (FULL), one
 * element (SCALAR), or one row broadcast over every row (ROW, e.g. a bias). */
#include "internal.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define TILE 4096 /* elements: two f64 tiles per thread stay in a 48 KiB L1 */

typedef enum { OPND_BAD, OPND_FULL, OPND_SCALAR, OPND_ROW } opnd_kind;

static opnd_kind operand_kind(const kiln_tensor *s, const kiln_tensor *t) {
    if (s->dtype != t->dtype || !kiln_tensor_is_contiguous(s)) return OPND_BAD;
    int64_t n = kiln_tensor_numel(s), c = t->shape[t->ndim - 1];
    if (kiln__same_shape(s, t)) return OPND_FULL;
    if (n == 1) return OPND_SCALAR;
    if (n == c && s->shape[s->ndim - 1] == c && s->ndim <= t->ndim) return OPND_ROW;
    return OPND_BAD;
}

static bool elementwise(const kiln_tensor *t) {
    return ((t->op >= KILN_OP_NEG && t->op <= KILN_OP_GELU_TANH_GRAD) || (t->op >= KILN_OP_ADD && t->op <= KILN_OP_CMP)) &&
           kiln__is_compute_float(t->dtype);
}

bool kiln__cpu_chain_link(const kiln_tensor *prev, const kiln_tensor *t) {
    if (!elementwise(t)) return false;
    bool linked = false;
    for (int k = 0; k < t->nsrc; k++) {
        if (t->src[k] == prev) linked = kiln__same_shape(prev, t);
        else if (operand_kind(t->src[k], t) == OPND_BAD) return false;
    }
    return linked && elementwise(prev);
}

bool kiln__cpu_chain_head(const kiln_tensor *t) {
    if (!elementwise(t)) return false;
    for (int k = 0; k < t->nsrc; k++)
        if (operand_kind(t->src[k], t) == OPND_BAD) return false;
    return true;
}

/* A shadow of s for the tile [e0, e0 + len) of an output laid out as rows
 * of c (rows mode) or flat. */
static void shadow_operand(kiln_tensor *sh, const kiln_tensor *s, const kiln_tensor *t, int64_t e0, int64_t len,
                           bool rows, int64_t c, size_t es) {
    *sh = *s;
    switch (operand_kind(s, t)) {
    case OPND_FULL:
        sh->ndim = rows ? 2 : 1;
        sh->shape[0] = rows ? len / c : len;
        sh->shape[1] = c;
        sh->data = (char *)s->data + (size_t)e0 * es;
        break;
    case OPND_SCALAR: sh->ndim = 1, sh->shape[0] = 1; break;
    default: sh->ndim = 1, sh->shape[0] = c; break; /* OPND_ROW */
    }
    kiln__set_contiguous_strides(sh);
}

kiln_status kiln__cpu_compute_chain(kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    const kiln_tensor *last = nodes[n - 1];
    int64_t total = kiln_tensor_numel(last), c = last->shape[last->ndim - 1];
    size_t es = kiln__types[last->dtype].size;
    bool rows = false; /* tiles of whole rows when some operand is a broadcast row */
    for (int i = 0; i < n; i++)
        for (int k = 0; k < nodes[i]->nsrc; k++)
            if ((i == 0 || nodes[i]->src[k] != nodes[i - 1]) && operand_kind(nodes[i]->src[k], nodes[i]) == OPND_ROW)
                rows = true;
    int64_t tile = rows ? (c >= TILE ? c : TILE / c * c) : TILE;
    int64_t ntiles = (total + tile - 1) / tile;
    int nt = ex->n_threads > 1 && total > 4 * TILE ? ex->n_threads : 1;
    kiln_exec one = *ex;
    one.n_threads = 1;
    char *scratch = kiln__malloc((size_t)nt * 2 * (size_t)tile * es);
    if (!scratch) return kiln__errs(KILN_ERR_OOM, "fused element-wise chain: out of memory for %d tiles", 2 * nt);
    kiln_status status = KILN_OK;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int64_t ti = 0; ti < ntiles; ti++) {
        if (status) continue;
        int64_t e0 = ti * tile, len = total - e0 < tile ? total - e0 : tile;
        int me = 0;
#ifdef _OPENMP
        me = omp_get_thread_num();
#endif
        char *buf[2] = {scratch + (size_t)(2 * me) * (size_t)tile * es, scratch + (size_t)(2 * me + 1) * (size_t)tile * es};
        kiln_tensor sh, srcs[KILN_MAX_SRC], prev_sh;
        for (int i = 0; i < n; i++) {
            const kiln_tensor *t = nodes[i];
            sh = *t;
            sh.ndim = rows ? 2 : 1;
            sh.shape[0] = rows ? len / c : len;
            sh.shape[1] = c;
            kiln__set_contiguous_strides(&sh);
            sh.data = i == n - 1 ? (char *)t->data + (size_t)e0 * es : buf[i & 1];
            for (int k = 0; k < t->nsrc; k++) {
                if (i > 0 && t->src[k] == nodes[i - 1]) {
                    sh.src[k] = &prev_sh;
                } else {
                    shadow_operand(&srcs[k], t->src[k], t, e0, len, rows, c, es);
                    sh.src[k] = &srcs[k];
                }
            }
            kiln_status s = kiln__cpu_compute(&sh, &one);
            if (s) {
#pragma omp critical(kiln_chain_status)
                if (!status) status = s;
                break;
            }
            prev_sh = sh; /* the next link reads only its data and layout */
        }
    }
    free(scratch);
    return status;
}
