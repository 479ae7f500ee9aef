/* cu_movement.c — the movement ops on the CUDA backend (see cu.h): CONCAT,
 * PAD, SLICE_SCATTER and SLICE_ASSIGN, semantics as backends/cpu/movement.c.
 * Copies move bits, so any 2-, 4- or 8-byte dtype runs; sources may be any
 * strided view. Each source is moved into place by one kernel whose walk
 * reads it through its strides and writes the output through the
 * output's (kiln__cu_move); pad fills the rest with its value's bits,
 * slice_scatter with zeros. */
#include "cu.h"

static bool es_ok(kiln_dtype t) {
    size_t es = kiln__types[t].size;
    return es == 2 || es == 4 || es == 8;
}

static bool no_negative_strides(const kiln_tensor *t) {
    for (int d = 0; d < t->ndim; d++)
        if (t->stride[d] < 0) return false;
    return true;
}

/* x's elements into y + dst_off (elements) at y's strides, but for axis
 * `axis` stepping `step` times y's stride there. */
static kiln_status place(kiln_cu *cu, const kiln_tensor *x, const kiln_tensor *y, int64_t dst_off, int axis,
                         int64_t step) {
    int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    cu_walk w = {.nd = x->ndim > 0 ? x->ndim : 1, .shape = {1}};
    for (int d = 0; d < x->ndim; d++) {
        w.shape[d] = x->shape[d];
        w.st[0][d] = x->shape[d] == 1 ? 0 : x->stride[d];
        w.st[1][d] = y->stride[d] * (d == axis ? step : 1);
    }
    size_t es = kiln__types[y->dtype].size;
    return kiln__cu_launched(kiln__cu_move(cu->stream, (int)es, kiln__cu_ptr(x), (char *)kiln__cu_ptr(y) + dst_off * (int64_t)es,
                                           n, &w),
                             "move kernel");
}

static bool movement_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    if (!es_ok(t->dtype) || !no_negative_strides(t)) return false;
    int first = t->op == KILN_OP_SLICE_ASSIGN ? 1 : 0; /* slice_assign's src[0] is the node's own storage */
    for (int i = first; i < t->nsrc; i++)
        if (t->src[i]->dtype != t->dtype || t->src[i]->ndim != t->ndim || !no_negative_strides(t->src[i])) return false;
    return true;
}

static kiln_status concat_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int a = (int)t->ip[0];
    int64_t off = 0;
    kiln_status s = KILN_OK;
    for (int p = 0; p < t->nsrc && !s; p++) {
        s = place(cu, t->src[p], t, off * t->stride[a], -1, 1);
        off += t->src[p]->shape[a];
    }
    return s;
}

static kiln_status pad_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    unsigned char pat[8] = {0};
    kiln__types[t->dtype].set(pat, 0, t->fp[0]);
    uint64_t bits = 0;
    size_t es = kiln__types[t->dtype].size;
    memcpy(&bits, pat, es); /* little-endian: the element's bytes are the low ones */
    kiln_status s = kiln__cu_launched(kiln__cu_fill(cu->stream, (int)es, kiln__cu_ptr(t), kiln_tensor_numel(t), bits), "fill kernel");
    int64_t off = 0;
    for (int d = 0; d < t->ndim; d++) off += t->ip[2 * d] * t->stride[d];
    return s ? s : place(cu, t->src[0], t, off, -1, 1);
}

static kiln_status slice_scatter_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int a = (int)t->ip[0];
    kiln_status s = kiln__cu_check(cudaMemsetAsync(kiln__cu_ptr(t), 0, kiln_tensor_nbytes(t), cu->stream), "zeroing");
    return s ? s : place(cu, t->src[0], t, t->ip[1] * t->stride[a], a, t->ip[2]);
}

static kiln_status slice_assign_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int a = (int)t->ip[0];
    return place(cu, t->src[1], t, t->ip[1] * t->stride[a], -1, 1);
}

void kiln__cu_register_movement(kiln_cu_kernel *tab) {
    tab[KILN_OP_CONCAT] = (kiln_cu_kernel){movement_supports, concat_record};
    tab[KILN_OP_PAD] = (kiln_cu_kernel){movement_supports, pad_record};
    tab[KILN_OP_SLICE_SCATTER] = (kiln_cu_kernel){movement_supports, slice_scatter_record};
    tab[KILN_OP_SLICE_ASSIGN] = (kiln_cu_kernel){movement_supports, slice_assign_record};
}
