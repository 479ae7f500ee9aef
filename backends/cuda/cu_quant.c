/* cu_quant.c — the quantized dtypes on the CUDA backend (see cu.h and
 * k_quant.cu): DEQUANTIZE, QMATMUL (y = x . W^T, W quantized [n, k]) and
 * GET_ROWS from a quantized table, for Q8_0, Q4_0, NF4 and the GQ (GPTQ
 * 2/3/4-bit) dtypes, whose blocks must be contiguous. kiln__cu_quant() is
 * the backend's whole knowledge of the block dtypes: cu_supports() sends
 * any node with an operand of another one (NF4_DQ, DFP16) to the CPU. */
#include "cu.h"

#include "../../quant/quant.h"

int kiln__cu_quant(kiln_dtype t) {
    switch (t) {
    case KILN_Q8_0: return CU_Q8_0;
    case KILN_Q4_0: return CU_Q4_0;
    case KILN_NF4: return CU_NF4;
    case KILN_GQ4_32: case KILN_GQ4_64: case KILN_GQ4_128:
    case KILN_GQ3_32: case KILN_GQ3_64: case KILN_GQ3_128:
    case KILN_GQ2_32: case KILN_GQ2_64: case KILN_GQ2_128:
        return CU_GQ | kiln__gq_bits(t) << 8 | kiln__gq_group(t);
    default: return -1;
    }
}

static bool dequantize_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *q = t->src[0];
    return t->dtype == KILN_F32 && kiln__cu_quant(q->dtype) >= 0 && kiln_tensor_is_contiguous(q) &&
           kiln_tensor_numel(q) % kiln__types[q->dtype].blck == 0;
}

static kiln_status dequantize_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0];
    return kiln__cu_launched(kiln__cu_dequantize(cu->stream, kiln__cu_quant(q->dtype), kiln__cu_ptr(q), kiln__cu_ptr(t),
                                                 kiln_tensor_numel(t)),
                             "dequantize kernel");
}

static bool qmatmul_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    return t->dtype == KILN_F32 && x->dtype == KILN_F32 && kiln_tensor_is_contiguous(x) && x->ndim == 2 &&
           kiln__cu_quant(w->dtype) >= 0 && kiln_tensor_is_contiguous(w) && w->ndim == 2 &&
           w->shape[1] == x->shape[1] && w->shape[1] % kiln__types[w->dtype].blck == 0;
}

static kiln_status qmatmul_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    return kiln__cu_launched(kiln__cu_qmatmul(cu->stream, kiln__cu_quant(w->dtype), kiln__cu_ptr(x), kiln__cu_ptr(w),
                                              kiln__cu_ptr(t), x->shape[0], w->shape[0], w->shape[1]),
                             "qmatmul kernel");
}

bool kiln__cu_quant_rows_supports(const kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    return t->dtype == KILN_F32 && kiln__cu_quant(table->dtype) >= 0 && table->ndim == 2 &&
           kiln_tensor_is_contiguous(table) && table->shape[1] % kiln__types[table->dtype].blck == 0 &&
           ix->dtype == KILN_I32 && kiln_tensor_is_contiguous(ix);
}

kiln_status kiln__cu_quant_rows_record(kiln_cu *cu, kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    return kiln__cu_launched(kiln__cu_qget_rows(cu->stream, kiln__cu_quant(table->dtype), kiln__cu_ptr(table),
                                                table->shape[0], table->shape[1], kiln__cu_ptr(ix), kiln_tensor_numel(ix),
                                                kiln__cu_ptr(t)),
                             "quantized get_rows kernel");
}

void kiln__cu_register_quant(kiln_cu_kernel *tab) {
    tab[KILN_OP_DEQUANTIZE] = (kiln_cu_kernel){dequantize_supports, dequantize_record};
    tab[KILN_OP_QMATMUL] = (kiln_cu_kernel){qmatmul_supports, qmatmul_record};
}
