/* vk_quant.c — the quantized dtypes on the Vulkan backend (see vk.h):
 * DEQUANTIZE, QMATMUL (y = x . W^T, W quantized [n, k]) and GET_ROWS from
 * a quantized table, for each dtype with a row in QTYPES. That table is
 * the backend's whole knowledge of the block dtypes: kiln__vk_dtype_ok()
 * answers from it, and vk_supports() sends every node with an operand of a
 * dtype missing there to the CPU, so a new block dtype runs on the CPU
 * until it has shaders here.
 *
 * The shaders (shaders/quant*.glsl, built once per dtype through
 * variants.txt) read blocks as 32-bit words and decode them in registers:
 * dequantize and get_rows equal the CPU bit for bit; QMATMUL accumulates
 * code * x in f32 per scale group (32 elements for Q8_0/Q4_0, 64 for NF4
 * and NF4_DQ, ggml's sub-blocks for its other types (Q4_1 .. IQ4_XS,
 * quant_ggml.glsl); for the GQ dtypes (q - zero) * x per chunk of 32 codes,
 * quant_gq_mv.glsl), then adds scale * that sum (and min * sum(x) for the
 * types with a min), so it is the f32 product
 * with the dequantized W up to the order of the additions (x is never
 * rounded to int8, unlike the CPU's batch-1 path for GQ). Q8_0, Q4_0 and
 * ggml's types (all but Q8_1 and Q8_K) with fewer than 8 rows of x are
 * the exception: x rounded to int8 codes and integer products in the
 * CPU's order (quant_qx.comp with quant_qmv.glsl or quant_qmv_32.glsl;
 * quant_qxk.comp and quant_qmv_k.glsl against Q8_K), equal to its batch-1
 * path bit for bit. From 8 rows of x (a prompt) every dtype takes
 * qmm_gemm_record: W dequantized to f32 and vk_matmul.c's tiled product,
 * the f32 matmul of the dequantized W up to the order of the additions. */
#include "vk.h"
#include "../../quant/dynamic_map.h"

typedef struct vk_qtype {
    const char *dq, *rows;      /* shader names: dequantize, get_rows */
    const char *mv1, *mv8;      /* qmatmul taking 1 or QMV_MB rows of x per workgroup */
    int align;                  /* a block's first byte is a multiple of this from the binding */
    bool map;                   /* reads the signed dynamic map (one more binding, the last) */
} vk_qtype;

static const vk_qtype QTYPES[KILN_DTYPE_COUNT] = {
    [KILN_Q8_0] = {"qdq_q8_0", "qrows_q8_0", "qmv_q8_0_b1", "qmv_q8_0_b8", 2, false},
    [KILN_Q4_0] = {"qdq_q4_0", "qrows_q4_0", "qmv_q4_0_b1", "qmv_q4_0_b8", 2, false},
    [KILN_NF4] = {"qdq_nf4", "qrows_nf4", "qmv_nf4_b1", "qmv_nf4_b8", 4, false},
    [KILN_NF4_DQ] = {"qdq_nf4_dq", "qrows_nf4_dq", "qmv_nf4_dq_b1", "qmv_nf4_dq_b8", 4, true},
    /* GQ blocks are 3 + G b / 8 bytes, all odd: a view keeping whole blocks
     * starts at any byte, so the GQ shaders read every field, the f16 scale
     * included, at any byte (quant.glsl's kq_u32, quant_gq_mv.glsl's
     * funnel shifts) and need no alignment */
#define GQ(b, g)                                                                                             \
    [KILN_GQ##b##_##g] = {"qdq_gq" #b "_" #g, "qrows_gq" #b "_" #g, "qmv_gq" #b "_" #g "_b1", "qmv_gq" #b "_" #g "_b8", \
                          1, false}
    GQ(4, 32), GQ(4, 64), GQ(4, 128), GQ(3, 32), GQ(3, 64), GQ(3, 128), GQ(2, 32), GQ(2, 64), GQ(2, 128),
#undef GQ
    /* ggml's other types (quant_ggml.glsl): blocks of even sizes, f16
     * fields at even bytes (kq_u16) */
#define GG(T, t) [KILN_##T] = {"qdq_" #t, "qrows_" #t, "qmv_" #t "_b1", "qmv_" #t "_b8", 2, false}
    GG(Q4_1, q4_1), GG(Q5_0, q5_0), GG(Q5_1, q5_1), GG(Q8_1, q8_1), GG(Q2_K, q2_k), GG(Q3_K, q3_k),
    GG(Q4_K, q4_k), GG(Q5_K, q5_k), GG(Q6_K, q6_k), GG(Q8_K, q8_k), GG(IQ4_NL, iq4_nl), GG(IQ4_XS, iq4_xs),
#undef GG
};

