/* kiln_gptq.h — post-training weight quantization of linear layers: GPTQ
 * (second-order, from the layer's input Hessian) and round-to-nearest, in
 * the GPTQ layout (b-bit codes, per-group scale and zero point, optional
 * act-order). Part of kiln.h.
 *
 * Usage — one layer, 4 bits in groups of 128:
 *
 *     kiln_gptq *h = kiln_gptq_new(cols);
 *     kiln_gptq_add_batch(h, x, n);                 // the layer's inputs [n, cols]
 *     kiln_gptq_config c = kiln_gptq_defaults();
 *     kiln_gptq_result *r = kiln_gptq_quantize(h, w, rows, &c);
 *     kiln_gptq_result_free(r);
 *     kiln_gptq_free(h);
 */
#ifndef KILN_GPTQ_H
#define KILN_GPTQ_H

#include "kiln_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- quantization: GPTQ and RTN -------------------------------------- */
/* Weight-only integer quantization of one linear layer W [rows = out,
 * cols = in] (f32, row-major, as torch.nn.Linear) in the GPTQ layout:
 * b-bit codes q in [0, 2^b - 1] (b = 2, 3, 4 or 8), and per (row, group)
 * a scale and an integer zero point; a group is group_size consecutive
 * input columns (0, or >= cols: one group per row, "per channel"). The
 * parameters of a group are those of GPTQ's reference Quantizer
 * (IST-DASLab/gptq quant.py), maxq = 2^b - 1:
 *   xmin = min(min x, 0), xmax = max(max x, 0)
 *   symmetric: xmax = max(|xmin|, xmax); xmin = -xmax when xmin < 0
 *   xmin = xmax = 0: xmin = -1, xmax = +1
 *   scale = (xmax - xmin) / maxq
 *   zero  = (maxq + 1) / 2 symmetric, round(-xmin / scale) asymmetric
 *   q = clamp(round(x / scale) + zero, 0, maxq);  w^ = scale (q - zero)
 * round() is to nearest, ties to even (torch.round). As the reference, a
 * symmetric group with no negative value keeps xmin = 0 yet zero = 2^(b-1),
 * so its upper half saturates at (2^(b-1) - 1) scale.
 *
 * RTN rounds W to nearest in this format, each group's parameters fitted on
 * the original weights. GPTQ (Frantar et al. 2022, the reference's
 * fasterquant) quantizes column after column and spreads each column's
 * rounding error over the columns not yet quantized, weighted by the
 * inverse Hessian of the layer's calibration inputs, H = 2 X^T X / n:
 *   - kiln_gptq_add_batch accumulates H over batches X [n, cols] (the rows
 *     of all batches are the samples: H *= N / (N + n); H += 2/(N + n) X^T X)
 *   - dead columns (H_ii = 0) get H_ii = 1 and W[:, i] = 0
 *   - act_order: columns in order of descending H_ii (their groups then
 *     follow that order: g_idx maps each column to its group, perm holds it)
 *   - damping: percdamp * mean(diag H) added to the diagonal; then the
 *     upper Cholesky factor U of H^-1 (LAPACK dpotrf, dpotri, dpotrf, in
 *     double: with 1% damping H's condition number can reach 100 cols,
 *     which f32 (eps 6e-8) would turn into percent-level errors in U)
 *   - lazy blocks of block_size columns: inside a block each column's error
 *     (w - q) / U_ii updates the block's later columns at once; at the end
 *     of a block all its errors update the later columns in one product
 *   - a group's parameters are fitted when its first column comes, on the
 *     weights as updated by every earlier column (the reference's default,
 *     static_groups off; where a group starts inside a lazy block and
 *     reaches past it, the reference fits its later columns without that
 *     block's updates so far: kiln adds them, as the unblocked algorithm
 *     would. With group sizes dividing block_size the two agree.)
 *   - error: the reference's sum of (w - q)^2 / U_ii^2 / 2; it scales with H
 *     (the codes do not), and H here averages over rows of x where the
 *     reference averages over its batch dimension
 * GPTQ needs LAPACK: in a build with BLAS=0 kiln_gptq_quantize fails with
 * KILN_ERR_UNSUPPORTED (RTN, the Hessian and dequantize work everywhere).
 *
 *     kiln_gptq *h = kiln_gptq_new(cols);
 *     for (each calibration batch) kiln_gptq_add_batch(h, x, n);  // x [n, cols]
 *     kiln_gptq_config c = kiln_gptq_defaults();   // 4 bits, group 128
 *     kiln_gptq_result *r = kiln_gptq_quantize(h, w, rows, &c);
 *     kiln_gptq_dequantize(r, w_hat);              // f32 [rows, cols]
 *     kiln_gptq_result_free(r);
 *     kiln_gptq_free(h);
 */
