/* test_backend_quant.c — the cross-backend op table's quantized family
 * (harness: backend_ops_util.h): DEQUANTIZE, GET_ROWS from a quantized
 * table and QMATMUL for Q8_0, Q4_0, NF4, NF4_DQ, the nine GQ dtypes and
 * ggml's other types (Q4_1 .. IQ4_XS) on every device backend against the
 * CPU, none allowed to fall back.
 *
 * Dequantize and get_rows must equal the CPU bit for bit (tolerance 0), on
 * quantized data and on raw random blocks (every f16 scale, subnormals
 * included; every NF4 code; every code of NF4_DQ's absmax map). QMATMUL on
 * a device is compared with the CPU's f32 matmul of the dequantized weight:
 * both are f32 sums of the same products in another order, so BO_TRANS,
 * the f32 matmul tolerance, bounds it; the gradient to x (through the
 * dequantized W on both sides) too. NF4 also against the CPU's QMATMUL,
 * which stays in f32 for it. Q8_0 and Q4_0 with fewer than 8 rows of x
 * round x to int8 on the CPU and the devices alike (integer products, up
 * to ~1e-2 off the f32 matmul): those compare with the CPU's QMATMUL and
 * equal it bit for bit (tolerance 0). The GQ dtypes' blocks are odd sizes, so views
 * one block in start at odd bytes; an act-order layer (kiln_gptq_pack with
 * perm, x gathered by get_rows on its transpose) runs whole on the device.
 * Finally every quantized dtype kiln has either runs on the device or falls
 * back (kiln__vk_dtype_ok). */
#include "backend_ops_util.h"
#ifdef KILN_VULKAN /* a CUDA=1 VULKAN=0 build has this file without the Vulkan backend */
#include "../backends/vulkan/vk.h"
#endif

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

static bool is_gq(kiln_dtype t) { return t >= KILN_GQ4_32 && t <= KILN_GQ2_128; }

/* A tensor of the case's dtype holding random bytes, its scales made
 * finite: f16 d (Q8_0, Q4_0, GQ, ggml's f16 d and m / dmin) with any exponent but 31 (subnormals
 * too), NF4 absmax and NF4_DQ's offset/absmax2 normal f32 of either sign
 * in [2^-20, 2^20); a GQ zero point within its range (< 2^bits). */
