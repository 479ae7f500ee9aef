/* conv.c — convolution and pooling as compositions over two primitives.
 *
 * KILN_OP_IM2COL: src[0] = x [N, C, H, W] (contiguous) -> cols
 *   [N, C, kh, kw, OH, OW] with cols[n, c, i, j, oi, oj] =
 *   x[n, c, oi*sh - ph + i*dh, oj*sw - pw + j*dw], or fp[0] (the pad value)
 *   where that position is outside the image.
 * KILN_OP_COL2IM: src[0] = cols [N, C, kh, kw, OH, OW] (contiguous) -> img
 *   [N, C, H, W], the adjoint of IM2COL with pad value 0: every tap is added
 *   into the pixel it was read from; taps outside the image are dropped.
 * Both: ip[0]=kh ip[1]=kw ip[2]=sh ip[3]=sw ip[4]=ph ip[5]=pw ip[6]=dh
 *   ip[7]=dw ip[8]=H ip[9]=W (the image size). The cols grid OH x OW is the
 *   cols tensor's shape[4..5]: usually (H + 2ph - dh*(kh-1) - 1)/sh + 1, but
 *   a transposed convolution gives it its input size instead (with
 *   output_padding the image may have rows no tap reaches).
 *
 * Each is the other's backward rule (IM2COL's pad positions are constants,
 * so they get no gradient), and every layer below is built from them plus
 * reshape, matmul, add, max and mean, so its gradient comes from those
 * rules: there is no per-layer backward code.
 *
 * Both: ip[11] = 1 (LAYOUT_CN) lays cols out as [C, kh, kw, N, OH, OW]
 *   instead (kiln__im2col_cn / kiln__col2im_cn), and each one's backward
 *   keeps the layout.
 *
 * conv2d: im2col in the CN layout -> [G, C/G*kh*kw, N*OH*OW]; w -> [G, O/G,
 *   C/G*kh*kw]; ONE matmul per group -> [O, N, OH, OW], permuted to [N, O,
 *   OH, OW] by the bias add (or a copy). Folding the batch into the GEMM's
 *   N dimension replaced N small GEMMs (K = 9 for a 1-channel 3x3: packing
 *   dominated) and made the weight gradient one GEMM over K = N*OH*OW with
 *   no [N, O, K] intermediate summed over N. On a host context (groups 1,
 *   f32/f64) the im2col and the matmul are one KILN_OP_CONV2D node instead
 *   (ops/conv_tiled.c), whose kernels never hold the whole-batch columns.
 * conv_transpose2d: w [C, O/G, kh, kw] -> [G, C/G, O/G*kh*kw]; w^T @ x per
 *   group -> cols [N, O, kh, kw, H, W]; col2im into the output image.
 * avg_pool2d: im2col (pad 0) -> [N, C, kh*kw, OH, OW]; mean over axis 2.
 *
 * max_pool2d is fused (it dominated a small CNN's training step as
 * im2col + max + the max rule's cmp/sum/div/mul + col2im): IM2COL with
 *   ip[10] = 1 (POOL_MAX) gives [N, C, OH, OW], the max over each window's
 *   taps (out-of-image taps read fp[0] = -inf); its backward is COL2IM
 *   with ip[10] = 1, src x, y (the pooled max), gy [N, C, OH, OW] -> [N, C,
 *   H, W]: each window's gy shared evenly among the taps equal to its max
 *   (torch.amax's rule, as the unfused max gave), in one pass. The second
 *   derivative is kiln__vjp of the unfused decomposition. With ip[11] = 1
 *   x is a view of [C, N, H, W] storage (a conv2d product before its
 *   permuting copy, which the pool skips) and the backward writes gx in
 *   that order, so neither direction copies the layer's activations.
 */
#include "internal.h"
#include "nn_ops.h"

#include <math.h>

/* kh, kw, sh, sw, ph, pw, dh, dw: the first 8 ip[] entries of both ops. */
enum { G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW, G_N };

static bool float_dtype(const char *who, const kiln_tensor *t) {
    if (kiln__is_compute_float(t->dtype)) return true;
    if (!kiln__not_quant(who, t)) return false;
    kiln__err(KILN_ERR_DTYPE, "%s: %s tensors are not supported (f32 or f64)", who, kiln_dtype_name(t->dtype));
    return false;
}

