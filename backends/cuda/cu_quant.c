/* cu_quant.c — the quantized dtypes on the CUDA backend (see cu.h and
 * k_quant.cu): DEQUANTIZE, QMATMUL (y = x . W^T, W quantized [n, k]) and
 * GET_ROWS from a quantized table, for Q8_0, Q4_0, NF4, NF4_DQ, DFP16, the
 * GQ (GPTQ 2/3/4-bit) dtypes and ggml's other types (Q4_1 .. IQ4_XS,
 * quant/ggml_decode.h), whose blocks must be contiguous. The kernels
 * index elements from the tensor's first byte, so NF4_DQ's super-blocks
 * (16384 elements) may span rows: a row need only be a multiple of
 * row_blck (64) and the whole tensor of whole super-blocks. NF4_DQ's
 * absmax codes read the signed dynamic map, copied to the device before
 * the first NF4_DQ kernel. QMATMUL of Q8_0 and Q4_0 with few rows of x
 * (generation) takes k_qmv.cu's integer products, the CPU's bits, and so
 * do ggml's other types (k_qmv_k.cu, k_qmv_32.cu); from CU_QGEMM_MIN_M
 * rows (a prompt) every dtype takes cu_qgemm.c's f16 tensor-core GEMM;
 * the rest take k_quant.cu's f32 kernels (a warp per row of W for NF4,
 * NF4_DQ and GQ). kiln__cu_quant() is the backend's whole knowledge of the
 * block dtypes: cu_supports() sends any node with an operand of another
 * one to the CPU. */
#include "cu.h"

#include "../../quant/dynamic_map.h"
#include "../../quant/quant.h"

/* The block dtype's kernels can run: NF4_DQ's map on the device. One
 * backend per process (cu_device.c), so one flag. */
static kiln_status ready(kiln_cu *cu, kiln_dtype t) {
    static bool dq_map_loaded;
    if (t != KILN_NF4_DQ || dq_map_loaded) return KILN_OK;
    float map[256];
    kiln__dynamic_map(true, map);
    kiln_status s = kiln__cu_launched(kiln__cu_nf4_dq_map(cu->stream, map), "loading NF4_DQ's absmax map");
    dq_map_loaded = s == KILN_OK;
    return s;
}

/* Rows of whole row blocks over a whole number of blocks. */
static bool blocks_ok(const kiln_tensor *q) {
    const kiln_type_traits *tr = &kiln__types[q->dtype];
    return q->shape[q->ndim - 1] % tr->row_blck == 0 && kiln_tensor_numel(q) % tr->blck == 0;
}

int kiln__cu_quant(kiln_dtype t) {
    switch (t) {
    case KILN_Q8_0: return CU_Q8_0;
    case KILN_Q4_0: return CU_Q4_0;
    case KILN_NF4: return CU_NF4;
    case KILN_NF4_DQ: return CU_NF4_DQ;
    case KILN_DFP16: return CU_DFP16;
    case KILN_GQ4_32: case KILN_GQ4_64: case KILN_GQ4_128:
    case KILN_GQ3_32: case KILN_GQ3_64: case KILN_GQ3_128:
    case KILN_GQ2_32: case KILN_GQ2_64: case KILN_GQ2_128:
        return CU_GQ | kiln__gq_bits(t) << 8 | kiln__gq_group(t);
    default: /* ggml's other types, in kiln_dtype's order (quant/ggml_decode.h) */
        return t >= KILN_Q4_1 && t <= KILN_IQ4_XS ? CU_GGML | (int)(t - KILN_Q4_1) : -1;
    }
}

/* A view the row kernel reads: its last dim whole row blocks at unit
 * stride, every row starting on a block (leading strides whole blocks). */
static bool rows_view_ok(const kiln_tensor *q) {
    const kiln_type_traits *tr = &kiln__types[q->dtype];
    int last = q->ndim - 1;
    if (last < 1 || last > CU_MAX_DIMS || q->shape[last] % tr->row_blck || (q->stride[last] != 1 && q->shape[last] != 1))
        return false;
    for (int d = 0; d < last; d++)
        if (q->shape[d] != 1 && (q->stride[d] < 0 || q->stride[d] % tr->blck)) return false;
    return true;
}

static bool dequantize_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *q = t->src[0];
    if (t->dtype != KILN_F32 || kiln__cu_quant(q->dtype) < 0 || q->ndim < 1 || !kiln_tensor_is_contiguous(t)) return false;
    return kiln_tensor_is_contiguous(q) ? blocks_ok(q) : rows_view_ok(q);
}

static kiln_status dequantize_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0];
    kiln_status s = ready(cu, q->dtype);
    if (s) return s;
    int qt = kiln__cu_quant(q->dtype);
    if (kiln_tensor_is_contiguous(q))
        return kiln__cu_launched(kiln__cu_dequantize(cu->stream, qt, kiln__cu_ptr(q), kiln__cu_ptr(t), kiln_tensor_numel(t)),
                                 "dequantize kernel");
    /* the rows over the leading dims, their strides in bytes */
    const kiln_type_traits *tr = &kiln__types[q->dtype];
    cu_walk w = {.nd = q->ndim - 1};
    for (int d = 0; d < w.nd; d++) {
        w.shape[d] = q->shape[d];
        w.st[0][d] = q->shape[d] == 1 ? 0 : q->stride[d] / tr->blck * (int64_t)tr->size;
    }
    return kiln__cu_launched(kiln__cu_dequantize_rows(cu->stream, qt, kiln__cu_ptr(q), kiln__cu_ptr(t), kiln_tensor_numel(t),
                                                      q->shape[q->ndim - 1], &w),
                             "dequantize kernel (view)");
}