typedef struct kiln_gptq_config {
    int bits;          /* 2, 3, 4 or 8 */
    int64_t group_size; /* columns per group; 0 (or >= cols): one per row */
    bool sym;          /* symmetric (zero fixed at 2^(bits-1)) */
    bool act_order;    /* GPTQ: columns by descending diag H */
    float percdamp;    /* GPTQ: damping, fraction of mean(diag H); >= 0 */
    int block_size;    /* GPTQ: lazy block columns, >= 1 */
} kiln_gptq_config;

/* 4 bits, group 128, asymmetric, no act order, percdamp 0.01, block 128 */
kiln_gptq_config kiln_gptq_defaults(void);

/* A quantized layer, malloc'd; free with kiln_gptq_result_free. */
typedef struct kiln_gptq_result {
    int64_t rows, cols, group_size, n_groups; /* group_size as used (cols when per row) */
    int bits;
    bool sym;
    uint8_t *codes;  /* [rows, cols], one code per byte, original column order */
    float *scales;   /* [rows, n_groups] */
    uint8_t *zeros;  /* [rows, n_groups] */
    int32_t *g_idx;  /* [cols]: the group of each column */
    int32_t *perm;   /* [cols]: column quantized k-th (identity without act order) */
    /* GPTQ: the reference's "error", sum (w - q)^2 / U_ii^2 / 2 over the
     * updated weights; RTN: sum (w - w^)^2 */
    double error;
} kiln_gptq_result;

void kiln_gptq_result_free(kiln_gptq_result *r);
/* w^ [rows, cols] = scale (q - zero) of each weight's group */
kiln_status kiln_gptq_dequantize(const kiln_gptq_result *r, float *out);
/* Round to nearest; act_order, percdamp and block_size are ignored. */
kiln_gptq_result *kiln_rtn_quantize(const float *w, int64_t rows, int64_t cols, const kiln_gptq_config *cfg);
/* r as a [rows, cols] leaf of a GQ dtype of r's bits (kiln_gptq_pack(ctx,
 * r, KILN_GQ4_128, &perm)) whose group divides r's group size and cols:
 * a per-channel result, or one of group 128 stored in GQ4_32, repeats its
 * scale and zero in every block. The scales are rounded to f16 (they must
 * be finite, > 0 and below 65520), codes and zeros kept (both <= 2^bits -
 * 1). With act order the columns are stored in r's quantization order, so
 * that each group is contiguous: *perm is then set to a new i32 [cols]
 * leaf (r->perm) and the layer computes y = x[:, perm] . W^T, x[:, perm]
 * being kiln_transpose(ctx, kiln_get_rows(ctx, kiln_transpose(ctx, x, 0,
 * 1), perm), 0, 1) for x [m, cols] (differentiable in x); without act
 * order *perm is NULL, and perm may be NULL. */
kiln_tensor *kiln_gptq_pack(kiln_ctx *ctx, const kiln_gptq_result *r, kiln_dtype dtype, kiln_tensor **perm);

/* The Hessian of one layer's inputs, [cols, cols] f32. */
typedef struct kiln_gptq kiln_gptq;
kiln_gptq *kiln_gptq_new(int64_t cols);
void kiln_gptq_free(kiln_gptq *h);
/* x [n, cols] f32: n more samples (finite; a NaN is KILN_ERR_NUMERIC). */
kiln_status kiln_gptq_add_batch(kiln_gptq *h, const float *x, int64_t n);
int64_t kiln_gptq_samples(const kiln_gptq *h);
/* Quantize w [rows, cols] (not modified) with h's inputs; h is kept, so a
 * layer can be quantized again in another format. */
kiln_gptq_result *kiln_gptq_quantize(const kiln_gptq *h, const float *w, int64_t rows, const kiln_gptq_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* KILN_GPTQ_H */