static bool geom_ok(const char *who, const int64_t *g) {
    for (int i = 0; i < G_N; i++)
        if (g[i] < (i == G_PH || i == G_PW ? 0 : 1)) {
            kiln__err(KILN_ERR_ARG, "%s: bad geometry kernel %lldx%lld stride %lldx%lld padding %lldx%lld dilation %lldx%lld",
                      who, (long long)g[0], (long long)g[1], (long long)g[2], (long long)g[3], (long long)g[4],
                      (long long)g[5], (long long)g[6], (long long)g[7]);
            return false;
        }
    return true;
}

static void set_ip(kiln_tensor *t, const int64_t *g, int64_t h, int64_t w) {
    memcpy(t->ip, g, G_N * sizeof *g);
    t->ip[8] = h;
    t->ip[9] = w;
}

/* The conv output size along one axis for an image of size n (< 1 when the
 * dilated kernel does not fit in the padded image). n + 2p fits easily (n a
 * dim, p an int); a dilated kernel too long for int64 fits no image. */
static int64_t out_size(int64_t n, int64_t k, int64_t s, int64_t p, int64_t d) {
    int64_t reach;
    if (!kiln__mul_ok(d, k - 1, &reach)) return 0;
    int64_t span = n + 2 * p - reach - 1;
    return span < 0 ? 0 : span / s + 1;
}

/* The transposed conv's output size (h - 1) s - 2p + d (k - 1) + op + 1
 * into *out; false when it does not fit int64. */
static bool out_size_transposed(int64_t h, int64_t k, int64_t s, int64_t p, int64_t d, int64_t op, int64_t *out) {
    int64_t a, b;
    if (!kiln__mul_ok(h - 1, s, &a) || !kiln__mul_ok(d, k - 1, &b) || !kiln__add_ok(a, b, &a)) return false;
    *out = a - 2 * p + op + 1; /* a >= 0, 2p and op below 2^32 */
    return true;
}

/* ip[11] of both ops: the cols layout (see the top). */
enum { LAYOUT_NC = 0, LAYOUT_CN = 1 };

static kiln_tensor *im2col_node(kiln_ctx *ctx, kiln_tensor *x, const int64_t *g, int64_t oh, int64_t ow, double pad,
                                int layout) {
    char sx[96];
    if (!x) return NULL;
    if (!float_dtype("im2col", x) || !geom_ok("im2col", g)) return NULL;
    if (x->ndim != 4) return kiln__err(KILN_ERR_SHAPE, "im2col: x must be [N, C, H, W], not %s", kiln__shape_str(x, sx));
    if (oh < 1 || ow < 1)
        return kiln__err(KILN_ERR_SHAPE, "im2col: empty %lldx%lld output grid for x %s", (long long)oh, (long long)ow,
                         kiln__shape_str(x, sx));
    x = kiln__contig(ctx, x);
    if (!x) return NULL;
    int64_t n = x->shape[0], c = x->shape[1];
    int64_t shape[6] = {layout ? c : n, layout ? g[G_KH] : c, layout ? g[G_KW] : g[G_KH], layout ? n : g[G_KW], oh, ow};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_IM2COL, x->dtype, 6, shape, 1, &x);
    if (!t) return NULL;
    set_ip(t, g, x->shape[2], x->shape[3]);
    t->ip[11] = layout;
    t->fp[0] = pad;
    return t;
}

static kiln_tensor *col2im_node(kiln_ctx *ctx, kiln_tensor *cols, const int64_t *g, int64_t h, int64_t w, int layout) {
    char sc[96];
    if (!cols) return NULL;
    if (!float_dtype("col2im", cols) || !geom_ok("col2im", g)) return NULL;
    if (cols->ndim != 6 || cols->shape[layout ? 1 : 2] != g[G_KH] || cols->shape[layout ? 2 : 3] != g[G_KW])
        return kiln__err(KILN_ERR_SHAPE, "col2im: cols must be %s, not %s",
                         layout ? "[C, kh, kw, N, OH, OW]" : "[N, C, kh, kw, OH, OW]", kiln__shape_str(cols, sc));
    if (h < 1 || w < 1)
        return kiln__err(KILN_ERR_SHAPE, "col2im: empty %lldx%lld image for cols %s", (long long)h, (long long)w,
                         kiln__shape_str(cols, sc));
    cols = kiln__contig(ctx, cols);
    if (!cols) return NULL;
    int64_t shape[4] = {cols->shape[layout ? 3 : 0], cols->shape[layout ? 0 : 1], h, w};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_COL2IM, cols->dtype, 4, shape, 1, &cols);
    if (!t) return NULL;
    set_ip(t, g, h, w);
    t->ip[11] = layout;
    return t;
}

