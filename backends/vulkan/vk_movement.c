/* vk_movement.c — the movement kernels of the Vulkan backend (see vk.h):
 * concat, pad, slice_scatter and slice_assign. Copies move bits, so every dtype runs as
 * its width (shaders mov_*_b16/_b32/_b64; 16 bits needs the device's f16
 * storage), and sources may be any strided view. Concat copies each part
 * into its slab and slice_assign its source into place (mov_copy); pad and slice_scatter write every output
 * element once, from the source or the fill value (mov_embed). */
#include "vk.h"

/* Which width variant (0: 16, 1: 32, 2: 64 bits) moves dt, or -1 when none does. */
static int width(const kiln_vk *vk, kiln_dtype dt) {
    switch (kiln_dtype_size(dt)) {
    case 2: return kiln__vk_caps(vk)->f16 ? 0 : -1;
    case 4: return 1;
    case 8: return 2;
    default: return -1;
    }
}
static const char *const copy_shader[3] = {"mov_copy_b16", "mov_copy_b32", "mov_copy_b64"};
static const char *const embed_shader[3] = {"mov_embed_b16", "mov_embed_b32", "mov_embed_b64"};

/* Bindable, and every index and size fits the shaders' 32-bit (signed) arithmetic. */
static bool operand_ok(const kiln_vk *vk, const kiln_tensor *t) {
    if (t->ndim > 6 || !kiln__vk_fits(vk, t) || kiln_tensor_numel(t) > INT32_MAX) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > INT32_MAX || t->stride[d] < 0 || t->stride[d] > INT32_MAX) return false;
    return true;
}

/* ---- concat: one dispatch per part ---- */

typedef struct copy_pc {
    uint32_t n, ndim, x0, y0;
    uint32_t shape[6], xstride[6], ystride[6];
} copy_pc;

static bool concat_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (width(vk, t->dtype) < 0 || !operand_ok(vk, t)) return false;
    for (int k = 0; k < t->nsrc; k++)
        if (t->src[k]->dtype != t->dtype || !operand_ok(vk, t->src[k])) return false;
    return true;
}

static kiln_status concat_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int a = (int)t->ip[0];
    const char *shader = copy_shader[width(vk, t->dtype)];
    int64_t off = 0;
    for (int k = 0; k < t->nsrc; k++) {
        const kiln_tensor *x = t->src[k];
        int64_t n = kiln_tensor_numel(x);
        if (n > 0) {
            copy_pc pc = {(uint32_t)n, (uint32_t)t->ndim, kiln__vk_base(vk, x),
                          kiln__vk_base(vk, t) + (uint32_t)(off * t->stride[a]), {0}, {0}, {0}};
            for (int d = 0; d < t->ndim; d++) {
                pc.shape[d] = (uint32_t)x->shape[d];
                pc.xstride[d] = (uint32_t)x->stride[d];
                pc.ystride[d] = (uint32_t)t->stride[d];
            }
            kiln_vk_dispatch dp = {.shader = shader, .n = 2, .bind = {x, t}, .push = &pc, .push_size = sizeof pc};
            kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
            kiln_status s = kiln__vk_dispatch(vk, &dp);
            if (s) return s;
        }
        off += x->shape[a];
    }
    return KILN_OK;
}

/* ---- pad and slice_scatter: one invocation per output element ---- */

typedef struct embed_pc {
    uint32_t n, ndim, x0, y0, saxis, step, fill_lo, fill_hi;
    uint32_t oshape[6], before[6], xshape[6], xstride[6];
} embed_pc;

/* The fill value's bits as the CPU kernel makes them (the dtype's rounding). */
static void fill_bits(kiln_dtype dt, double v, uint32_t *lo, uint32_t *hi) {
    unsigned char pat[8] = {0};
    kiln__types[dt].set(pat, 0, v);
    uint32_t w[2];
    memcpy(w, pat, sizeof w);
    *lo = kiln_dtype_size(dt) == 2 ? w[0] & 0xffffu : w[0];
    *hi = w[1];
}

static bool embed_ok(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    return width(vk, t->dtype) >= 0 && x->dtype == t->dtype && x->ndim == t->ndim && operand_ok(vk, t) &&
           operand_ok(vk, x);
}

