/* bcast.h — walking a contiguous output row by row while reading up to
 * three sources through their own strides, aligned at the last axis
 * (NumPy broadcasting: a stretched dim reads with stride 0). Shared by
 * the backends: the CPU's element-wise and reduce kernels walk it, Vulkan
 * and CUDA hand the coalesced walk to their shaders. */
#ifndef KILN_BCAST_H
#define KILN_BCAST_H

#include "internal.h"

#define KILN_BCAST_MAX 3

typedef struct kiln_bcast {
    int nd, nsrc;
    int64_t shape[KILN_MAX_DIMS];
    int64_t st[KILN_BCAST_MAX][KILN_MAX_DIMS]; /* per source, aligned to the output */
    int64_t rows, cols;                        /* the output as rows of its last dim */
} kiln_bcast;

static inline void kiln_bcast_init(kiln_bcast *it, const kiln_tensor *out, int nsrc, kiln_tensor *const *src) {
    it->nd = out->ndim;
    it->nsrc = nsrc;
    memcpy(it->shape, out->shape, sizeof it->shape);
    for (int k = 0; k < nsrc; k++)
        for (int d = 0; d < out->ndim; d++) {
            int sd = src[k]->ndim - out->ndim + d;
            it->st[k][d] = sd >= 0 && src[k]->shape[sd] != 1 ? src[k]->stride[sd] : 0;
        }
    it->cols = out->shape[out->ndim - 1];
    it->rows = kiln__numel(out->ndim, out->shape) / it->cols;
}

/* Merge neighbouring dims that every source walks as one (its stride on the
 * outer dim is the inner stride times the inner size) and drop size-1 dims,
 * so a contiguous or scalar operand becomes one long row and [N,D] + [D]
 * stays two dims. Rows and cols follow the merged shape. */
static inline void kiln_bcast_coalesce(kiln_bcast *it) {
    int nd = 0;
    for (int d = 0; d < it->nd; d++) {
        if (it->shape[d] == 1) continue;
        bool merge = nd > 0;
        for (int k = 0; k < it->nsrc && merge; k++) merge = it->st[k][nd - 1] == it->st[k][d] * it->shape[d];
        if (merge) {
            it->shape[nd - 1] *= it->shape[d];
            for (int k = 0; k < it->nsrc; k++) it->st[k][nd - 1] = it->st[k][d];
            continue;
        }
        it->shape[nd] = it->shape[d];
        for (int k = 0; k < it->nsrc; k++) it->st[k][nd] = it->st[k][d];
        nd++;
    }
    if (nd == 0) {
        it->shape[0] = 1;
        for (int k = 0; k < it->nsrc; k++) it->st[k][0] = 0;
        nd = 1;
    }
    it->nd = nd;
    it->cols = it->shape[nd - 1];
    it->rows = it->cols ? kiln__numel(nd, it->shape) / it->cols : 0;
}

/* Element offsets of row r's first element in each source. */
static inline void kiln_bcast_row(const kiln_bcast *it, int64_t r, int64_t *off) {
    for (int k = 0; k < it->nsrc; k++) off[k] = 0;
    for (int d = it->nd - 2; d >= 0; d--) {
        int64_t i = r % it->shape[d];
        r /= it->shape[d];
        for (int k = 0; k < it->nsrc; k++) off[k] += i * it->st[k][d];
    }
}

#endif