/* cols of x [N, C, H, W] on an oh x ow grid with geometry g (see the top). */
kiln_tensor *kiln__im2col(kiln_ctx *ctx, kiln_tensor *x, const int64_t *g, int64_t oh, int64_t ow, double pad) {
    return im2col_node(ctx, x, g, oh, ow, pad, LAYOUT_NC);
}

/* The same taps as [C, kh, kw, N, OH, OW]: the batch inside the GEMM's N. */
kiln_tensor *kiln__im2col_cn(kiln_ctx *ctx, kiln_tensor *x, const int64_t *g, int64_t oh, int64_t ow, double pad) {
    return im2col_node(ctx, x, g, oh, ow, pad, LAYOUT_CN);
}

/* The h x w image whose im2col (geometry g) has cols' shape, summing taps. */
kiln_tensor *kiln__col2im(kiln_ctx *ctx, kiln_tensor *cols, const int64_t *g, int64_t h, int64_t w) {
    return col2im_node(ctx, cols, g, h, w, LAYOUT_NC);
}

/* Its adjoint for cols [C, kh, kw, N, OH, OW]. */
kiln_tensor *kiln__col2im_cn(kiln_ctx *ctx, kiln_tensor *cols, const int64_t *g, int64_t h, int64_t w) {
    return col2im_node(ctx, cols, g, h, w, LAYOUT_CN);
}

/* ip[10] of both ops: what they compute (see the top). */
enum { MODE_COLS = 0, MODE_POOL_MAX = 1 };

/* The max-pool's x [N, C, H, W] may be a view of [C, N, H, W] storage
 * (ip[11] = LAYOUT_CN): a convolution's [O, N, OH, OW] product permuted,
 * which the pool reads in place of the copy that would make it row-major. */
static bool planes_swapped(const kiln_tensor *v) {
    const int64_t *s = v->shape, *st = v->stride;
    return v->ndim == 4 && st[3] == 1 && st[2] == s[3] && st[0] == s[2] * s[3] && st[1] == s[0] * s[2] * s[3];
}

/* The fused max-pool's backward: gy routed to the maxima of x's windows.
 * In the CN layout gx is written in x's storage order, [C, N, H, W], and
 * handed back permuted: the convolution's gradient then needs no copy. */
static kiln_tensor *pool_max_grad(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *y, kiln_tensor *gy, const int64_t *g) {
    kiln_tensor *src[3] = {x, y, kiln__contig(ctx, gy)};
    bool cn = g[11] == LAYOUT_CN;
    int64_t shape[4] = {x->shape[cn], x->shape[!cn], x->shape[2], x->shape[3]};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_COL2IM, x->dtype, 4, shape, 3, src);
    if (!t) return NULL;
    set_ip(t, g, x->shape[2], x->shape[3]);
    t->ip[10] = MODE_POOL_MAX;
    t->ip[11] = g[11];
    return cn ? kiln_permute(ctx, t, (const int[]){1, 0, 2, 3}) : t;
}

static kiln_status im2col_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    if (node->ip[10] == MODE_POOL_MAX) gsrc[0] = pool_max_grad(ctx, x, node, gy, node->ip);
    else gsrc[0] = col2im_node(ctx, gy, node->ip, x->shape[2], x->shape[3], (int)node->ip[11]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* The routing of pool_max_grad in ops: mask the window taps equal to y,
 * share gy among them, col2im back (only gy gets a gradient through it). */
static kiln_tensor *pool_max_grad_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *x = node->src[0], *y = node->src[1], *gy = node->src[2];
    int64_t n = x->shape[0], c = x->shape[1], oh = y->shape[2], ow = y->shape[3], k = node->ip[0] * node->ip[1];
    kiln_tensor *cols = kiln_reshape(ctx, kiln__im2col(ctx, kiln_detach(ctx, x), node->ip, oh, ow, -INFINITY), 5,
                                     (int64_t[]){n, c, k, oh, ow});
    kiln_tensor *y5 = kiln_reshape(ctx, kiln_detach(ctx, y), 5, (int64_t[]){n, c, 1, oh, ow});
    kiln_tensor *mask = kiln_cmp(ctx, cols, y5, KILN_CMP_EQ);
    kiln_tensor *share = kiln_div(ctx, kiln_reshape(ctx, gy, 5, (int64_t[]){n, c, 1, oh, ow}), kiln_sum(ctx, mask, 2, true));
    kiln_tensor *g = kiln_reshape(ctx, kiln_mul(ctx, mask, share), 6, (int64_t[]){n, c, node->ip[0], node->ip[1], oh, ow});
    kiln_tensor *gx = kiln__col2im(ctx, g, node->ip, x->shape[2], x->shape[3]);
    return node->ip[11] == LAYOUT_CN ? kiln_permute(ctx, gx, (const int[]){1, 0, 2, 3}) : gx; /* the node's layout */
}