static bool pad_supports(const kiln_vk *vk, const kiln_tensor *t) {
    if (!embed_ok(vk, t)) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->ip[2 * d] < 0 || t->ip[2 * d] > INT32_MAX) return false;
    return true;
}

static bool slice_scatter_supports(const kiln_vk *vk, const kiln_tensor *t) {
    return embed_ok(vk, t) && t->ip[0] >= 0 && t->ip[0] < t->ndim && t->ip[1] >= 0 && t->ip[1] <= INT32_MAX &&
           t->ip[2] >= 1 && t->ip[2] <= INT32_MAX;
}

static kiln_status embed_record(kiln_vk *vk, kiln_tensor *t, const embed_pc *pc) {
    const char *shader = embed_shader[width(vk, t->dtype)];
    if (pc->n == 0) return KILN_OK;
    kiln_vk_dispatch dp = {.shader = shader, .n = 2, .bind = {t->src[0], t}, .push = pc, .push_size = sizeof *pc};
    kiln__vk_groups_1d(vk, pc->n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

/* The push constants shared by pad and slice_scatter (no padding, step 1). */
static embed_pc embed_base(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0];
    embed_pc pc = {(uint32_t)kiln_tensor_numel(t), (uint32_t)t->ndim, kiln__vk_base(vk, x), kiln__vk_base(vk, t),
                   UINT32_MAX, 1, 0, 0, {0}, {0}, {0}, {0}};
    for (int d = 0; d < t->ndim; d++) {
        pc.oshape[d] = (uint32_t)t->shape[d];
        pc.xshape[d] = (uint32_t)x->shape[d];
        pc.xstride[d] = (uint32_t)x->stride[d];
    }
    return pc;
}

static kiln_status pad_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    embed_pc pc = embed_base(vk, t);
    for (int d = 0; d < t->ndim; d++) pc.before[d] = (uint32_t)t->ip[2 * d];
    fill_bits(t->dtype, t->fp[0], &pc.fill_lo, &pc.fill_hi);
    return embed_record(vk, t, &pc);
}

static kiln_status slice_scatter_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    embed_pc pc = embed_base(vk, t);
    int a = (int)t->ip[0];
    pc.saxis = (uint32_t)a;
    pc.before[a] = (uint32_t)t->ip[1];
    pc.step = (uint32_t)t->ip[2];
    return embed_record(vk, t, &pc);
}

/* ---- slice_assign: src copied into t's storage (dst's strides) in place ---- */

static bool slice_assign_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[1];
    return width(vk, t->dtype) >= 0 && x->dtype == t->dtype && x->ndim == t->ndim && operand_ok(vk, t) &&
           operand_ok(vk, x) && t->ip[1] >= 0 && t->ip[1] * t->stride[t->ip[0]] <= INT32_MAX;
}

static kiln_status slice_assign_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[1];
    int64_t n = kiln_tensor_numel(x);
    if (n == 0) return KILN_OK;
    copy_pc pc = {(uint32_t)n, (uint32_t)t->ndim, kiln__vk_base(vk, x),
                  kiln__vk_base(vk, t) + (uint32_t)(t->ip[1] * t->stride[t->ip[0]]), {0}, {0}, {0}};
    for (int d = 0; d < t->ndim; d++) {
        pc.shape[d] = (uint32_t)x->shape[d];
        pc.xstride[d] = (uint32_t)x->stride[d];
        pc.ystride[d] = (uint32_t)t->stride[d];
    }
    kiln_vk_dispatch dp = {.shader = copy_shader[width(vk, t->dtype)], .n = 2, .bind = {x, t}, .push = &pc,
                           .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, dp.groups);
    return kiln__vk_dispatch(vk, &dp);
}

void kiln__vk_register_movement(kiln_vk_kernel *tab) {
    tab[KILN_OP_CONCAT] = (kiln_vk_kernel){concat_supports, concat_record};
    tab[KILN_OP_PAD] = (kiln_vk_kernel){pad_supports, pad_record};
    tab[KILN_OP_SLICE_SCATTER] = (kiln_vk_kernel){slice_scatter_supports, slice_scatter_record};
    tab[KILN_OP_SLICE_ASSIGN] = (kiln_vk_kernel){slice_assign_supports, slice_assign_record};
}