static float rand_f32(uint64_t *s) {
    uint32_t u = (uint32_t)mix(s), e = 107 + (u >> 8) % 40; /* 2^-20 .. 2^19 */
    u = (u & 0x807fffffu) | e << 23;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
/* ggml's other types (Q4_1 .. IQ4_XS, in kiln_dtype's order): the byte
 * offsets of their f16 fields (0xff: none; Q8_K's d is an f32 at 0) */
static bool is_ggml(kiln_dtype t) { return t >= KILN_Q4_1 && t <= KILN_IQ4_XS; }
static const uint8_t GGML_F16[][2] = {
    {0, 2},   {0, 0xff},   {0, 2},   {0, 2},       /* Q4_1 Q5_0 Q5_1 Q8_1 */
    {80, 82}, {108, 0xff}, {0, 2},   {0, 2},       /* Q2_K Q3_K Q4_K Q5_K */
    {208, 0xff}, {0xff, 0xff}, {0, 0xff}, {0, 0xff}, /* Q6_K Q8_K IQ4_NL IQ4_XS */
};
static kiln_tensor *raw(bo_io *io, int64_t rows, int64_t cols) {
    kiln_tensor *t = kiln_tensor_new(CTX, io->dt, BO_SHAPE(rows, cols));
    if (!t) return NULL;
    uint8_t *p = kiln_tensor_data(t);
    const size_t nb = kiln_tensor_nbytes(t), bs = kiln_dtype_size(io->dt);
    uint64_t s = io->seed++;
    for (size_t i = 0; i < nb; i++) p[i] = (uint8_t)mix(&s);
    for (size_t b = 0; b < nb; b += bs) {
        if (is_ggml(io->dt)) {
            const uint8_t *f = GGML_F16[io->dt - KILN_Q4_1];
            for (int j = 0; j < 2; j++)
                if (f[j] != 0xff && (p[b + f[j] + 1] & 0x7c) == 0x7c) p[b + f[j] + 1] &= 0xbf;
            if (io->dt == KILN_Q8_K) {
                float d = rand_f32(&s);
                memcpy(p + b, &d, 4);
            }
        } else if (io->dt == KILN_Q8_0 || io->dt == KILN_Q4_0 || is_gq(io->dt)) {
            if ((p[b + 1] & 0x7c) == 0x7c) p[b + 1] &= 0xbf; /* exponent 31 -> 15 */
            const int bits = (int)((int64_t)(bs - 3) * 8 / kiln_dtype_block(io->dt));
            if (is_gq(io->dt)) p[b + 2] &= (uint8_t)((1 << bits) - 1);
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
    DQ_CASES(KILN_GQ4_32),
    DQ_CASES(KILN_GQ4_64),
    DQ_CASES(KILN_GQ4_128),
    DQ_CASES(KILN_GQ3_32),
    DQ_CASES(KILN_GQ3_64),
    DQ_CASES(KILN_GQ3_128),
    DQ_CASES(KILN_GQ2_32),
    DQ_CASES(KILN_GQ2_64),
    DQ_CASES(KILN_GQ2_128),
    /* odd block sizes (19, 27, 35 bytes): every row starts at an odd byte */
    {"dequantize_col_slice", b_dequant, KILN_GQ4_32, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_GQ3_64, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_GQ2_128, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_3d_view", b_dequant, KILN_GQ3_32, 0, BO_NO_GRAD, &K_3D},
    /* ggml's other types; rows of 20, 22, 110 or 210 bytes: views start at
     * bytes 2 mod 4 */
    DQ_CASES(KILN_Q4_1), DQ_CASES(KILN_Q5_0), DQ_CASES(KILN_Q5_1), DQ_CASES(KILN_Q8_1),
    DQ_CASES(KILN_Q2_K), DQ_CASES(KILN_Q3_K), DQ_CASES(KILN_Q4_K), DQ_CASES(KILN_Q5_K),
    DQ_CASES(KILN_Q6_K), DQ_CASES(KILN_Q8_K), DQ_CASES(KILN_IQ4_NL), DQ_CASES(KILN_IQ4_XS),
    {"dequantize_col_slice", b_dequant, KILN_Q5_0, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_Q3_K, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_col_slice", b_dequant, KILN_Q6_K, 0, BO_NO_GRAD, &K_COLS},
    {"dequantize_3d_view", b_dequant, KILN_Q4_K, 0, BO_NO_GRAD, &K_3D},
    /* DFP16 (int16 codes, an exponent per 64): CUDA's, not Vulkan's */
    {"dequantize", b_dequant, KILN_DFP16, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &K_PLAIN},
    {"dequantize_row_slice", b_dequant, KILN_DFP16, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &K_ROWS},
    {"dequantize_col_slice", b_dequant, KILN_DFP16, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, &K_COLS},
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
#define ROWS_CASES(T) {"get_rows", b_qrows, T, 0, BO_NO_GRAD, NULL}, {"get_rows_raw", b_qrows, T, 0, BO_NO_GRAD, &RAW}
    ROWS_CASES(KILN_GQ4_32), ROWS_CASES(KILN_GQ4_64), ROWS_CASES(KILN_GQ4_128),
    ROWS_CASES(KILN_GQ3_32), ROWS_CASES(KILN_GQ3_64), ROWS_CASES(KILN_GQ3_128),
    ROWS_CASES(KILN_GQ2_32), ROWS_CASES(KILN_GQ2_64), ROWS_CASES(KILN_GQ2_128),
    ROWS_CASES(KILN_Q4_1), ROWS_CASES(KILN_Q5_0), ROWS_CASES(KILN_Q5_1), ROWS_CASES(KILN_Q8_1),
    ROWS_CASES(KILN_Q2_K), ROWS_CASES(KILN_Q3_K), ROWS_CASES(KILN_Q4_K), ROWS_CASES(KILN_Q5_K),
    ROWS_CASES(KILN_Q6_K), ROWS_CASES(KILN_Q8_K), ROWS_CASES(KILN_IQ4_NL), ROWS_CASES(KILN_IQ4_XS),
#undef ROWS_CASES
    {"get_rows", b_qrows, KILN_DFP16, 0, BO_NO_GRAD | BO_MAY_FALL_BACK, NULL},
};
KT_TEST(backend_ops_quant_rows) { bo_run_cases("quant", rows_cases, BO_COUNT(rows_cases)); }

/* ---- qmatmul --------------------------------------------------------------------- */

/* From 8 rows of x CUDA multiplies x and W each rounded to f16 once (unit
 * roundoff 2^-11) with f32 sums (cu_qgemm.c): errors of up to 2^-10 of
 * each product, of random signs, against the largest output, about 3e-4
 * in the emulator; the cases of 8 rows or more hold within this (Vulkan's
 * f32 GEMM within BO_TRANS: backend_ops_qmatmul_rows). */
#define QMM_F16 1e-3

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
                     QK9 = {9, 64, 4160, false}, QKDQ = {9, 64, 2304, false}, QKDQ7 = {7, 64, 2304, false};
/* Q8_0 and Q4_0 below 8 rows: against the CPU's QMATMUL (both round x to
 * int8; the exact cases below) */
static const qmm_arg QI8_1 = {1, 37, 256, true}, QI8_3 = {3, 37, 256, true}, QI8_K1 = {1, 64, 4160, true};
#define QMM_CASES(T, A1, A3)                                                                                   \
    {"qmatmul_m1", b_qmm, T, BO_TRANS, 0, A1}, {"qmatmul_m3", b_qmm, T, BO_TRANS, 0, A3},                        \
        {"qmatmul_m8", b_qmm, T, QMM_F16, 0, &Q8}, {"qmatmul_m13", b_qmm, T, QMM_F16, 0, &Q13}

static const bo_case qmm_cases[] = {
    QMM_CASES(KILN_Q8_0, &QI8_1, &QI8_3),
    QMM_CASES(KILN_Q4_0, &QI8_1, &QI8_3),
    QMM_CASES(KILN_NF4, &Q1, &Q3),
    {"qmatmul_m1", b_qmm, KILN_NF4_DQ, BO_TRANS, 0, &QDQ1},
    {"qmatmul_m9", b_qmm, KILN_NF4_DQ, QMM_F16, 0, &QDQ9},
    {"qmatmul_long_k_m1", b_qmm, KILN_Q8_0, BO_TRANS, 0, &QI8_K1},
    {"qmatmul_long_k_m9", b_qmm, KILN_Q4_0, QMM_F16, 0, &QK9},
    {"qmatmul_long_k_m1", b_qmm, KILN_NF4, BO_TRANS, 0, &QK1},
    {"qmatmul_long_k_m9", b_qmm, KILN_NF4_DQ, QMM_F16, 0, &QKDQ},
    {"qmatmul_long_k_m7", b_qmm, KILN_NF4_DQ, BO_TRANS, 0, &QKDQ7},
    {"qmatmul_vs_cpu_qmm_m1", b_qmm, KILN_NF4, BO_TRANS, 0, &QN1},
    {"qmatmul_vs_cpu_qmm_m13", b_qmm, KILN_NF4, QMM_F16, 0, &QN13},
};
KT_TEST(backend_ops_qmatmul) { bo_run_cases("quant", qmm_cases, BO_COUNT(qmm_cases)); }

/* The GQ dtypes: batch 1 and 13 for each, 3 and 8 for one; k = 4224 (132
 * chunks of 32 a row: the lanes go round several times, unevenly); W a
 * view starting one row (3 blocks of 67 or 35 bytes) in, at an odd byte. */
static const qmm_arg QG1 = {1, 37, 384, false}, QGK1 = {1, 64, 4224, false}, QGK9 = {9, 64, 4224, false};

/* y = x . W^T with W rows 1 .. n of an [n + 1, k] weight: a contiguous view */
static kiln_tensor *b_qmm_view(bo_io *io) {
    const qmm_arg *a = io->arg;
    kiln_tensor *x = bo_in_dt(io, KILN_F32, -1, 1, BO_SHAPE(a->m, a->k));
    kiln_tensor *w = kiln_slice(CTX, qweight(io, a->n + 1, a->k), 0, 1, a->n + 1, 1);
    if (on_cpu(CTX) && !a->cpu_qmm) return kiln_matmul(CTX, x, kiln_transpose(CTX, kiln_dequantize(CTX, w), 0, 1));
    return kiln_linear(CTX, x, w, NULL);
}
#define GQ_QMM_CASES(T) {"qmatmul_m1", b_qmm, T, BO_TRANS, 0, &QG1}, {"qmatmul_m13", b_qmm, T, QMM_F16, 0, &Q13}
static const bo_case gq_qmm_cases[] = {
    GQ_QMM_CASES(KILN_GQ4_32), GQ_QMM_CASES(KILN_GQ4_64), GQ_QMM_CASES(KILN_GQ4_128),
    GQ_QMM_CASES(KILN_GQ3_32), GQ_QMM_CASES(KILN_GQ3_64), GQ_QMM_CASES(KILN_GQ3_128),
    GQ_QMM_CASES(KILN_GQ2_32), GQ_QMM_CASES(KILN_GQ2_64), GQ_QMM_CASES(KILN_GQ2_128),
    {"qmatmul_m3", b_qmm, KILN_GQ4_128, BO_TRANS, 0, &Q3},
    {"qmatmul_m8", b_qmm, KILN_GQ4_128, QMM_F16, 0, &Q8},
    {"qmatmul_long_k_m1", b_qmm, KILN_GQ4_128, BO_TRANS, 0, &QGK1},
    {"qmatmul_long_k_m9", b_qmm, KILN_GQ3_64, QMM_F16, 0, &QGK9},
    {"qmatmul_long_k_m1", b_qmm, KILN_GQ2_32, BO_TRANS, 0, &QGK1},
    {"qmatmul_w_view_m1", b_qmm_view, KILN_GQ4_128, BO_TRANS, 0, &QG1},
    {"qmatmul_w_view_m13", b_qmm_view, KILN_GQ2_128, QMM_F16, 0, &Q13},
};
#undef GQ_QMM_CASES
KT_TEST(backend_ops_qmatmul_gq) { bo_run_cases("quant", gq_qmm_cases, BO_COUNT(gq_qmm_cases)); }

/* Q8_0 and Q4_0 with few rows of x (generation): integer products on x's
 * int8 codes, equal to the CPU's QMATMUL bit for bit. Rows 1, 2 and 7 (the
 * most before the batched paths); n odd; k of 13 blocks (odd) and of 45
 * (the devices' chunks of 16 or 32 blocks, the last one short); W a view
 * one row in, so its rows start at bytes 2 mod 4 (442 or 234 bytes in). */
static const qmm_arg QI1 = {1, 37, 416, true}, QI2 = {2, 37, 416, true}, QI7 = {7, 19, 1440, true},
                     QIL = {1, 21, 1440, true};
#define QMM_INT_CASES(T)                                                                                          \
    {"qmatmul_int_m1", b_qmm, T, 0, BO_NO_GRAD, &QI1}, {"qmatmul_int_m2", b_qmm, T, 0, BO_NO_GRAD, &QI2},          \
        {"qmatmul_int_m7", b_qmm, T, 0, BO_NO_GRAD, &QI7}, {"qmatmul_int_long_k_m1", b_qmm, T, 0, BO_NO_GRAD, &QIL}, \
        {"qmatmul_int_w_view_m2", b_qmm_view, T, 0, BO_NO_GRAD, &QI2}
/* The K types and IQ4_XS against Q8_K, the same way: k of 3 and 9
 * super-blocks, and 17 (the devices' steps of 16 blocks, the last one
 * short); the views' rows of Q6_K and Q3_K start at bytes 2 mod 4. */
static const qmm_arg QIK1 = {1, 37, 768, true}, QIK2 = {2, 37, 768, true}, QIK7 = {7, 19, 2304, true},
                     QIKL = {1, 21, 4352, true};
#define QMM_INT_K_CASES(T)                                                                                           \
    {"qmatmul_int_m1", b_qmm, T, 0, BO_NO_GRAD, &QIK1}, {"qmatmul_int_m2", b_qmm, T, 0, BO_NO_GRAD, &QIK2},            \
        {"qmatmul_int_m7", b_qmm, T, 0, BO_NO_GRAD, &QIK7}, {"qmatmul_int_long_k_m1", b_qmm, T, 0, BO_NO_GRAD, &QIKL}, \
        {"qmatmul_int_w_view_m2", b_qmm_view, T, 0, BO_NO_GRAD, &QIK2}
/* ggml's other blocks of 32 against Q8_0 / Q8_1 as Q8_0's, and k of 24
 * blocks: whole groups of 8, the CPU's lanes only */
#define QMM_INT_32_CASES(T) QMM_INT_CASES(T), {"qmatmul_int_lanes_only_m2", b_qmm, T, 0, BO_NO_GRAD, &QIK2}
static const bo_case qmm_int_cases[] = {
    QMM_INT_CASES(KILN_Q8_0),    QMM_INT_CASES(KILN_Q4_0),   QMM_INT_K_CASES(KILN_Q4_K), QMM_INT_K_CASES(KILN_Q6_K),
    QMM_INT_K_CASES(KILN_Q5_K),  QMM_INT_K_CASES(KILN_IQ4_XS), QMM_INT_32_CASES(KILN_Q4_1), QMM_INT_32_CASES(KILN_Q5_0),
    QMM_INT_32_CASES(KILN_Q5_1), QMM_INT_32_CASES(KILN_IQ4_NL), QMM_INT_K_CASES(KILN_Q2_K), QMM_INT_K_CASES(KILN_Q3_K)};
#undef QMM_INT_CASES
#undef QMM_INT_K_CASES
#undef QMM_INT_32_CASES
KT_TEST(backend_ops_qmatmul_int) { bo_run_cases("quant", qmm_int_cases, BO_COUNT(qmm_int_cases)); }
/* The same on Vulkan without the packed dot products (a device without
 * shaderIntegerDotProduct); each test is a process, so this backend is new. */
KT_TEST(backend_ops_qmatmul_int_plain) {
    setenv("KILN_VULKAN_NO_INT_DOT", "1", 1);
    bo_run_cases("quant", qmm_int_cases, BO_COUNT(qmm_int_cases));
}

/* ggml's weight types: batch 1 and 13 for each (k = 512: two
 * super-blocks), 3 and 8 for two; k = 4352 (17 super-blocks, 272 or 136
 * sub-blocks a row: the lanes go round unevenly); W a view one row in.
 * Below 8 rows against the CPU's QMATMUL (both quantize x: the integer
 * cases above), but for Q8_1 as a weight, which the devices multiply in f32. */
static const qmm_arg QK256_1 = {1, 37, 512, true}, QK256_13 = {13, 37, 512, false}, QK256_3 = {3, 37, 512, true},
                     QK256_8 = {8, 37, 512, false}, QKL1 = {1, 64, 4352, true}, QKL9 = {9, 64, 4352, false},
                     QK256_1F = {1, 37, 512, false};
#define GG_QMM_CASES(T) {"qmatmul_m1", b_qmm, T, BO_TRANS, 0, &QK256_1}, {"qmatmul_m13", b_qmm, T, QMM_F16, 0, &QK256_13}
static const bo_case ggml_qmm_cases[] = {
    GG_QMM_CASES(KILN_Q4_1), GG_QMM_CASES(KILN_Q5_0), GG_QMM_CASES(KILN_Q5_1), GG_QMM_CASES(KILN_Q2_K),
    GG_QMM_CASES(KILN_Q3_K), GG_QMM_CASES(KILN_Q4_K), GG_QMM_CASES(KILN_Q5_K), GG_QMM_CASES(KILN_Q6_K),
    GG_QMM_CASES(KILN_IQ4_NL), GG_QMM_CASES(KILN_IQ4_XS),
    /* the activation types, should a weight be stored in one */
    {"qmatmul_m1", b_qmm, KILN_Q8_1, BO_TRANS, 0, &QK256_1F}, {"qmatmul_m13", b_qmm, KILN_Q8_K, QMM_F16, 0, &QK256_13},
    {"qmatmul_m3", b_qmm, KILN_Q4_K, BO_TRANS, 0, &QK256_3},
    {"qmatmul_m8", b_qmm, KILN_Q6_K, QMM_F16, 0, &QK256_8},
    {"qmatmul_long_k_m1", b_qmm, KILN_Q4_K, BO_TRANS, 0, &QKL1},
    {"qmatmul_long_k_m9", b_qmm, KILN_Q6_K, QMM_F16, 0, &QKL9},
    {"qmatmul_long_k_m1", b_qmm, KILN_Q3_K, BO_TRANS, 0, &QKL1},
    {"qmatmul_w_view_m1", b_qmm_view, KILN_Q3_K, BO_TRANS, 0, &QK256_1},
    {"qmatmul_w_view_m13", b_qmm_view, KILN_Q5_0, QMM_F16, 0, &QK256_13},
};
#undef GG_QMM_CASES
KT_TEST(backend_ops_qmatmul_ggml) { bo_run_cases("quant", ggml_qmm_cases, BO_COUNT(ggml_qmm_cases)); }

/* ---- many rows (prompts) --------------------------------------------------------- */

/* Every block dtype at m = 1 and 7 (the GEMV kernels) and 8, 64 and 129
 * (from the devices' crossover at 8 rows: W dequantized into scratch and
 * a GEMM). Below 8 rows the dtypes with integer kernels are compared with
 * the CPU's QMATMUL (both round x to int8), the rest with the f32 matmul
 * of the dequantized W at BO_TRANS. From 8 rows all with that f32 matmul:
 * on Vulkan at BO_TRANS (W dequantized to f32, the f32 tiled matmul), on
 * CUDA at QMM_F16 (x and W in f16; the CPU's batched int8 path is ~1e-2
 * off). n = 37 (odd; NF4_DQ 32: whole super-blocks), k = 512 (two
 * super-blocks). */
static const kiln_dtype ROWS_TYPES[] = {
    KILN_Q8_0,  KILN_Q4_0,   KILN_Q4_1,   KILN_Q5_0,   KILN_Q5_1,   KILN_Q8_1,   KILN_Q2_K,   KILN_Q3_K,  KILN_Q4_K,
    KILN_Q5_K,  KILN_Q6_K,   KILN_Q8_K,   KILN_IQ4_NL, KILN_IQ4_XS, KILN_NF4,    KILN_NF4_DQ, KILN_GQ4_32,
    KILN_GQ4_64, KILN_GQ4_128, KILN_GQ3_32, KILN_GQ3_64, KILN_GQ3_128, KILN_GQ2_32, KILN_GQ2_64, KILN_GQ2_128};
enum { N_ROWS_TYPES = sizeof ROWS_TYPES / sizeof *ROWS_TYPES, N_ROWS_M = 5 };
static const int64_t ROWS_M[N_ROWS_M] = {1, 7, 8, 64, 129};
static const char *const ROWS_NAMES[N_ROWS_M] = {"qmatmul_rows_m1", "qmatmul_rows_m7", "qmatmul_rows_m8",
                                                 "qmatmul_rows_m64", "qmatmul_rows_m129"};

/* Weight dtypes whose products below 8 rows round x to int8 (cpu, cuda and vulkan alike) */
static bool int8_below_8(kiln_dtype t) {
    return t == KILN_Q8_0 || t == KILN_Q4_0 || (is_ggml(t) && t != KILN_Q8_1 && t != KILN_Q8_K);
}

/* The case of dtype t at m rows on backend bn, its qmm_arg in *a. */
static bo_case rows_case(kiln_dtype t, int im, const char *bn, qmm_arg *a) {
    const int64_t m = ROWS_M[im];
    *a = (qmm_arg){m, t == KILN_NF4_DQ ? 32 : 37, 512, m < 8 && int8_below_8(t)};
    const double tol = m >= 8 && !strcmp(bn, "cuda") ? QMM_F16 : BO_TRANS;
    return (bo_case){ROWS_NAMES[im], b_qmm, t, tol, BO_NO_GRAD, a};
}

KT_TEST(backend_ops_qmatmul_rows) {
    kiln_backend *bs[BO_MAX_BACKENDS];
    static qmm_arg args[N_ROWS_TYPES * N_ROWS_M];
    static bo_case cases[N_ROWS_TYPES * N_ROWS_M];
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) {
        int n = 0;
        for (int t = 0; t < N_ROWS_TYPES; t++)
            for (int im = 0; im < N_ROWS_M; im++, n++)
                cases[n] = rows_case(ROWS_TYPES[t], im, kiln_backend_name(bs[i]), &args[n]);
        bo_run_cases_on("quant", cases, n, bs[i]);
    }
}

/* Beyond f16's range: x up to 1e5, or W of raw Q8_0 blocks (scales up to
 * 2^15, values up to 2^22). CUDA redoes such products in f32, so these
 * hold at BO_TRANS. */
static kiln_tensor *b_qmm_big(bo_io *io) {
    const qmm_arg *a = io->arg;
    const bool raw_w = io->dt == KILN_Q8_0;
    kiln_tensor *x = bo_in_dt(io, KILN_F32, raw_w ? -1 : -1e5, raw_w ? 1 : 1e5, BO_SHAPE(a->m, a->k));
    kiln_tensor *w = raw_w ? raw(io, a->n, a->k) : qweight(io, a->n, a->k);
    if (on_cpu(CTX)) return kiln_matmul(CTX, x, kiln_transpose(CTX, kiln_dequantize(CTX, w), 0, 1));
    return kiln_linear(CTX, x, w, NULL);
}

/* The same at 64 rows with W in tiles of a few rows (CUDA's
 * $KILN_QGEMM_TILE_BYTES: 4 rows of 512 a tile, the last of 37 rows
 * short; NF4_DQ's tiles 32 rows, whole super-blocks), and beyond f16. */
KT_TEST(backend_ops_qmatmul_rows_tiled) {
    setenv("KILN_QGEMM_TILE_BYTES", "4096", 1);
    static const kiln_dtype types[] = {KILN_Q4_0, KILN_Q6_K, KILN_NF4_DQ, KILN_GQ3_64};
    enum { NT = sizeof types / sizeof *types };
    static const qmm_arg big = {64, 37, 512, false};
    kiln_backend *bs[BO_MAX_BACKENDS];
    qmm_arg args[NT];
    bo_case cases[NT + 2] = {[NT] = {"qmatmul_rows_big_x_m64", b_qmm_big, KILN_Q4_K, BO_TRANS, BO_NO_GRAD, &big},
                             {"qmatmul_rows_big_w_m64", b_qmm_big, KILN_Q8_0, BO_TRANS, BO_NO_GRAD, &big}};
    int nb = bo_backends(bs);
    for (int i = 0; i < nb; i++) {
        for (int t = 0; t < NT; t++) {
            cases[t] = rows_case(types[t], 3, kiln_backend_name(bs[i]), &args[t]);
            if (types[t] == KILN_NF4_DQ) args[t].n = 64;
        }
        bo_run_cases_on("quant", cases, NT + 2, bs[i]);
    }
}

/* ---- an act-order GPTQ layer ---------------------------------------------------- */

/* W [n, k] (uniform, seeded) quantized by RTN in the order of a random
 * permutation of its columns, as GPTQ with act order leaves it (codes in
 * the original column order, g_idx following perm), so that kiln_gptq_pack
 * stores the columns permuted and returns perm (a [k] i32 leaf). */
static kiln_tensor *act_order_weight(bo_io *io, int64_t n, int64_t k, kiln_tensor **perm) {
    const int bits = (int)((int64_t)(kiln_dtype_size(io->dt) - 3) * 8 / kiln_dtype_block(io->dt));
    float *w = malloc((size_t)(n * k) * sizeof *w), *wp = malloc((size_t)(n * k) * sizeof *wp);
    int32_t *pm = malloc((size_t)k * sizeof *pm);
    uint8_t *codes = malloc((size_t)(n * k));
    kiln_tensor *t = NULL;
    uint64_t s = io->seed++;
    if (!w || !wp || !pm || !codes) goto done;
    for (int64_t i = 0; i < n * k; i++) w[i] = (float)((double)(mix(&s) >> 11) * 0x1p-52 - 1.0);
    for (int64_t c = 0; c < k; c++) pm[c] = (int32_t)c;
    for (int64_t c = k - 1; c > 0; c--) {
        int64_t j = (int64_t)(mix(&s) % (uint64_t)(c + 1));
        int32_t x = pm[c];
        pm[c] = pm[j], pm[j] = x;
    }
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) wp[i * k + c] = w[i * k + pm[c]];
    kiln_gptq_config cfg = kiln_gptq_defaults();
    cfg.bits = bits, cfg.group_size = kiln_dtype_block(io->dt);
    kiln_gptq_result *r = kiln_rtn_quantize(wp, n, k, &cfg);
    if (!r) goto done;
    for (int64_t i = 0; i < n; i++)
        for (int64_t c = 0; c < k; c++) codes[i * k + pm[c]] = r->codes[i * k + c];
    memcpy(r->codes, codes, (size_t)(n * k));
    for (int64_t c = 0; c < k; c++) r->g_idx[pm[c]] = (int32_t)(c / r->group_size), r->perm[c] = pm[c];
    t = kiln_gptq_pack(CTX, r, io->dt, perm);
    kiln_gptq_result_free(r);
done:
    free(w), free(wp), free(pm), free(codes);
    return t;
}

/* y = x[:, perm] . W^T, x[:, perm] = get_rows on x's transpose (kiln.h's
 * recipe); on the CPU with the f32 matmul of dequantize(W). */
static kiln_tensor *b_act_order(bo_io *io) {
    const qmm_arg *a = io->arg;
    kiln_tensor *perm = NULL, *w = act_order_weight(io, a->n, a->k, &perm);
    if (!w || !perm) return NULL;
    kiln_tensor *x = bo_in_dt(io, KILN_F32, -1, 1, BO_SHAPE(a->m, a->k));
    kiln_tensor *xp = kiln_transpose(CTX, kiln_get_rows(CTX, kiln_transpose(CTX, x, 0, 1), perm), 0, 1);
    if (on_cpu(CTX)) return kiln_matmul(CTX, xp, kiln_transpose(CTX, kiln_dequantize(CTX, w), 0, 1));
    return kiln_linear(CTX, xp, w, NULL);
}
static const qmm_arg QA1 = {1, 48, 512, false}, QA9 = {9, 48, 512, false};
static const bo_case act_cases[] = {
    {"act_order_m1", b_act_order, KILN_GQ4_128, BO_TRANS, 0, &QA1},
    {"act_order_m9", b_act_order, KILN_GQ4_128, QMM_F16, 0, &QA9},
    {"act_order_m1", b_act_order, KILN_GQ3_32, BO_TRANS, 0, &QA1},
    {"act_order_m9", b_act_order, KILN_GQ2_64, QMM_F16, 0, &QA9},
};
KT_TEST(backend_ops_qmatmul_act_order) { bo_run_cases("quant", act_cases, BO_COUNT(act_cases)); }

/* ---- the fallback rule -------------------------------------------------------------- */

/* Every quantized dtype: zero blocks dequantized on each device backend
 * give the CPU's zeros, on the device where kiln__vk_dtype_ok says it has
 * kernels, on the CPU (one fallback node) where it says not. Every block
 * dtype kiln has now has Vulkan kernels, GQ's included; the fallback half
 * is for the next one added before its shaders. */
#ifdef KILN_VULKAN
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
#endif