static kiln_status col2im_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (node->ip[10] == MODE_POOL_MAX) return kiln__nn_vjp_sources(ctx, node, pool_max_grad_reference(ctx, node), gy, gsrc);
    kiln_tensor *cols = node->src[0];
    if (!kiln_tensor_requires_grad(cols)) return KILN_OK;
    gsrc[0] = im2col_node(ctx, gy, node->ip, cols->shape[4], cols->shape[5], 0.0, (int)node->ip[11]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- convolutions ---- */

/* Parameters with the defaults applied. */
typedef struct conv_args {
    int64_t g[G_N]; /* kernel filled in later */
    int64_t groups, oph, opw;
} conv_args;

static bool conv_args_get(const char *who, const kiln_conv2d_params *p, conv_args *a) {
    kiln_conv2d_params z = {0};
    if (!p) p = &z;
    const int v[] = {p->stride[0], p->stride[1], p->padding[0], p->padding[1], p->dilation[0], p->dilation[1],
                     p->groups,    p->output_padding[0], p->output_padding[1]};
    for (size_t i = 0; i < sizeof v / sizeof *v; i++)
        if (v[i] < 0) {
            kiln__err(KILN_ERR_ARG,
                      "%s: negative parameter (stride %dx%d, padding %dx%d, dilation %dx%d, groups %d, output_padding %dx%d)",
                      who, v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]);
            return false;
        }
    a->g[G_SH] = p->stride[0] ? p->stride[0] : 1;
    a->g[G_SW] = p->stride[1] ? p->stride[1] : 1;
    a->g[G_PH] = p->padding[0];
    a->g[G_PW] = p->padding[1];
    a->g[G_DH] = p->dilation[0] ? p->dilation[0] : 1;
    a->g[G_DW] = p->dilation[1] ? p->dilation[1] : 1;
    a->groups = p->groups ? p->groups : 1;
    a->oph = p->output_padding[0];
    a->opw = p->output_padding[1];
    return true;
}

/* Shared checks of x, w and bias: x and w 4-D, one float dtype. */
static bool conv_inputs_ok(const char *who, const kiln_tensor *x, const kiln_tensor *w, const kiln_tensor *bias) {
    char sx[96], sw[96];
    if (!float_dtype(who, x)) return false;
    if (x->ndim != 4 || w->ndim != 4) {
        kiln__err(KILN_ERR_SHAPE, "%s: x %s and w %s must both be 4-D (NCHW)", who, kiln__shape_str(x, sx),
                  kiln__shape_str(w, sw));
        return false;
    }
    if (!w->shape[2] || !w->shape[3]) { /* torch refuses it too; empty batches and channels are fine */
        kiln__err(KILN_ERR_SHAPE, "%s: w %s has an empty kernel", who, kiln__shape_str(w, sw));
        return false;
    }
    if (w->dtype != x->dtype || (bias && bias->dtype != x->dtype)) {
        kiln__err(KILN_ERR_DTYPE, "%s: x is %s but w is %s%s%s", who, kiln_dtype_name(x->dtype), kiln_dtype_name(w->dtype),
                  bias ? " and bias is " : "", bias ? kiln_dtype_name(bias->dtype) : "");
        return false;
    }
    return true;
}

static bool bias_ok(const char *who, const kiln_tensor *bias, int64_t o, const kiln_tensor *w) {
    char sb[96], sw[96];
    if (!bias || (bias->ndim == 1 && bias->shape[0] == o)) return true;
    kiln__err(KILN_ERR_SHAPE, "%s: bias %s must be [%lld] for w %s", who, kiln__shape_str(bias, sb), (long long)o,
              kiln__shape_str(w, sw));
    return false;
}

