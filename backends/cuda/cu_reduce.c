/* cu_reduce.c — SUM, MAX, MIN and ARGMAX on the CUDA backend (see cu.h):
 * f32, f64, f16 or bf16 input of any strides, over one axis (ip[0]) or, for
 * SUM/MAX/MIN, every element (ip[0] = -1). One thread walks each output's
 * axis in order (SUM in double, rounded once: the CPU's widened path; a
 * NaN wins MAX/MIN; ARGMAX takes the first largest or the first NaN); a
 * whole reduction is one block's tree. */
#include "cu.h"

static bool reduce_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    bool fl = x->dtype == KILN_F32 || x->dtype == KILN_F16 || x->dtype == KILN_BF16 || x->dtype == KILN_F64;
    if (!fl || t->dtype != (t->op == KILN_OP_ARGMAX ? KILN_I32 : x->dtype)) return false;
    if (axis < -1 || axis >= x->ndim || (axis < 0 && t->op == KILN_OP_ARGMAX)) return false;
    return axis < 0 || kiln_tensor_numel(t) == kiln_tensor_numel(x) / x->shape[axis];
}

static kiln_status reduce_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    int axis = (int)t->ip[0];
    int op = t->op == KILN_OP_SUM ? CU_RED_SUM : t->op == KILN_OP_MAX ? CU_RED_MAX : t->op == KILN_OP_MIN ? CU_RED_MIN : CU_RED_ARGMAX;
    int xt = kiln__cu_dtype(x->dtype), yt = kiln__cu_dtype(t->dtype);
    if (axis < 0) {
        cu_walk w = kiln__cu_walk_self(x);
        return kiln__cu_launched(kiln__cu_reduce_all(cu->stream, op, xt, kiln__cu_ptr(x), yt, kiln__cu_ptr(t),
                                                     kiln_tensor_numel(x), &w),
                                 "reduce kernel");
    }
    /* the outputs walk x's other dims in order (keepdim or not, the same order) */
    cu_walk w = {.nd = 0};
    for (int d = 0; d < x->ndim; d++) {
        if (d == axis) continue;
        w.shape[w.nd] = x->shape[d];
        w.st[0][w.nd] = x->shape[d] == 1 ? 0 : x->stride[d];
        w.nd++;
    }
    if (w.nd == 0) w.nd = 1, w.shape[0] = 1, w.st[0][0] = 0;
    return kiln__cu_launched(kiln__cu_reduce(cu->stream, op, xt, kiln__cu_ptr(x), yt, kiln__cu_ptr(t), kiln_tensor_numel(t),
                                             &w, x->shape[axis], x->stride[axis]),
                             "reduce kernel");
}

void kiln__cu_register_reduce(kiln_cu_kernel *tab) {
    for (int op = KILN_OP_SUM; op <= KILN_OP_ARGMAX; op++) tab[op] = (kiln_cu_kernel){reduce_supports, reduce_record};
}