/* W rows and x rows per workgroup (quant_mv.glsl); fewer than QMV_MB1_BELOW
 * rows of x take the one-row kernel, once per row */
enum { QMV_ROWS = 2, QMV_MB = 8, QMV_MB1_BELOW = 4 };
/* quant_qmv.glsl: rows of x at most (KILN_QMM_PANEL_MIN_M - 1: the CPU's
 * batched paths from 8), W rows per workgroup */
enum { QMV_I8_M = 7, QMV_I8_ROWS = 8 };

static const vk_qtype *qtype(kiln_dtype t) {
    return (unsigned)t < KILN_DTYPE_COUNT && QTYPES[t].dq ? &QTYPES[t] : NULL;
}

bool kiln__vk_dtype_ok(kiln_dtype t) { return (unsigned)t < KILN_DTYPE_COUNT && (!kiln__is_quant(t) || qtype(t)); }

/* Bindable, every size and stride inside the shaders' 32-bit arithmetic. */
static bool operand_ok(const kiln_vk *vk, const kiln_tensor *t) {
    if (!kiln__vk_fits(vk, t) || kiln_tensor_numel(t) > INT32_MAX) return false;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > INT32_MAX || t->stride[d] < 0 || t->stride[d] > INT32_MAX) return false;
    return true;
}

/* The byte of its binding where q starts (its first block), checked
 * against the alignment the shaders' reads assume (core/tensor.c keeps
 * views on block boundaries and the planner aligns every tensor, so this
 * holds). */
static kiln_status qbase(const kiln_vk *vk, const kiln_tensor *q, uint32_t *out) {
    *out = kiln__vk_base(vk, q);
    if (*out % (uint32_t)qtype(q->dtype)->align)
        return kiln__errs(KILN_ERR_STATE, "vulkan: a %s tensor starts at byte %u of its binding, not on a %d-byte boundary",
                          kiln_dtype_name(q->dtype), *out, qtype(q->dtype)->align);
    return KILN_OK;
}

/* The dispatch of dtype t's kernel: with the dynamic map written into
 * scratch (*map) and bound last where t reads it. */
static kiln_status run(kiln_vk *vk, kiln_dtype t, kiln_vk_dispatch *d, kiln_tensor *map) {
    if (QTYPES[t].map) {
        float m[256];
        kiln__dynamic_map(true, m);
        kiln_status s = kiln__vk_scratch(vk, 256, KILN_F32, map);
        if (s || (s = kiln__vk_write(vk, map, m, sizeof m))) return s;
        d->bind[d->n++] = map;
    }
    return kiln__vk_dispatch(vk, d);
}

static uint32_t block_bytes(kiln_dtype t, int64_t stride) {
    return (uint32_t)(stride / kiln__types[t].blck * (int64_t)kiln__types[t].size);
}

/* ---- dequantize ---- */

static bool dq_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *q = t->src[0];
    if (!qtype(q->dtype) || t->dtype != KILN_F32 || !kiln_tensor_is_contiguous(t) || !operand_ok(vk, q) ||
        !operand_ok(vk, t))
        return false;
    if (kiln_tensor_is_contiguous(q)) return true;
    if (q->ndim > 4) return false; /* rows over at most three leading dims */
    for (int d = 0; d < q->ndim - 1; d++)
        if ((uint64_t)q->stride[d] / (uint64_t)kiln__types[q->dtype].blck * kiln__types[q->dtype].size > UINT32_MAX)
            return false;
    return true;
}

static kiln_status dq_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0];
    const int64_t n = kiln_tensor_numel(t);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, cols, q0, y0, d1, d2, s0, s1, s2;
    } pc = {(uint32_t)n, (uint32_t)n, 0, kiln__vk_base(vk, t), 1, 1, 0, 0, 0};
    kiln_status s = qbase(vk, q, &pc.q0);
    if (s) return s;
    if (!kiln_tensor_is_contiguous(q)) { /* rows over the leading dims, right-aligned into d0, d1, d2 */
        uint32_t dims[3] = {1, 1, 1}, sb[3] = {0, 0, 0};
        const int lead = q->ndim - 1;
        for (int i = 0; i < lead; i++) {
            dims[3 - lead + i] = (uint32_t)q->shape[i];
            sb[3 - lead + i] = block_bytes(q->dtype, q->stride[i]);
        }
        pc.cols = (uint32_t)q->shape[lead];
        pc.d1 = dims[1], pc.d2 = dims[2], pc.s0 = sb[0], pc.s1 = sb[1], pc.s2 = sb[2];
    }
    kiln_vk_dispatch d = {.shader = qtype(q->dtype)->dq, .n = 2, .bind = {q, t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, d.groups);
    kiln_tensor map;
    return run(vk, q->dtype, &d, &map);
}