/* The layer's output (4 dims) and the columns its product makes or reads
 * (6 dims) must both be tensors (at most 2^40 elements): refused here, so
 * that the message names the layer. */
static bool layer_fits(const char *who, const kiln_tensor *x, const int64_t *out, const int64_t *cols) {
    char sx[96], so[96], sc[96];
    int64_t n = 1, m = 1;
    bool ok = true;
    for (int i = 0; i < 6 && ok; i++) ok = kiln__mul_ok(n, cols[i], &n) && n <= KILN_MAX_NUMEL;
    for (int i = 0; i < 4 && ok; i++) ok = kiln__mul_ok(m, out[i], &m) && m <= KILN_MAX_NUMEL;
    if (!ok)
        kiln__err(KILN_ERR_SHAPE, "%s: x %s gives an output %s; it and its im2col columns %s must hold at most "
                  "2^40 elements", who, kiln__shape_str(x, sx), kiln__dims_str(4, out, so), kiln__dims_str(6, cols, sc));
    return ok;
}

static kiln_tensor *add_bias(kiln_ctx *ctx, kiln_tensor *y, kiln_tensor *bias, int64_t o) {
    if (!bias) return y;
    return kiln_add(ctx, y, kiln_reshape(ctx, bias, 4, (int64_t[]){1, o, 1, 1}));
}

/* Whether conv2d runs as one KILN_OP_CONV2D node (ops/conv_tiled.c): on a
 * context whose graphs run on the host, f32/f64, one group. Devices get
 * the decomposition below, which they run; $KILN_CONV_TILED=0 gives it to
 * the host too (tests compare both). */
static bool host_tiled(const kiln_ctx *ctx, const kiln_tensor *x, int64_t groups) {
    const char *env = getenv("KILN_CONV_TILED");
    return !ctx->backend && groups == 1 && (x->dtype == KILN_F32 || x->dtype == KILN_F64) && !(env && !strcmp(env, "0"));
}

/* dfp: the product in INT16 dynamic fixed point (kiln_dfp_matmul_t, ops/dfp.c; groups 1) */
static kiln_tensor *conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p,
                           bool dfp) {
    const char *who = dfp ? "kiln_dfp_conv2d" : "kiln_conv2d";
    char sx[96], sw[96];
    conv_args a;
    if (!x || !w) return NULL;
    if (!conv_args_get(who, p, &a) || !conv_inputs_ok(who, x, w, bias)) return NULL;
    if (a.oph || a.opw)
        return kiln__err(KILN_ERR_ARG, "%s: output_padding %lldx%lld is for kiln_conv_transpose2d only", who,
                         (long long)a.oph, (long long)a.opw);
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], wd = x->shape[3];
    int64_t o = w->shape[0], gr = a.groups;
    if (c % gr || o % gr || w->shape[1] != c / gr)
        return kiln__err(KILN_ERR_SHAPE, "%s: x %s and w %s do not fit groups=%lld (need C %% groups == 0, "
                         "O %% groups == 0, w.shape[1] == C/groups)", who, kiln__shape_str(x, sx),
                         kiln__shape_str(w, sw), (long long)gr);
    if (!bias_ok(who, bias, o, w)) return NULL;
    a.g[G_KH] = w->shape[2];
    a.g[G_KW] = w->shape[3];
    int64_t oh = out_size(h, a.g[G_KH], a.g[G_SH], a.g[G_PH], a.g[G_DH]);
    int64_t ow = out_size(wd, a.g[G_KW], a.g[G_SW], a.g[G_PW], a.g[G_DW]);
    if (oh < 1 || ow < 1)
        return kiln__err(KILN_ERR_SHAPE, "%s: kernel of w %s (dilation %lldx%lld) does not fit x %s padded by %lldx%lld",
                         who, kiln__shape_str(w, sw), (long long)a.g[G_DH], (long long)a.g[G_DW],
                         kiln__shape_str(x, sx), (long long)a.g[G_PH], (long long)a.g[G_PW]);
    if (!layer_fits(who, x, (int64_t[]){n, o, oh, ow}, (int64_t[]){c, a.g[G_KH], a.g[G_KW], n, oh, ow})) return NULL;
    int64_t k = c / gr * a.g[G_KH] * a.g[G_KW];
    if (dfp && gr != 1) return kiln__err(KILN_ERR_UNSUPPORTED, "%s: groups %lld (only 1)", who, (long long)gr);
    kiln_tensor *prod;
    if (dfp) /* the columns gathered from x's int16 codes inside the product */
        prod = kiln__dfp_matmul_im2col(ctx, kiln_reshape(ctx, w, 2, (int64_t[]){o, k}), x, false, a.g, oh, ow);
    else if (host_tiled(ctx, x, gr)) /* the columns formed a tile at a time, never stored */
        prod = kiln__conv2d_node(ctx, x, kiln_reshape(ctx, w, 2, (int64_t[]){o, k}), a.g, oh, ow);
    else {
        kiln_tensor *cols = kiln__im2col_cn(ctx, x, a.g, oh, ow, 0.0);
        cols = kiln_reshape(ctx, cols, 3, (int64_t[]){gr, k, n * oh * ow});
        prod = kiln_matmul(ctx, kiln_reshape(ctx, w, 3, (int64_t[]){gr, o / gr, k}), cols);
    }
    kiln_tensor *y = kiln_reshape(ctx, prod, 4, (int64_t[]){o, n, oh, ow});
    y = kiln_permute(ctx, y, (const int[]){1, 0, 2, 3}); /* [N, O, OH, OW], a view */
    return bias ? add_bias(ctx, y, bias, o) : kiln__contig(ctx, y);
}

