/* cu_util.c — what the CUDA backend's kernel families share: dtype codes
 * and the broadcast walks handed to the kernels (cu_kernels.h). */
#include "cu.h"

#include "bcast.h"

int kiln__cu_dtype(kiln_dtype t) {
    switch (t) {
    case KILN_F32: return CU_F32;
    case KILN_F16: return CU_F16;
    case KILN_BF16: return CU_BF16;
    case KILN_I32: return CU_I32;
    case KILN_F64: return CU_F64;
    default: return -1;
    }
}

cu_walk kiln__cu_walk(const kiln_tensor *t, int nsrc) {
    kiln_bcast it;
    kiln_bcast_init(&it, t, nsrc, t->src);
    kiln_bcast_coalesce(&it);
    cu_walk w = {.nd = it.nd};
    for (int d = 0; d < it.nd; d++) {
        w.shape[d] = it.shape[d];
        for (int k = 0; k < nsrc; k++) w.st[k][d] = it.st[k][d];
    }
    return w;
}

cu_walk kiln__cu_walk_self(const kiln_tensor *t) {
    cu_walk w = {.nd = t->ndim > 0 ? t->ndim : 1, .shape = {1}};
    for (int d = 0; d < t->ndim; d++) {
        w.shape[d] = t->shape[d];
        w.st[0][d] = t->shape[d] == 1 ? 0 : t->stride[d];
    }
    return w;
}
