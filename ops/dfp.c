/* dfp.c — the DFP matmul op (Das et al. 2018): C = op(A) op(B) of f32
 * tensors computed in INT16 dynamic fixed point (quant/dfp.h): each operand
 * is quantized inside the kernel to 14-bit integers with one exponent for
 * the whole operand, the products are summed in INT32 chunks that cannot
 * overflow and folded into f32 (backends/cpu/gemm_dfp.h). Its backward is
 * written once, with the same op, so the backward-data and backward-weight
 * GEMMs of a layer run in DFP too; everything else in the graph (biases,
 * activations, losses, the optimizer's master weights) stays f32.
 *
 * Why 14 bits and not 16: the INT32 chunk length is set by the largest
 * codes; with 14-bit operands a chunk is 32 products (16 vpdpwssd), with
 * full 16-bit ones a single pair. 14 bits keep the relative rounding error
 * of the largest value below 2^-13, far below what training notices (bf16
 * has 2^-8), and cost one conversion per 16 multiply-add instructions. */
#include "internal.h"

#include <string.h>

static kiln_tensor *contig2(kiln_ctx *ctx, kiln_tensor *t) {
    return kiln_tensor_is_contiguous(t) ? t : kiln__contig(ctx, t);
}

/* The node: b's stored shape is brows x bcols (B [k, n], or [n, k] when
 * transposed); geo (g[8], oh, ow) when B is im2col_cn of b. */
static kiln_tensor *node(kiln_ctx *ctx, const char *who, kiln_tensor *a, bool trans_a, kiln_tensor *b, bool trans_b,
                         int64_t brows, int64_t bcols, const int64_t *geo) {
    char sa[96], sb[96];
    if (!ctx) return kiln__err(KILN_ERR_ARG, "%s: ctx is NULL", who);
    if (!a || !b) return NULL;
    if (a->dtype != KILN_F32 || b->dtype != KILN_F32)
        return kiln__err(KILN_ERR_DTYPE, "%s: needs f32 operands, not %s and %s", who, kiln_dtype_name(a->dtype),
                         kiln_dtype_name(b->dtype));
    if (a->ndim != 2 || b->ndim != (geo ? 4 : 2))
        return kiln__err(KILN_ERR_SHAPE, "%s: operands must be 2-D%s, got a %s and b %s", who,
                         geo ? " and an image" : "", kiln__shape_str(a, sa), kiln__shape_str(b, sb));
    int64_t m = a->shape[trans_a ? 1 : 0], ka = a->shape[trans_a ? 0 : 1];
    int64_t kb = trans_b ? bcols : brows, n = trans_b ? brows : bcols;
    if (ka != kb)
        return kiln__err(KILN_ERR_SHAPE, "%s: inner dims differ: a %s%s has K = %lld, b %s%s has K = %lld", who,
                         kiln__shape_str(a, sa), trans_a ? " (transposed)" : "", (long long)ka,
                         kiln__shape_str(b, sb), trans_b ? " (transposed)" : "", (long long)kb);
    if (!kiln__shape_check(who, 2, (int64_t[]){m, n})) return NULL;
    kiln_tensor *src[2] = {contig2(ctx, a), contig2(ctx, b)};
    if (!src[0] || !src[1]) return NULL;
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_DFP_MATMUL, KILN_F32, 2, (int64_t[]){m, n}, 2, src);
    if (t) {
        t->ip[0] = trans_a;
        t->ip[1] = trans_b;
        t->ip[2] = geo != NULL;
        if (geo) memcpy(t->ip + 3, geo, 10 * sizeof *geo);
    }
    return t;
}

kiln_tensor *kiln_dfp_matmul_t(kiln_ctx *ctx, kiln_tensor *a, bool trans_a, kiln_tensor *b, bool trans_b) {
    return node(ctx, "kiln_dfp_matmul_t", a, trans_a, b, trans_b, b && b->ndim == 2 ? b->shape[0] : 0,
                b && b->ndim == 2 ? b->shape[1] : 0, NULL);
}

