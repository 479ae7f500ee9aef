/* test_backend_quant.c — the cross-backend op table's quantized family
 * (harness: backend_ops_util.h): DEQUANTIZE, GET_ROWS from a quantized
 * table and QMATMUL for Q8_0, Q4_0, NF4 and NF4_DQ on every device backend
 * against the CPU, none allowed to fall back.
 *
 * Dequantize and get_rows must equal the CPU bit for bit (tolerance 0), on
 * quantized data and on raw random blocks (every f16 scale, subnormals
 * included; every NF4 code; every code of NF4_DQ's absmax map). QMATMUL on
 * a device is compared with the CPU's f32 matmul of the dequantized weight
 * (the CPU's own batch-1 Q8_0/Q4_0 path rounds x to int8, up to ~1e-2 off):
 * both are f32 sums of the same products in another order, so BO_TRANS,
 * the f32 matmul tolerance, bounds it; the gradient to x (through the
 * dequantized W on both sides) too. NF4 also against the CPU's QMATMUL,
 * which stays in f32 for it. Finally every quantized dtype kiln has, GPTQ's
 * included, either runs on the device or falls back (kiln__vk_dtype_ok). */
#include "backend_ops_util.h"
#include "../backends/vulkan/vk.h"

#define CTX (io->ctx)

/* splitmix64, for raw blocks */
static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* W [n, k] uniform in [-1, 1], quantized to the case's dtype. */
static kiln_tensor *qweight(bo_io *io, int64_t n, int64_t k) {
    return kiln_quantize(CTX, bo_const(io, KILN_F32, -1, 1, BO_SHAPE(n, k)), io->dt);
}

/* A tensor of the case's dtype holding random bytes, its scales made
 * finite: f16 d with any exponent but 31 (subnormals too), NF4 absmax and
 * NF4_DQ's offset/absmax2 normal f32 of either sign in [2^-20, 2^20). */
