/* cu_elementwise.c — the element-wise ops on the CUDA backend (see cu.h):
 * CONTIGUOUS and CAST among f32, f64, f16, bf16 and i32; every unary op
 * NEG..GELU_TANH_GRAD and the binary ops ADD SUB MUL DIV with
 * broadcasting, on f32, f64, f16 and bf16; CMP (also i32); WHERE (f32,
 * f64 or i32 condition) and ACC_GRAD. Sources may be any strided view (the walk
 * turns a flat output index into each source's offset); the kernels
 * compute in double and round once, as the CPU's reference formulas. */
#include "cu.h"

_Static_assert(KILN_OP_GELU_TANH_GRAD - KILN_OP_NEG == 19, "k_elementwise.cu numbers the unary ops NEG..GELU_TANH_GRAD 0..19");
_Static_assert(KILN_OP_SUB - KILN_OP_ADD == CU_SUB && KILN_OP_MUL - KILN_OP_ADD == CU_MUL &&
                   KILN_OP_DIV - KILN_OP_ADD == CU_DIV && KILN_OP_CMP - KILN_OP_ADD == CU_CMP,
               "cu_kernels.h numbers the binary ops as kiln_op does");
_Static_assert(KILN_CMP_EQ == 0 && KILN_CMP_NE == 1 && KILN_CMP_LT == 2 && KILN_CMP_LE == 3 && KILN_CMP_GT == 4 &&
                   KILN_CMP_GE == 5,
               "k_elementwise.cu's binary_ref numbers the comparisons");

static bool is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F16 || t == KILN_BF16 || t == KILN_F64; }

static bool copy_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return kiln__cu_dtype(t->dtype) >= 0 && kiln__cu_dtype(t->src[0]->dtype) >= 0;
}

static kiln_status copy_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    cu_walk w = kiln__cu_walk(t, 1);
    return kiln__cu_launched(kiln__cu_copy(cu->stream, kiln__cu_dtype(x->dtype), kiln__cu_ptr(x), kiln__cu_dtype(t->dtype),
                                           kiln__cu_ptr(t), kiln_tensor_numel(t), &w),
                             "copy kernel");
}

static bool unary_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return is_float(t->dtype) && t->src[0]->dtype == t->dtype;
}

static kiln_status unary_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    cu_walk w = kiln__cu_walk(t, 1);
    return kiln__cu_launched(kiln__cu_unary(cu->stream, (int)(t->op - KILN_OP_NEG), t->fp[0], kiln__cu_dtype(t->dtype),
                                            kiln__cu_ptr(x), kiln__cu_ptr(t), kiln_tensor_numel(t), &w),
                             "unary kernel");
}

static bool binary_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    bool types = a->dtype == b->dtype && a->dtype == t->dtype &&
                 (is_float(t->dtype) || (t->dtype == KILN_I32 && t->op == KILN_OP_CMP));
    return types && (t->op != KILN_OP_CMP || (t->ip[0] >= KILN_CMP_EQ && t->ip[0] <= KILN_CMP_GE));
}

static kiln_status binary_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *a = t->src[0], *b = t->src[1];
    cu_walk w = kiln__cu_walk(t, 2);
    int cmp = t->op == KILN_OP_CMP ? (int)t->ip[0] : 0;
    return kiln__cu_launched(kiln__cu_binary(cu->stream, (int)(t->op - KILN_OP_ADD), cmp, kiln__cu_dtype(t->dtype),
                                             kiln__cu_ptr(a), kiln__cu_ptr(b), kiln__cu_ptr(t), kiln_tensor_numel(t), &w),
                             "binary kernel");
}

static bool where_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    return is_float(t->dtype) && a->dtype == t->dtype && b->dtype == t->dtype &&
           (c->dtype == KILN_F32 || c->dtype == KILN_I32 || c->dtype == KILN_F64);
}

static kiln_status where_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *c = t->src[0], *a = t->src[1], *b = t->src[2];
    cu_walk w = kiln__cu_walk(t, 3);
    return kiln__cu_launched(kiln__cu_where(cu->stream, kiln__cu_dtype(c->dtype), kiln__cu_ptr(c), kiln__cu_dtype(t->dtype),
                                            kiln__cu_ptr(a), kiln__cu_ptr(b), kiln__cu_ptr(t), kiln_tensor_numel(t), &w),
                             "where kernel");
}

/* src[0] (the gradient, whose storage the node is) += src[1], both contiguous */
static bool acc_grad_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    return g->dtype == d->dtype && is_float(g->dtype) && kiln_tensor_is_contiguous(g) && kiln_tensor_is_contiguous(d) &&
           kiln_tensor_numel(g) == kiln_tensor_numel(d);
}

static kiln_status acc_grad_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *g = t->src[0], *d = t->src[1];
    return kiln__cu_launched(kiln__cu_acc(cu->stream, kiln__cu_dtype(g->dtype), kiln__cu_ptr(g), kiln__cu_ptr(d),
                                          kiln_tensor_numel(g)),
                             "acc_grad kernel");
}

void kiln__cu_register_elementwise(kiln_cu_kernel *tab) {
    tab[KILN_OP_CONTIGUOUS] = tab[KILN_OP_CAST] = (kiln_cu_kernel){copy_supports, copy_record};
    for (int op = KILN_OP_NEG; op <= KILN_OP_GELU_TANH_GRAD; op++) tab[op] = (kiln_cu_kernel){unary_supports, unary_record};
    for (int op = KILN_OP_ADD; op <= KILN_OP_CMP; op++) tab[op] = (kiln_cu_kernel){binary_supports, binary_record};
    tab[KILN_OP_WHERE] = (kiln_cu_kernel){where_supports, where_record};
    tab[KILN_OP_ACC_GRAD] = (kiln_cu_kernel){acc_grad_supports, acc_grad_record};
}