kiln_tensor *kiln_conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p) {
    return conv2d(ctx, x, w, bias, p, false);
}

kiln_tensor *kiln_dfp_conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias,
                             const kiln_conv2d_params *p) {
    return conv2d(ctx, x, w, bias, p, true);
}

kiln_tensor *kiln_conv_transpose2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias,
                                   const kiln_conv2d_params *p) {
    static const char who[] = "kiln_conv_transpose2d";
    char sx[96], sw[96];
    conv_args a;
    if (!x || !w) return NULL;
    if (!conv_args_get(who, p, &a) || !conv_inputs_ok(who, x, w, bias)) return NULL;
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], wd = x->shape[3], gr = a.groups;
    if (w->shape[0] != c || c % gr)
        return kiln__err(KILN_ERR_SHAPE, "%s: x %s and w %s do not fit groups=%lld (need w.shape[0] == C and "
                         "C %% groups == 0)", who, kiln__shape_str(x, sx), kiln__shape_str(w, sw), (long long)gr);
    int64_t o = w->shape[1] * gr;
    if (!bias_ok(who, bias, o, w)) return NULL;
    /* torch's rule: output_padding only picks among outputs a stride or dilation leaves ambiguous */
    if ((a.oph >= a.g[G_SH] && a.oph >= a.g[G_DH]) || (a.opw >= a.g[G_SW] && a.opw >= a.g[G_DW]))
        return kiln__err(KILN_ERR_ARG, "%s: output_padding %lldx%lld must be smaller than stride %lldx%lld or dilation "
                         "%lldx%lld", who, (long long)a.oph, (long long)a.opw, (long long)a.g[G_SH],
                         (long long)a.g[G_SW], (long long)a.g[G_DH], (long long)a.g[G_DW]);
    a.g[G_KH] = w->shape[2];
    a.g[G_KW] = w->shape[3];
    int64_t oh, ow;
    if (!out_size_transposed(h, a.g[G_KH], a.g[G_SH], a.g[G_PH], a.g[G_DH], a.oph, &oh) ||
        !out_size_transposed(wd, a.g[G_KW], a.g[G_SW], a.g[G_PW], a.g[G_DW], a.opw, &ow))
        return kiln__err(KILN_ERR_SHAPE, "%s: stride %lldx%lld and dilation %lldx%lld give x %s and w %s an output "
                         "size past int64", who, (long long)a.g[G_SH], (long long)a.g[G_SW], (long long)a.g[G_DH],
                         (long long)a.g[G_DW], kiln__shape_str(x, sx), kiln__shape_str(w, sw));
    if (oh < 1 || ow < 1)
        return kiln__err(KILN_ERR_SHAPE, "%s: padding %lldx%lld leaves an empty %lldx%lld output for x %s and w %s", who,
                         (long long)a.g[G_PH], (long long)a.g[G_PW], (long long)oh, (long long)ow,
                         kiln__shape_str(x, sx), kiln__shape_str(w, sw));
    if (!layer_fits(who, x, (int64_t[]){n, o, oh, ow}, (int64_t[]){n, o, a.g[G_KH], a.g[G_KW], h, wd})) return NULL;
    int64_t m = o / gr * a.g[G_KH] * a.g[G_KW];
    kiln_tensor *wm = kiln_reshape(ctx, w, 3, (int64_t[]){gr, c / gr, m});
    kiln_tensor *xm = kiln_reshape(ctx, x, 4, (int64_t[]){n, gr, c / gr, h * wd});
    kiln_tensor *cols = kiln_matmul_t(ctx, wm, true, xm, false); /* [N, G, O/G*kh*kw, H*W] */
    cols = kiln_reshape(ctx, cols, 6, (int64_t[]){n, o, a.g[G_KH], a.g[G_KW], h, wd});
    kiln_tensor *y = kiln__col2im(ctx, cols, a.g, oh, ow);
    return add_bias(ctx, y, bias, o);
}