static float rand_f32(uint64_t *s) {
    uint32_t u = (uint32_t)mix(s), e = 107 + (u >> 8) % 40; /* 2^-20 .. 2^19 */
    u = (u & 0x807fffffu) | e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static kiln_tensor *raw(bo_io *io, int64_t rows, int64_t cols) {
    kiln_tensor *t = kiln_tensor_new(CTX, io->dt, BO_SHAPE(rows, cols));
    if (!t) return NULL;
    uint8_t *p = kiln_tensor_data(t);
    const size_t nb = kiln_tensor_nbytes(t), bs = kiln_dtype_size(io->dt);
    uint64_t s = io->seed++;
    for (size_t i = 0; i < nb; i++) p[i] = (uint8_t)mix(&s);
    for (size_t b = 0; b < nb; b += bs) {
        if (io->dt == KILN_Q8_0 || io->dt == KILN_Q4_0) {
            if ((p[b + 1] & 0x7c) == 0x7c) p[b + 1] &= 0xbf; /* exponent 31 -> 15 */
        } else {
            float f[2] = {rand_f32(&s), rand_f32(&s)};
            memcpy(p + b, f, io->dt == KILN_NF4 ? 4 : 8);
        }
    }
    return t;
}

/* ---- dequantize --------------------------------------------------------------- */

typedef enum { DQ_PLAIN, DQ_RAW, DQ_ROWS, DQ_COLS, DQ_3D } dq_kind;
static const dq_kind K_PLAIN = DQ_PLAIN, K_RAW = DQ_RAW, K_ROWS = DQ_ROWS, K_COLS = DQ_COLS, K_3D = DQ_3D;

static kiln_tensor *b_dequant(bo_io *io) {
    const int64_t blk = kiln_dtype_block(io->dt), cols = blk >= 1024 ? blk : 4 * blk;
    switch (*(const dq_kind *)io->arg) {
    case DQ_PLAIN: return kiln_dequantize(CTX, qweight(io, 5, cols));
    case DQ_RAW: return kiln_dequantize(CTX, raw(io, 3, cols));
    case DQ_ROWS: /* every other row from row 1: a strided view */
        return kiln_dequantize(CTX, kiln_slice(CTX, qweight(io, 9, cols), 0, 1, 9, 2));
    case DQ_COLS: /* blocks 1 and 2 of each row: starts one block in */
        return kiln_dequantize(CTX, kiln_slice(CTX, qweight(io, 6, cols), 1, blk, 3 * blk, 1));
    default: { /* a 3-D view: rows 1..12 of a [13, cols] as [2, 6, cols], every other of the 6 */
        kiln_tensor *w = kiln_slice(CTX, qweight(io, 13, cols), 0, 1, 13, 1);
        kiln_tensor *v = kiln_reshape(CTX, w, BO_SHAPE(2, 6, cols));
        return kiln_dequantize(CTX, kiln_slice(CTX, v, 1, 0, 6, 2));
    }
    }
}

/* NF4_DQ with qabsmax[k] = k: every entry of the absmax map once. */
static kiln_tensor *b_dequant_dq_map(bo_io *io) {
    kiln_tensor *t = raw(io, 1, 16384);
    if (t) {
        uint8_t *p = kiln_tensor_data(t);
        for (int k = 0; k < 256; k++) p[8 + k] = (uint8_t)k;
    }
    return kiln_dequantize(CTX, t);
}

#define DQ_CASES(T)                                                              \
    {"dequantize", b_dequant, T, 0, BO_NO_GRAD, &K_PLAIN},                       \
        {"dequantize_raw", b_dequant, T, 0, BO_NO_GRAD, &K_RAW},                 \
        {"dequantize_row_slice", b_dequant, T, 0, BO_NO_GRAD, &K_ROWS}

static const bo_case dequant_cases[] = {
    DQ_CASES(KILN_Q8_0),
    DQ_CASES(KILN_Q4_0),
    DQ_CASES(KILN_NF4),
    DQ_CASES(KILN_NF4_DQ),
    {"dequantize_col_slice", b_dequant, KILN_Q8_0, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_Q4_0, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_NF4, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_3d_view", b_dequant, KILN_Q4_0, 0, BO_NO_GRAD, &K_3D},
    {"dequantize_3d_view", b_dequant, KILN_NF4, 0, BO_NO_GRAD, &K_3D},
    {"dequantize_map", b_dequant_dq_map, KILN_NF4_DQ, 0, BO_NO_GRAD, NULL},
};
KT_TEST(backend_ops_dequantize) { bo_run_cases("quant", dequant_cases, BO_COUNT(dequant_cases)); }

/* ---- get_rows from a quantized table ----------------------------------------------- */

static kiln_tensor *b_qrows(bo_io *io) {
    const int64_t blk = kiln_dtype_block(io->dt), d = blk >= 1024 ? blk : 3 * blk, v = blk >= 1024 ? 3 : 11;
    kiln_tensor *table = io->arg ? raw(io, v, d) : qweight(io, v, d);
    return kiln_get_rows(CTX, table, bo_ints(io, KILN_I32, false, 0, (int)v - 1, BO_SHAPE(2, 5)));
}
static const int RAW = 1;
static const bo_case rows_cases[] = {
    {"get_rows", b_qrows, KILN_Q8_0, 0, BO_NO_GRAD, NULL},     {"get_rows", b_qrows, KILN_Q4_0, 0, BO_NO_GRAD, NULL},
    {"get_rows", b_qrows, KILN_NF4, 0, BO_NO_GRAD, NULL},      {"get_rows", b_qrows, KILN_NF4_DQ, 0, BO_NO_GRAD, NULL},
    {"get_rows_raw", b_qrows, KILN_Q8_0, 0, BO_NO_GRAD, &RAW}, {"get_rows_raw", b_qrows, KILN_Q4_0, 0, BO_NO_GRAD, &RAW},
    {"get_rows_raw", b_qrows, KILN_NF4, 0, BO_NO_GRAD, &RAW},  {"get_rows_raw", b_qrows, KILN_NF4_DQ, 0, BO_NO_GRAD, &RAW},
};
KT_TEST(backend_ops_quant_rows) { bo_run_cases("quant", rows_cases, BO_COUNT(rows_cases)); }

/* ---- qmatmul --------------------------------------------------------------------- */

typedef struct qmm_arg {
    int64_t m, n, k;
    bool cpu_qmm; /* the CPU side runs QMATMUL too (else f32 matmul of dequantize(W)) */
} qmm_arg;

static bool on_cpu(kiln_ctx *ctx) {
    kiln_backend *b = kiln_ctx_backend(ctx);
    return !b || !strcmp(kiln_backend_name(b), "cpu");
}

/* y = x . W^T: kiln_linear's fused QMATMUL on the device; on the CPU the
 * reference the case names. */
static kiln_tensor *b_qmm(bo_io *io) {
    const qmm_arg *a = io->arg;
    kiln_tensor *x = bo_in_dt(io, KILN_F32, -1, 1, BO_SHAPE(a->m, a->k)), *w = qweight(io, a->n, a->k);
    if (on_cpu(CTX) && !a->cpu_qmm) return kiln_matmul(CTX, x, kiln_transpose(CTX, kiln_dequantize(CTX, w), 0, 1));
    return kiln_linear(CTX, x, w, NULL);
}

/* batch 1 and 3 (generation), 8 and 13 (the batched path's sizes); 37 rows
 * (odd: a workgroup's second row idle); NF4_DQ rows that straddle its
 * super-blocks (k = 320); k = 4160 (130 or 65 scale groups a row; NF4_DQ
 * 2304, 36), so that the 32 lanes go round several times, unevenly */
static const qmm_arg Q1 = {1, 37, 256, false}, Q3 = {3, 37, 256, false}, Q8 = {8, 37, 256, false},
                     Q13 = {13, 37, 384, false}, QDQ1 = {1, 256, 320, false}, QDQ9 = {9, 256, 320, false},
                     QN1 = {1, 37, 256, true}, QN13 = {13, 37, 384, true}, QK1 = {1, 64, 4160, false},
                     QK9 = {9, 64, 4160, false}, QKDQ = {9, 64, 2304, false};
#define QMM_CASES(T)                                                                                           \
    {"qmatmul_m1", b_qmm, T, BO_TRANS, 0, &Q1}, {"qmatmul_m3", b_qmm, T, BO_TRANS, 0, &Q3},                      \
        {"qmatmul_m8", b_qmm, T, BO_TRANS, 0, &Q8}, {"qmatmul_m13", b_qmm, T, BO_TRANS, 0, &Q13}

static const bo_case qmm_cases[] = {
    QMM_CASES(KILN_Q8_0),
    QMM_CASES(KILN_Q4_0),
    QMM_CASES(KILN_NF4),
    {"qmatmul_m1", b_qmm, KILN_NF4_DQ, BO_TRANS, 0, &QDQ1},
    {"qmatmul_m9", b_qmm, KILN_NF4_DQ, BO_TRANS, 0, &QDQ9},
    {"qmatmul_long_k_m1", b_qmm, KILN_Q8_0, BO_TRANS, 0, &QK1},
    {"qmatmul_long_k_m9", b_qmm, KILN_Q4_0, BO_TRANS, 0, &QK9},
    {"qmatmul_long_k_m1", b_qmm, KILN_NF4, BO_TRANS, 0, &QK1},
    {"qmatmul_long_k_m9", b_qmm, KILN_NF4_DQ, BO_TRANS, 0, &QKDQ},
    {"qmatmul_vs_cpu_qmm_m1", b_qmm, KILN_NF4, BO_TRANS, 0, &QN1},
    {"qmatmul_vs_cpu_qmm_m13", b_qmm, KILN_NF4, BO_TRANS, 0, &QN13},
};
KT_TEST(backend_ops_qmatmul) { bo_run_cases("quant", qmm_cases, BO_COUNT(qmm_cases)); }

/* ---- the fallback rule -------------------------------------------------------------- */

/* Every quantized dtype: zero blocks dequantized on each device backend
 * give the CPU's zeros, on the device where kiln__vk_dtype_ok says it has
 * kernels, on the CPU (one fallback node) where it says not. */
KT_TEST(backend_ops_quant_fallback) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) {
        if (strcmp(kiln_backend_name(bs[i]), "vulkan")) continue;
        for (int t = 0; t < KILN_DTYPE_COUNT; t++) {
            if (!kiln_dtype_is_quantized((kiln_dtype)t)) continue;
            kiln_ctx *ctx = kiln_ctx_new();
            KT_REQUIRE(ctx && !kiln_ctx_set_backend(ctx, bs[i]), "context");
            int64_t blk = kiln_dtype_block((kiln_dtype)t);
            kiln_tensor *q = kiln_tensor_new(ctx, (kiln_dtype)t, BO_SHAPE(2, blk >= 1024 ? blk : 4 * blk));
            kiln_tensor *y = kiln_dequantize(ctx, q);
            kiln_graph *g = kiln_graph_new(ctx);
            KT_REQUIRE(y && g && !kiln_graph_add(g, y) && !kiln_graph_compute(g), "%s: %s", kiln_dtype_name(t),
                       kiln_last_error());
            kiln_graph_stats st = kiln_graph_get_stats(g);
            bool dev = kiln__vk_dtype_ok((kiln_dtype)t);
            KT_CHECK(st.nodes_fallback == (dev ? 0 : 1), "%s: %lld nodes fell back (kernels on the device: %d)",
                     kiln_dtype_name(t), (long long)st.nodes_fallback, dev);
            int64_t n = kiln_tensor_numel(y);
            double *v = malloc((size_t)n * sizeof *v), worst = 0;
            KT_REQUIRE(v && !kiln_tensor_get_f64(y, v, n), "reading back");
            for (int64_t j = 0; j < n; j++) worst = fmax(worst, fabs(v[j]));
            KT_CHECK(worst == 0, "%s: zero blocks gave %g", kiln_dtype_name(t), worst);
            free(v);
            kiln_ctx_free(ctx);
        }
    }
}