/* Why a variant and not quantize(im2col(x)): x holds 1/(kh kw) of the
 * columns' values, so quantizing it and gathering int16 codes (half the
 * bytes of f32) replaces an f32 im2col and a quantization of the columns.
 * The codes are those of quantize(im2col(x)) bit for bit whenever every
 * pixel of x is some tap (the padding taps are 0 and the maximum magnitude
 * is x's); when a stride skips pixels, the exponent is chosen from all of
 * x, at most the skipped values' one bit of range coarser. */
kiln_tensor *kiln__dfp_matmul_im2col(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *x, bool trans_b, const int64_t *g,
                                     int64_t oh, int64_t ow) {
    if (!x) return NULL;
    if (x->ndim != 4) return kiln__err(KILN_ERR_SHAPE, "kiln__dfp_matmul_im2col: x must be [N, C, H, W]");
    int64_t geo[10];
    memcpy(geo, g, 8 * sizeof *g);
    geo[8] = oh, geo[9] = ow;
    return node(ctx, "kiln__dfp_matmul_im2col", a, false, x, trans_b, x->shape[1] * g[0] * g[1],
                x->shape[0] * oh * ow, geo);
}

kiln_tensor *kiln_dfp_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias) {
    char sx[96], sw[96];
    if (!ctx) return kiln__err(KILN_ERR_ARG, "kiln_dfp_linear: ctx is NULL");
    if (!x || !w) return NULL;
    if (w->ndim != 2 || x->ndim < 1 || x->shape[x->ndim - 1] != w->shape[1])
        return kiln__err(KILN_ERR_SHAPE, "kiln_dfp_linear: the input %s and the weight %s ([out, in]) do not fit",
                         kiln__shape_str(x, sx), kiln__shape_str(w, sw));
    if (bias && (bias->ndim != 1 || bias->shape[0] != w->shape[0]))
        return kiln__err(KILN_ERR_SHAPE, "kiln_dfp_linear: the bias must be [%lld]", (long long)w->shape[0]);
    int64_t k = w->shape[1], m = k ? kiln_tensor_numel(x) / k : 0;
    kiln_tensor *x2 = x->ndim == 2 ? x : kiln_reshape(ctx, contig2(ctx, x), 2, (int64_t[]){m, k});
    kiln_tensor *y = kiln_dfp_matmul_t(ctx, x2, false, w, true);
    if (y && bias) y = kiln_add(ctx, y, bias);
    if (!y || x->ndim == 2) return y;
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof(int64_t) * (size_t)x->ndim);
    shape[x->ndim - 1] = w->shape[0];
    return kiln_reshape(ctx, y, x->ndim, shape);
}

/* A convolution's data gradient at stride and dilation 1, as the
 * transposed convolution of gy in DFP: with w2 = w as [O, C kh kw],
 *     dx[n, c, y, z] = sum_{o, i, j} w[o, c, i, j] gy[o, n, y + ph - i, z + pw - j]
 * one product of w as [C, O kh kw] (a permuted copy, 4608 values for the
 * CNN's conv2) and the columns of gy's codes, which the product's packer
 * reads straight from gy [O, N OH OW] (taps running back: gemm_dfp.h,
 * flip). Why not w^T gy and col2im: that product writes C kh kw x N OH OW
 * f32 columns (7.2 MB for conv2 at batch 64) that col2im then reads and
 * sums; here the sum over taps is in the product, and gy's codes are those
 * the weight gradient's product made. The result differs from the
 * columns' route only by where the f32 folds fall (within the DFP bound).
 * Node: ip[2] = 2, ip[3..10] the geometry, ip[11..12] x's H, W, ip[13..15]
 * gy's N, OH, OW. */