static bool qmatmul_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    return t->dtype == KILN_F32 && x->dtype == KILN_F32 && kiln_tensor_is_contiguous(x) && x->ndim == 2 &&
           kiln__cu_quant(w->dtype) >= 0 && kiln_tensor_is_contiguous(w) && w->ndim == 2 &&
           w->shape[1] == x->shape[1] && blocks_ok(w);
}

/* The few-row integer product of weight dtype t: 1 Q8_0 / Q4_0
 * (k_qmv.cu), 2 the K types and IQ4_XS against Q8_K (k_qmv_k.cu), 3 the
 * other blocks of 32 against Q8_0 / Q8_1 (k_qmv_32.cu); 0 none. */
static int int_kind(kiln_dtype t) {
    switch (t) {
    case KILN_Q8_0: case KILN_Q4_0: return 1;
    case KILN_Q2_K: case KILN_Q3_K: case KILN_Q4_K: case KILN_Q5_K: case KILN_Q6_K: case KILN_IQ4_XS: return 2;
    case KILN_Q4_1: case KILN_Q5_0: case KILN_Q5_1: case KILN_IQ4_NL: return 3;
    default: return 0;
    }
}

static kiln_status qmatmul_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    kiln_status s = ready(cu, w->dtype);
    if (s) return s;
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    if (kiln__cu_qgemm_ok(t)) return kiln__cu_qgemm(cu, t);
    const int qt = kiln__cu_quant(w->dtype), kind = int_kind(w->dtype);
    if (kind && m <= CU_QMV_MAX_M && !((uintptr_t)kiln__cu_ptr(w) & 1)) {
        /* scratch: x's scales (one per 32, or per 256 for Q8_K), Q8_1's
         * sums as many, then its codes */
        const size_t dx_bytes = ((size_t)(m * (k / (kind == 2 ? 256 : 32))) * sizeof(float) + 15) & ~(size_t)15;
        kiln_devbuf *sc = kiln__cu_buffer_new(cu, (kind == 3 ? 2 : 1) * dx_bytes + (size_t)(m * k), false);
        if (!sc) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
        float *dx = sc->ptr, *sx = (float *)((char *)sc->ptr + dx_bytes);
        int8_t *xq = (int8_t *)sc->ptr + (kind == 3 ? 2 : 1) * dx_bytes;
        const float *xp = kiln__cu_ptr(x);
        const void *wp = kiln__cu_ptr(w);
        float *yp = kiln__cu_ptr(t);
        s = kiln__cu_launched(kind == 1   ? kiln__cu_qmv_i8(cu->stream, qt, xp, wp, yp, m, n, k, xq, dx)
                              : kind == 2 ? kiln__cu_qmv_q8k(cu->stream, qt, xp, wp, yp, m, n, k, xq, dx)
                                          : kiln__cu_qmv_q32(cu->stream, qt, xp, wp, yp, m, n, k, xq, dx, sx),
                              "qmatmul kernel (integer)");
        kiln__cu_buffer_free(cu, sc); /* its next user is queued after the product */
        return s;
    }
    return kiln__cu_launched(kiln__cu_qmatmul(cu->stream, kiln__cu_quant(w->dtype), kiln__cu_ptr(x), kiln__cu_ptr(w),
                                              kiln__cu_ptr(t), x->shape[0], w->shape[0], w->shape[1]),
                             "qmatmul kernel");
}

bool kiln__cu_quant_rows_supports(const kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    return t->dtype == KILN_F32 && kiln__cu_quant(table->dtype) >= 0 && table->ndim == 2 &&
           kiln_tensor_is_contiguous(table) && blocks_ok(table) &&
           ix->dtype == KILN_I32 && kiln_tensor_is_contiguous(ix);
}

kiln_status kiln__cu_quant_rows_record(kiln_cu *cu, kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    kiln_status s = ready(cu, table->dtype);
    if (s) return s;
    return kiln__cu_launched(kiln__cu_qget_rows(cu->stream, kiln__cu_quant(table->dtype), kiln__cu_ptr(table),
                                                table->shape[0], table->shape[1], kiln__cu_ptr(ix), kiln_tensor_numel(ix),
                                                kiln__cu_ptr(t)),
                             "quantized get_rows kernel");
}

void kiln__cu_register_quant(kiln_cu_kernel *tab) {
    tab[KILN_OP_DEQUANTIZE] = (kiln_cu_kernel){dequantize_supports, dequantize_record};
    tab[KILN_OP_QMATMUL] = (kiln_cu_kernel){qmatmul_supports, qmatmul_record};
}
