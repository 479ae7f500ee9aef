/* rows.c — index ops: kiln_get_rows (embedding lookup), its gradient
 * scatter_add_rows, and kiln_one_hot. Constructors, checks and backward
 * rules; the kernels are in backends/cpu/rows.c. */
#include "internal.h"

/* Index tensors become [idx..., D] outputs, so they may have one dim fewer than the maximum. */
static bool index_ok(const char *who, const kiln_tensor *idx) {
    char si[96];
    if (!kiln__not_quant(who, idx)) return false;
    if (idx->dtype != KILN_I32) {
        kiln__err(KILN_ERR_DTYPE, "%s: indices must be i32, not %s", who, kiln_dtype_name(idx->dtype));
        return false;
    }
    if (idx->ndim > KILN_MAX_DIMS - 1) {
        kiln__err(KILN_ERR_SHAPE, "%s: indices %s have more than %d dims", who, kiln__shape_str(idx, si),
                  KILN_MAX_DIMS - 1);
        return false;
    }
    return true;
}

kiln_tensor *kiln_get_rows(kiln_ctx *ctx, kiln_tensor *table, kiln_tensor *idx) {
    char st[96];
    if (!table || !idx) return NULL;
    if (!kiln__not_quant("kiln_get_rows", idx)) return NULL;
    if (kiln__is_quant(table->dtype)) {
        /* a quantized embedding table: each row is whole blocks, read
         * where it lies and dequantized (rows of a super-block type such
         * as nf4_dq only when a row is whole super-blocks) */
        const kiln_type_traits *tr = &kiln__types[table->dtype];
        if (table->ndim != 2 || table->shape[1] % tr->blck || table->stride[1] != 1 ||
            table->stride[0] != table->shape[1])
            return kiln__err(KILN_ERR_SHAPE,
                             "kiln_get_rows: a %s table must be a contiguous [V, D] with D a multiple of %lld, not %s",
                             tr->name, (long long)tr->blck, kiln__shape_str(table, st));
    } else if (!kiln__is_float(table->dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_get_rows: the table must be a float dtype, not %s",
                         kiln_dtype_name(table->dtype));
    if (table->ndim != 2)
        return kiln__err(KILN_ERR_SHAPE, "kiln_get_rows: the table %s must be 2-D [V, D]", kiln__shape_str(table, st));
    if (!index_ok("kiln_get_rows", idx)) return NULL;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, idx->shape, (size_t)idx->ndim * sizeof *shape);
    shape[idx->ndim] = table->shape[1];
    if (!kiln__shape_check("kiln_get_rows", idx->ndim + 1, shape)) return NULL;
    kiln_tensor *src[2] = {kiln__is_quant(table->dtype) ? table : kiln__contig(ctx, table), kiln__contig(ctx, idx)};
    return kiln__node_new(ctx, KILN_OP_GET_ROWS, table->dtype == KILN_F64 ? KILN_F64 : KILN_F32, idx->ndim + 1, shape,
                          2, src);
}

/* Zeros [V, D] with each row of rows [idx..., D] added at its index. */
static kiln_tensor *scatter_add_rows(kiln_ctx *ctx, kiln_tensor *rows, kiln_tensor *idx, int64_t v) {
    char sr[96], si[96];
    if (!rows || !idx) return NULL;
    if (!kiln__is_compute_float(rows->dtype))
        return kiln__err(KILN_ERR_DTYPE, "scatter_add_rows: rows must be f32 or f64, not %s",
                         kiln_dtype_name(rows->dtype));
    if (!index_ok("scatter_add_rows", idx)) return NULL;
    if (rows->ndim != idx->ndim + 1 || !kiln__shape_eq(idx->ndim, rows->shape, idx->ndim, idx->shape))
        return kiln__err(KILN_ERR_SHAPE, "scatter_add_rows: rows %s do not match indices %s", kiln__shape_str(rows, sr),
                         kiln__shape_str(idx, si));
    kiln_tensor *src[2] = {kiln__contig(ctx, rows), kiln__contig(ctx, idx)};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_SCATTER_ADD_ROWS, rows->dtype, 2,
                                    (int64_t[]){v, rows->shape[rows->ndim - 1]}, 2, src);
    if (t) t->ip[0] = v;
    return t;
}

static kiln_status get_rows_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *table = node->src[0];
    if (!kiln_tensor_requires_grad(table)) return KILN_OK;
    if (!kiln__is_compute_float(table->dtype))
        return kiln__errs(KILN_ERR_UNSUPPORTED, "kiln_get_rows: no gradient for a %s table (only f32 and f64)",
                          kiln_dtype_name(table->dtype));
    gsrc[0] = scatter_add_rows(ctx, gy, node->src[1], table->shape[0]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

static kiln_status scatter_add_rows_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    gsrc[0] = kiln_get_rows(ctx, gy, node->src[1]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

kiln_tensor *kiln_one_hot(kiln_ctx *ctx, kiln_tensor *labels, int64_t n, kiln_dtype dtype) {
    if (!labels) return NULL;
    if ((unsigned)dtype >= KILN_DTYPE_COUNT || !kiln__is_float(dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_one_hot: the result dtype must be a float dtype, not %s",
                         kiln_dtype_name(dtype));
    if (!index_ok("kiln_one_hot", labels)) return NULL;
    if (n < 0) return kiln__err(KILN_ERR_ARG, "kiln_one_hot: n = %lld classes must be >= 0", (long long)n);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, labels->shape, (size_t)labels->ndim * sizeof *shape);
    shape[labels->ndim] = n;
    if (!kiln__shape_check("kiln_one_hot", labels->ndim + 1, shape)) return NULL;
    kiln_tensor *l = kiln__contig(ctx, labels);
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_ONE_HOT, dtype, labels->ndim + 1, shape, 1, &l);
    if (t) t->ip[0] = n;
    return t;
}

void kiln__ops_register_rows(kiln_op_info *tab) {
    tab[KILN_OP_GET_ROWS] = (kiln_op_info){"get_rows", KILN_KIND_KERNEL, get_rows_backward};
    tab[KILN_OP_SCATTER_ADD_ROWS] = (kiln_op_info){"scatter_add_rows", KILN_KIND_KERNEL, scatter_add_rows_backward};
    tab[KILN_OP_ONE_HOT] = (kiln_op_info){"one_hot", KILN_KIND_KERNEL, NULL};
}