/* ---- get_rows from a quantized table (vk_rows.c hands these over) ---- */

bool kiln__vk_quant_rows_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    return qtype(table->dtype) && t->dtype == KILN_F32 && table->ndim == 2 && kiln_tensor_is_contiguous(table) &&
           ix->dtype == KILN_I32 && kiln_tensor_is_contiguous(ix) && operand_ok(vk, table) && operand_ok(vk, ix) &&
           operand_ok(vk, t);
}

kiln_status kiln__vk_quant_rows_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    const int64_t n = kiln_tensor_numel(t);
    if (n == 0) return KILN_OK;
    struct {
        uint32_t n, d, v, q0, i0, y0, row_bytes;
    } pc = {(uint32_t)n,
            (uint32_t)table->shape[1],
            (uint32_t)table->shape[0],
            0,
            kiln__vk_base(vk, ix),
            kiln__vk_base(vk, t),
            block_bytes(table->dtype, table->shape[1])};
    kiln_status s = qbase(vk, table, &pc.q0);
    if (s) return s;
    kiln_vk_dispatch d = {
        .shader = qtype(table->dtype)->rows, .n = 3, .bind = {table, ix, t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)n, 256, d.groups);
    kiln_tensor map;
    return run(vk, table->dtype, &d, &map);
}

/* ---- qmatmul ---- */

static bool qmm_supports(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0];
    return qtype(w->dtype) && x->dtype == KILN_F32 && t->dtype == KILN_F32 && x->ndim == 2 && w->ndim == 2 &&
           kiln_tensor_is_contiguous(x) && kiln_tensor_is_contiguous(w) && kiln_tensor_is_contiguous(t) &&
           operand_ok(vk, x) && operand_ok(vk, w) && operand_ok(vk, t) &&
           (m < QMV_MB1_BELOW ? m : (m + QMV_MB - 1) / QMV_MB) <= kiln__vk_caps(vk)->max_groups[2];
}

/* The integer kernel of weight dtype t below 8 rows of x, [int_dot][fma_fused]:
 * Q8_0 and Q4_0 against int8 blocks of 32 (quant_qmv.glsl), ggml's other
 * blocks of 32 against Q8_0 / Q8_1 (quant_qmv_32.glsl) and the K types and
 * IQ4_XS against Q8_K (quant_qmv_k.glsl; those two have no fma); NULL for
 * the others. */
static const char *i8_shader(kiln_dtype t, bool dot, bool fused) {
    static const char *const q32[2][2][2] = {
        {{"qmv_i8_q8_0_sfma", "qmv_i8_q4_0_sfma"}, {"qmv_i8_q8_0", "qmv_i8_q4_0"}},
        {{"qmv_i8_q8_0_dot_sfma", "qmv_i8_q4_0_dot_sfma"}, {"qmv_i8_q8_0_dot", "qmv_i8_q4_0_dot"}}};
#define K(T, kind, t) \
    case KILN_##T: return dot ? "qmv_" #kind "_" #t "_dot" : "qmv_" #kind "_" #t;
    switch (t) {
    case KILN_Q8_0: case KILN_Q4_0: return q32[dot][fused][t == KILN_Q4_0];
    K(Q4_1, q32, q4_1) K(Q5_0, q32, q5_0) K(Q5_1, q32, q5_1) K(IQ4_NL, q32, iq4_nl)
    K(Q2_K, q8k, q2_k) K(Q3_K, q8k, q3_k) K(Q4_K, q8k, q4_k) K(Q5_K, q8k, q5_k) K(Q6_K, q8k, q6_k) K(IQ4_XS, q8k, iq4_xs)
    default: return NULL;
    }
#undef K
}

/* Weight dtypes with an i8_shader and at most QMV_I8_M rows of x: x to int8
 * codes and scales in scratch (quant_qx.comp: blocks of 32, f16 scales,
 * and Q8_1's sums for Q4_1 / Q5_1; quant_qxk.comp: Q8_K's blocks of 256,
 * f32 scales), then the integer products, the CPU's batch-1 results bit
 * for bit. */