/* ---- pooling ---- */

static kiln_tensor *pool(const char *who, kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding,
                         bool is_max) {
    char sx[96];
    if (!x) return NULL;
    if (!float_dtype(who, x)) return NULL;
    if (x->ndim != 4) return kiln__err(KILN_ERR_SHAPE, "%s: x must be [N, C, H, W], not %s", who, kiln__shape_str(x, sx));
    if (kh < 1 || kw < 1 || stride < 0 || padding < 0)
        return kiln__err(KILN_ERR_ARG, "%s: bad kernel %dx%d, stride %d or padding %d", who, kh, kw, stride, padding);
    /* torch's rule; it also keeps every max-pool window from being all padding */
    if (padding > kh / 2 || padding > kw / 2)
        return kiln__err(KILN_ERR_ARG, "%s: padding %d must be at most half the kernel %dx%d", who, padding, kh, kw);
    int64_t g[G_N] = {kh, kw, stride ? stride : kh, stride ? stride : kw, padding, padding, 1, 1};
    int64_t oh = out_size(x->shape[2], kh, g[G_SH], padding, 1), ow = out_size(x->shape[3], kw, g[G_SW], padding, 1);
    if (oh < 1 || ow < 1)
        return kiln__err(KILN_ERR_SHAPE, "%s: kernel %dx%d does not fit x %s padded by %d", who, kh, kw,
                         kiln__shape_str(x, sx), padding);
    const int64_t *xs = x->shape;
    if (!layer_fits(who, x, (int64_t[]){xs[0], xs[1], oh, ow}, (int64_t[]){xs[0], xs[1], kh, kw, oh, ow})) return NULL;
    if (is_max) {
        /* a plane-permuted x is read as it lies, also through the copy
         * kiln_conv2d makes of its product (that copy then never runs
         * unless something else reads it) */
        int layout = LAYOUT_NC;
        if (x->op == KILN_OP_CONTIGUOUS && !kiln_tensor_is_contiguous(x->src[0]) && planes_swapped(x->src[0]))
            x = x->src[0];
        if (!kiln_tensor_is_contiguous(x) && planes_swapped(x)) layout = LAYOUT_CN;
        else x = kiln__contig(ctx, x);
        if (!x) return NULL;
        kiln_tensor *y = kiln__node_new(ctx, KILN_OP_IM2COL, x->dtype, 4, (int64_t[]){x->shape[0], x->shape[1], oh, ow},
                                        1, &x);
        if (!y) return NULL;
        set_ip(y, g, x->shape[2], x->shape[3]);
        y->ip[10] = MODE_POOL_MAX;
        y->ip[11] = layout;
        y->fp[0] = -INFINITY;
        return y;
    }
    kiln_tensor *cols = kiln__im2col(ctx, x, g, oh, ow, 0.0);
    cols = kiln_reshape(ctx, cols, 5, (int64_t[]){x->shape[0], x->shape[1], (int64_t)kh * kw, oh, ow});
    return kiln_mean(ctx, cols, 2, false);
}

kiln_tensor *kiln_max_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding) {
    return pool("kiln_max_pool2d", ctx, x, kh, kw, stride, padding, true);
}

kiln_tensor *kiln_avg_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding) {
    return pool("kiln_avg_pool2d", ctx, x, kh, kw, stride, padding, false);
}

void kiln__ops_register_conv(kiln_op_info *tab) {
    tab[KILN_OP_IM2COL] = (kiln_op_info){"im2col", KILN_KIND_KERNEL, im2col_backward};
    tab[KILN_OP_COL2IM] = (kiln_op_info){"col2im", KILN_KIND_KERNEL, col2im_backward};
}
