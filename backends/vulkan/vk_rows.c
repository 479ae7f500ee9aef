/* vk_rows.c — the index kernels of the Vulkan backend (see vk.h): get_rows
 * (f32 table, or f16 where the device has 16-bit storage, or a quantized
 * one through vk_quant.c; output f32),
 * scatter_add_rows (f32) and one_hot (f32, f16). Indices and labels are i32
 * and contiguous (the constructors make them so); the table may be strided.
 *
 * The CPU kernels fail the compute on an index outside [0, V); a kernel
 * cannot, so here such an index reads a zero row (get_rows) or adds to no
 * row (scatter_add_rows), as one_hot treats an out-of-range label. */
#include "vk.h"

/* Bindable, with every index and size inside the shaders' 32-bit arithmetic. */
static bool operand_ok(const kiln_vk *vk, const kiln_tensor *t) {
    if (!kiln__vk_fits(vk, t) || kiln_tensor_numel(t) > INT32_MAX) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > INT32_MAX || t->stride[d] < 0 || t->stride[d] > INT32_MAX) return false;
    return true;
}

static bool index_ok(const kiln_vk *vk, const kiln_tensor *ix) {
    return ix->dtype == KILN_I32 && kiln_tensor_is_contiguous(ix) && operand_ok(vk, ix);
}

/* ---- get_rows ---- */

static bool get_rows_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    if (kiln__is_quant(table->dtype)) return kiln__vk_quant_rows_supports(vk, t);
    bool dt = table->dtype == KILN_F32 || (table->dtype == KILN_F16 && kiln__vk_caps(vk)->f16);
    return dt && t->dtype == KILN_F32 && table->ndim == 2 && operand_ok(vk, table) && index_ok(vk, ix) &&
           operand_ok(vk, t);
}

static kiln_status get_rows_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    if (kiln__is_quant(table->dtype)) return kiln__vk_quant_rows_record(vk, t, ex);
    int64_t n = kiln_tensor_numel(t);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, d, v, t0, i0, y0, ts0, ts1;
    } pc = {(uint32_t)n,
            (uint32_t)table->shape[1],
            (uint32_t)table->shape[0],
            kiln__vk_base(vk, table),
            kiln__vk_base(vk, ix),
            kiln__vk_base(vk, t),
            (uint32_t)table->stride[0],
            (uint32_t)table->stride[1]};
    kiln_vk_dispatch dp = {.shader = table->dtype == KILN_F16 ? "rows_get_f16" : "rows_get_f32",
                           .n = 3,
                           .bind = {table, ix, t},
                           .push = &pc,
                           .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* ---- scatter_add_rows: a workgroup per (row, 256 columns) ---- */

static bool scatter_add_rows_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *rows = t->src[0], *ix = t->src[1];
    return t->dtype == KILN_F32 && rows->dtype == KILN_F32 && t->ndim == 2 && kiln_tensor_is_contiguous(rows) &&
           operand_ok(vk, rows) && index_ok(vk, ix) && operand_ok(vk, t);
}

static kiln_status scatter_add_rows_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *rows = t->src[0], *ix = t->src[1];
    int64_t v = t->shape[0], d = t->shape[1], chunks = (d + 255) / 256;
    if (v * d == 0) return KILN_OK;
    struct {
        uint32_t v, d, chunks, nidx, r0, i0, y0;
    } pc = {(uint32_t)v,
            (uint32_t)d,
            (uint32_t)chunks,
            (uint32_t)kiln_tensor_numel(ix),
            kiln__vk_base(vk, rows),
            kiln__vk_base(vk, ix),
            kiln__vk_base(vk, t)};
    kiln_vk_dispatch dp = {
        .shader = "rows_scatter_add", .n = 3, .bind = {rows, ix, t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)(v * chunks) * 256, 256, dp.groups); /* one workgroup per (row, chunk) */
    return kiln__vk_dispatch(vk, &dp);
}

/* ---- one_hot ---- */

static bool one_hot_supports(const kiln_vk *vk, const kiln_tensor *t) {
    bool dt = t->dtype == KILN_F32 || (t->dtype == KILN_F16 && kiln__vk_caps(vk)->f16);
    return dt && index_ok(vk, t->src[0]) && operand_ok(vk, t) && t->ip[0] >= 1 && t->ip[0] <= INT32_MAX;
}

static kiln_status one_hot_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *labels = t->src[0];
    int64_t n = kiln_tensor_numel(t);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, classes, l0, y0;
    } pc = {(uint32_t)n, (uint32_t)t->ip[0], kiln__vk_base(vk, labels), kiln__vk_base(vk, t)};
    kiln_vk_dispatch dp = {.shader = t->dtype == KILN_F16 ? "rows_one_hot_f16" : "rows_one_hot_f32",
                           .n = 2,
                           .bind = {labels, t},
                           .push = &pc,
                           .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_rows(kiln_vk_kernel *tab) {
    tab[KILN_OP_GET_ROWS] = (kiln_vk_kernel){get_rows_supports, get_rows_record};
    tab[KILN_OP_SCATTER_ADD_ROWS] = (kiln_vk_kernel){scatter_add_rows_supports, scatter_add_rows_record};
    tab[KILN_OP_ONE_HOT] = (kiln_vk_kernel){one_hot_supports, one_hot_record};
}