static kiln_status qmm_i8_record(kiln_vk *vk, kiln_tensor *t, uint32_t q0) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    const bool q8k = kiln__types[w->dtype].blck == 256, ggml32 = w->dtype != KILN_Q8_0 && w->dtype != KILN_Q4_0 && !q8k;
    const int64_t blk = q8k ? 256 : 32;
    kiln_tensor sc[3]; /* x's codes (four to an i32), its scales, Q8_1's sums (quant_qx.comp binds them always) */
    kiln_status s = kiln__vk_scratch_n(vk, q8k ? 2 : 3, (const int64_t[]){m * k / 4, m * k / blk, m * k / blk},
                                       (const kiln_dtype[]){KILN_I32, KILN_F32, KILN_F32}, sc);
    if (s) return s;
    struct {
        uint32_t nblk, x0, q0, d0, s0, with_s;
    } qx = {(uint32_t)(m * k / blk), kiln__vk_base(vk, x), kiln__vk_base(vk, &sc[0]), kiln__vk_base(vk, &sc[1]),
            q8k ? 0 : kiln__vk_base(vk, &sc[2]), kiln__types[w->dtype].dot_type == KILN_Q8_1};
    kiln_vk_dispatch d = {.shader = q8k ? "quant_qxk" : "quant_qx", .n = q8k ? 3 : 4,
                          .bind = {x, &sc[0], &sc[1], &sc[2]}, .push = &qx,
                          .push_size = q8k ? 4 * sizeof(uint32_t) : sizeof qx};
    kiln__vk_groups_1d(vk, (uint64_t)(m * k / blk), 64, d.groups);
    if ((s = kiln__vk_dispatch(vk, &d))) return s;
    struct {
        uint32_t m, n, k, q0, x0, d0, y0;
    } pc = {(uint32_t)m, (uint32_t)n, (uint32_t)k, q0, qx.q0, qx.d0, kiln__vk_base(vk, t)};
    struct {
        uint32_t m, n, k, q0, x0, d0, s0, y0;
    } pc32 = {(uint32_t)m, (uint32_t)n, (uint32_t)k, q0, qx.q0, qx.d0, qx.s0, pc.y0};
    const kiln_vk_caps *c = kiln__vk_caps(vk);
    kiln_vk_dispatch mv = {.shader = i8_shader(w->dtype, c->int_dot, c->fma_fused), .n = 4,
                           .bind = {w, &sc[0], &sc[1], t}, .push = &pc, .push_size = sizeof pc};
    if (ggml32) { /* Q8_1's sums bound before y */
        mv.n = 5, mv.bind[3] = &sc[2], mv.bind[4] = t;
        mv.push = &pc32, mv.push_size = sizeof pc32;
    }
    kiln__vk_groups_1d(vk, (uint64_t)((n + QMV_I8_ROWS - 1) / QMV_I8_ROWS), 1, mv.groups);
    return kiln__vk_dispatch(vk, &mv);
}

/* From QMM_GEMM_MIN_M rows of x (a prompt): W dequantized to f32 a tile
 * of rows at a time (kiln__qgemm_tile_rows) into scratch and vk_matmul.c's
 * tiled f32 product with it, into y, or into scratch copied into y's columns
 * when W takes several tiles. llama.cpp's crossover (its GEMV kernels end
 * at 8 rows), not measured on a GPU. */
enum { QMM_GEMM_MIN_M = 8 };

/* An f32 matrix [r, c] with strides sr, sc in scratch piece p. */
static kiln_tensor mat(const kiln_tensor *p, int64_t r, int64_t c, int64_t sr, int64_t sc) {
    kiln_tensor v = *p;
    v.ndim = 2, v.shape[0] = r, v.shape[1] = c, v.stride[0] = sr, v.stride[1] = sc;
    return v;
}

/* The MATMUL node y = x . tile^T (tile [nr, k] in scratch) into c. */
static kiln_tensor gemm_node(const kiln_tensor *x, const kiln_tensor *wt, const kiln_tensor *c) {
    kiln_tensor mm = *c;
    mm.nsrc = 2, mm.src[0] = (kiln_tensor *)x, mm.src[1] = (kiln_tensor *)wt;
    mm.ip[0] = mm.ip[1] = 0;
    return mm;
}

static bool gemm_ok(const kiln_vk *vk, const kiln_tensor *t) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1], nr = kiln__qgemm_tile_rows(w->dtype, n, k, 4);
    if (m < QMM_GEMM_MIN_M || (uint64_t)(nr * k) * 4 + 256 > kiln__vk_caps(vk)->max_range ||
        (uint64_t)(m * nr) * 4 + 256 > kiln__vk_caps(vk)->max_range)
        return false;
    kiln_tensor wt = mat(x, k, nr, 1, k), c = mat(t, m, nr, nr, 1), mm = gemm_node(x, &wt, &c);
    return kiln__vk_matmul_ok(vk, &mm);
}

