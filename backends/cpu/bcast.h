/* bcast.h — walking a contiguous output row by row while reading up to
 * three sources through their own strides, aligned at the last axis
 * (NumPy broadcasting: a stretched dim reads with stride 0). Used by the
 * element-wise and reduce kernels. */
#ifndef KILN_CPU_BCAST_H
#define KILN_CPU_BCAST_H

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
