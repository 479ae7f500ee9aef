/* strided.h — walking a tensor with arbitrary strides in row-major order,
 * for the CPU copy kernels (contiguous, cast). The layout is first
 * simplified: size-1 dims dropped and dims that are contiguous with each
 * other merged, so a contiguous tensor becomes one row and a transposed
 * matrix two dims. */
#ifndef KILN_CPU_STRIDED_H
#define KILN_CPU_STRIDED_H

#include "internal.h"

typedef struct kiln_strided {
    int ndim; /* >= 1 after simplification */
    int64_t shape[KILN_MAX_DIMS];
    int64_t stride[KILN_MAX_DIMS];
} kiln_strided;

static inline kiln_strided kiln__strided_of(const kiln_tensor *t) {
    kiln_strided s = {0};
    for (int i = 0; i < t->ndim; i++) {
        if (t->shape[i] == 1) continue;
        if (s.ndim && s.stride[s.ndim - 1] == t->stride[i] * t->shape[i]) {
            s.shape[s.ndim - 1] *= t->shape[i];
            s.stride[s.ndim - 1] = t->stride[i];
        } else {
            s.shape[s.ndim] = t->shape[i];
            s.stride[s.ndim++] = t->stride[i];
        }
    }
    if (!s.ndim) s = (kiln_strided){1, {1}, {1}};
    return s;
}

/* Elements in one innermost row, and rows in all. */
static inline int64_t kiln__strided_row_len(const kiln_strided *s) { return s->shape[s->ndim - 1]; }
static inline int64_t kiln__strided_rows(const kiln_strided *s) {
    int64_t n = 1;
    for (int i = 0; i < s->ndim - 1; i++) n *= s->shape[i];
    return n;
}

/* Element offset of the first element of row r. */
static inline int64_t kiln__strided_row_offset(const kiln_strided *s, int64_t r) {
    int64_t off = 0;
    for (int d = s->ndim - 2; d >= 0; d--) {
        off += (r % s->shape[d]) * s->stride[d];
        r /= s->shape[d];
    }
    return off;
}

#endif