static kiln_tensor *conv_data_grad(kiln_ctx *ctx, kiln_tensor *w2, kiln_tensor *gy, const kiln_tensor *x,
                                   const int64_t *g) {
    const int64_t o = w2->shape[0], n = x->shape[0], c = x->shape[1], h = x->shape[2], wd = x->shape[3];
    const int64_t kk = g[0] * g[1];
    kiln_tensor *wt = kiln_reshape(ctx, w2, 3, (int64_t[]){o, c, kk});
    wt = wt ? kiln__contig(ctx, kiln_permute(ctx, wt, (const int[]){1, 0, 2})) : NULL;
    wt = wt ? kiln_reshape(ctx, wt, 2, (int64_t[]){c, o * kk}) : NULL;
    if (!wt) return NULL;
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_DFP_MATMUL, KILN_F32, 2, (int64_t[]){c, n * h * wd}, 2,
                                    (kiln_tensor *[]){wt, gy});
    if (!t) return NULL;
    t->ip[2] = 2;
    memcpy(t->ip + 3, g, 8 * sizeof *g);
    t->ip[11] = h, t->ip[12] = wd, t->ip[13] = n, t->ip[14] = g[8], t->ip[15] = g[9];
    kiln_tensor *y = kiln_reshape(ctx, t, 4, (int64_t[]){c, n, h, wd});
    return y ? kiln__contig(ctx, kiln_permute(ctx, y, (const int[]){1, 0, 2, 3})) : NULL;
}

/* As matmul's backward (ops/matmul.c), each product again a DFP matmul:
 *   A  B   : dA = G B^T     dB = A^T G
 *   A  B^T : dA = G B       dB = G^T A
 *   A^T B  : dA = B G^T     dB = A G
 *   A^T B^T: dA = B^T G^T   dB = G^T A^T */
static kiln_status dfp_matmul_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *a = node->src[0], *b = node->src[1];
    bool ta = node->ip[0], tb = node->ip[1], im = node->ip[2] == 1;
    const int64_t *g = node->ip + 3;
    if (node->ip[2] == 2)
        return kiln__errs(KILN_ERR_UNSUPPORTED,
                          "dfp_matmul: no gradient of a DFP convolution's data gradient (second order)");
    /* one contiguous G for both products: the CPU kernel quantizes each
     * operand node once per compute (backends/cpu/dfp_matmul.c), so G's
     * codes, like A's and B's from the forward, are made once and reused */
    if (!(gy = contig2(ctx, gy))) return kiln_last_status();
    if (kiln_tensor_requires_grad(a)) {
        if (im) /* B im2col_cn(x) (ta is false): dA = G B^T, or G B */
            gsrc[0] = kiln__dfp_matmul_im2col(ctx, gy, b, !tb, g, g[8], g[9]);
        else
            gsrc[0] = !ta ? kiln_dfp_matmul_t(ctx, gy, false, b, !tb) : kiln_dfp_matmul_t(ctx, b, tb, gy, true);
        if (!gsrc[0]) return kiln_last_status();
    }
    if (kiln_tensor_requires_grad(b) && im && !tb && g[2] == 1 && g[3] == 1 && g[6] == 1 && g[7] == 1) {
        if (!(gsrc[1] = conv_data_grad(ctx, a, gy, b, g))) return kiln_last_status();
    } else if (kiln_tensor_requires_grad(b)) {
        gsrc[1] = !tb ? kiln_dfp_matmul_t(ctx, a, !ta, gy, false) : kiln_dfp_matmul_t(ctx, gy, true, a, ta);
        if (gsrc[1] && im) /* the columns' gradient [C kh kw, N OH OW] summed back into x */
            gsrc[1] = kiln__col2im_cn(ctx,
                                      kiln_reshape(ctx, gsrc[1], 6,
                                                   (int64_t[]){b->shape[1], g[0], g[1], b->shape[0], g[8], g[9]}),
                                      g, b->shape[2], b->shape[3]);
        if (!gsrc[1]) return kiln_last_status();
    }
    return KILN_OK;
}

void kiln__ops_register_dfp(kiln_op_info *tab) {
    tab[KILN_OP_DFP_MATMUL] = (kiln_op_info){"dfp_matmul", KILN_KIND_KERNEL, dfp_matmul_backward};
}
