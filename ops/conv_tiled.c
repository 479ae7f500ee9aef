/* conv_tiled.c — kiln_conv2d as one node on the host, so that the graph
 * keeps only the layer's input, not its im2col columns.
 *
 * KILN_OP_CONV2D: src x [N, C, H, W] (contiguous), w [O, K = C*kh*kw]
 *   (contiguous) -> [O, N, OH, OW] = w @ im2col_cn(x): the product the
 *   decomposition in ops/conv.c makes, in the same layout, so that the
 *   permute, the bias add and a max-pool read it alike. ip[0..9] as IM2COL
 *   (kernel, stride, padding, dilation, H, W); OH x OW is the node's
 *   shape[2..3].
 * Its backward: KILN_OP_CONV2D_GRAD_X (w, gy) -> gx = col2im_cn(w^T gy)
 *   and KILN_OP_CONV2D_GRAD_W (x, gy) -> gw [O, K] = gy im2col_cn(x)^T.
 * The CPU runs all three a tile of output pixels at a time, the tile's
 * columns in a scratch bounded by the tile (backends/cpu/conv_tiled.c);
 * whole-batch columns exist in neither direction (3x3 stride-1 f32 layers:
 * forward and grad x by Winograd, backends/cpu/winograd.h). The second derivative
 * is kiln__vjp of the decomposition (matmul, im2col, col2im).
 *
 * kiln_conv2d builds this node for groups 1 on a context whose backend is
 * the host; a device context gets the decomposition, which Vulkan and
 * CUDA run. */
#include "internal.h"
#include "nn_ops.h"

/* A node of op over src with conv2d's geometry g (8 entries) and image h x w. */
static kiln_tensor *conv_node(kiln_ctx *ctx, kiln_op op, int ndim, const int64_t *shape, kiln_tensor *a,
                              kiln_tensor *b, const int64_t *g, int64_t h, int64_t w) {
    kiln_tensor *src[2] = {kiln__contig(ctx, a), kiln__contig(ctx, b)};
    if (!src[0] || !src[1]) return NULL;
    kiln_tensor *t = kiln__node_new(ctx, op, a->dtype, ndim, shape, 2, src);
    if (!t) return NULL;
    memcpy(t->ip, g, 8 * sizeof *g);
    t->ip[8] = h;
    t->ip[9] = w;
    return t;
}

kiln_tensor *kiln__conv2d_node(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w2, const int64_t *g, int64_t oh,
                               int64_t ow) {
    if (!x || !w2) return NULL;
    int64_t shape[4] = {w2->shape[0], x->shape[0], oh, ow};
    return conv_node(ctx, KILN_OP_CONV2D, 4, shape, x, w2, g, x->shape[2], x->shape[3]);
}

/* The sizes of a conv node's problem, from its operands. */
typedef struct conv_dims {
    int64_t n, c, o, oh, ow, np; /* np = N*OH*OW, the GEMM's columns */
} conv_dims;

static conv_dims dims_of(const kiln_tensor *x_or_gx, const kiln_tensor *gy) {
    int64_t n = gy->shape[1], oh = gy->shape[2], ow = gy->shape[3];
    return (conv_dims){n, x_or_gx->shape[1], gy->shape[0], oh, ow, n * oh * ow};
}

static kiln_status conv2d_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0], *w = node->src[1];
    const int64_t *ip = node->ip;
    if (kiln_tensor_requires_grad(x)) {
        gsrc[0] = conv_node(ctx, KILN_OP_CONV2D_GRAD_X, 4, x->shape, w, gy, ip, ip[8], ip[9]);
        if (!gsrc[0]) return kiln_last_status();
    }
    if (kiln_tensor_requires_grad(w)) {
        gsrc[1] = conv_node(ctx, KILN_OP_CONV2D_GRAD_W, 2, w->shape, x, gy, ip, ip[8], ip[9]);
        if (!gsrc[1]) return kiln_last_status();
    }
    return KILN_OK;
}

/* gy [O, N, OH, OW] as the [O, N*OH*OW] matrix of the decomposition. */
static kiln_tensor *gy_matrix(kiln_ctx *ctx, kiln_tensor *gy, const conv_dims *d) {
    return kiln_reshape(ctx, gy, 2, (int64_t[]){d->o, d->np});
}

/* gx = col2im_cn(w^T gy), in ops (src: w, gy). */
static kiln_tensor *grad_x_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *w = node->src[0], *gy = node->src[1];
    const int64_t *ip = node->ip;
    conv_dims d = dims_of(node, gy);
    kiln_tensor *cols = kiln_matmul_t(ctx, w, true, gy_matrix(ctx, gy, &d), false);
    cols = kiln_reshape(ctx, cols, 6, (int64_t[]){d.c, ip[0], ip[1], d.n, d.oh, d.ow});
    return kiln__col2im_cn(ctx, cols, ip, ip[8], ip[9]);
}

/* gw = gy im2col_cn(x)^T, in ops (src: x, gy). */
static kiln_tensor *grad_w_reference(kiln_ctx *ctx, const kiln_tensor *node) {
    kiln_tensor *x = node->src[0], *gy = node->src[1];
    conv_dims d = dims_of(x, gy);
    kiln_tensor *cols = kiln__im2col_cn(ctx, x, node->ip, d.oh, d.ow, 0.0);
    cols = kiln_reshape(ctx, cols, 2, (int64_t[]){node->shape[1], d.np});
    return kiln_matmul_t(ctx, gy_matrix(ctx, gy, &d), false, cols, true);
}

static kiln_status grad_x_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, grad_x_reference(ctx, node), gy, gsrc);
}

static kiln_status grad_w_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    return kiln__nn_vjp_sources(ctx, node, grad_w_reference(ctx, node), gy, gsrc);
}

void kiln__ops_register_conv_tiled(kiln_op_info *tab) {
    tab[KILN_OP_CONV2D] = (kiln_op_info){"conv2d", KILN_KIND_KERNEL, conv2d_backward};
    tab[KILN_OP_CONV2D_GRAD_X] = (kiln_op_info){"conv2d_grad_x", KILN_KIND_KERNEL, grad_x_backward};
    tab[KILN_OP_CONV2D_GRAD_W] = (kiln_op_info){"conv2d_grad_w", KILN_KIND_KERNEL, grad_w_backward};
}