static kiln_status qmm_gemm_record(kiln_vk *vk, kiln_tensor *t, uint32_t q0) {
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1], rows = kiln__qgemm_tile_rows(w->dtype, n, k, 4);
    const bool tiled = rows < n, map = QTYPES[w->dtype].map;
    kiln_tensor sc[3]; /* W's tile, y's tile where W takes several, the dynamic map */
    kiln_status s = kiln__vk_scratch_n(vk, 3, (const int64_t[]){rows * k, tiled ? m * rows : 1, map ? 256 : 1},
                                       (const kiln_dtype[]){KILN_F32, KILN_F32, KILN_F32}, sc);
    if (s) return s;
    if (map) {
        float mv[256];
        kiln__dynamic_map(true, mv);
        if ((s = kiln__vk_write(vk, &sc[2], mv, sizeof mv))) return s;
    }
    for (int64_t r0 = 0; r0 < n && !s; r0 += rows) {
        const int64_t nr = n - r0 < rows ? n - r0 : rows;
        struct {
            uint32_t n, cols, q0, y0, d1, d2, s0, s1, s2;
        } dq = {(uint32_t)(nr * k), (uint32_t)(nr * k), q0 + block_bytes(w->dtype, r0 * k),
                kiln__vk_base(vk, &sc[0]), 1, 1, 0, 0, 0};
        kiln_vk_dispatch d = {.shader = QTYPES[w->dtype].dq, .n = map ? 3 : 2, .bind = {w, &sc[0], &sc[2]},
                              .push = &dq, .push_size = sizeof dq};
        kiln__vk_groups_1d(vk, (uint64_t)(nr * k), 256, d.groups);
        if ((s = kiln__vk_dispatch(vk, &d))) break;
        kiln_tensor wt = mat(&sc[0], k, nr, 1, k), c = tiled ? mat(&sc[1], m, nr, nr, 1) : *t;
        kiln_tensor mm = gemm_node(x, &wt, &c);
        if ((s = kiln__vk_matmul_unsplit(vk, &mm)) || !tiled) break;
        struct { /* mov_copy's push constants: [m, nr] into y's columns r0 .. */
            uint32_t n, ndim, x0, y0, shape[6], xs[6], ys[6];
        } cp = {(uint32_t)(m * nr), 2, kiln__vk_base(vk, &sc[1]), kiln__vk_base(vk, t) + (uint32_t)r0,
                {(uint32_t)m, (uint32_t)nr}, {(uint32_t)nr, 1}, {(uint32_t)n, 1}};
        kiln_vk_dispatch dc = {.shader = "mov_copy_b32", .n = 2, .bind = {&sc[1], t}, .push = &cp, .push_size = sizeof cp};
        kiln__vk_groups_1d(vk, (uint64_t)(m * nr), 256, dc.groups);
        s = kiln__vk_dispatch(vk, &dc);
    }
    return s;
}

static kiln_status qmm_record(kiln_vk *vk, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *w = t->src[1];
    const int64_t m = x->shape[0], n = w->shape[0], k = w->shape[1];
    if (m * n == 0) return KILN_OK;
    struct {
        uint32_t m, n, k, q0, x0, y0;
    } pc = {(uint32_t)m, (uint32_t)n, (uint32_t)k, 0, kiln__vk_base(vk, x), kiln__vk_base(vk, t)};
    kiln_status s = qbase(vk, w, &pc.q0);
    if (s) return s;
    if (gemm_ok(vk, t)) return qmm_gemm_record(vk, t, pc.q0);
    if (m <= QMV_I8_M && i8_shader(w->dtype, false, false)) return qmm_i8_record(vk, t, pc.q0);
    const bool one = m < QMV_MB1_BELOW;
    kiln_vk_dispatch d = {
        .shader = one ? qtype(w->dtype)->mv1 : qtype(w->dtype)->mv8, .n = 3, .bind = {w, x, t}, .push = &pc, .push_size = sizeof pc};
    kiln__vk_groups_1d(vk, (uint64_t)((n + QMV_ROWS - 1) / QMV_ROWS), 1, d.groups);
    d.groups[2] = (uint32_t)(one ? m : (m + QMV_MB - 1) / QMV_MB);
    kiln_tensor map;
    return run(vk, w->dtype, &d, &map);
}

void kiln__vk_register_quant(kiln_vk_kernel *tab) {
    tab[KILN_OP_DEQUANTIZE] = (kiln_vk_kernel){dq_supports, dq_record};
    tab[KILN_OP_QMATMUL] = (kiln_vk_kernel){qmm_supports, qmm_record};
}
