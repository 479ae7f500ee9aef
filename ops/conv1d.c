/* conv1d.c — 1-D convolution as kiln_conv2d over an image one row high:
 * x [N, C, L] -> [N, C, 1, L], w [O, C/G, k] -> [O, C/G, 1, k], so it
 * takes conv2d's paths (and their backward rules) on every backend. The
 * causal mode pads dilation * (k - 1) zeros on the left only (kiln_pad),
 * so output t sees inputs up to t, as WaveNet's and a decoder's
 * convolutions need. */
#include "internal.h"

kiln_tensor *kiln_conv1d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv1d_params *p) {
    static const char who[] = "kiln_conv1d";
    char sx[96], sw[96];
    kiln_conv1d_params z = {0};
    if (!x || !w) return NULL;
    if (!p) p = &z;
    if (x->ndim != 3 || w->ndim != 3)
        return kiln__err(KILN_ERR_SHAPE, "%s: x %s and w %s must both be 3-D ([N, C, L] and [O, C/groups, k])", who,
                         kiln__shape_str(x, sx), kiln__shape_str(w, sw));
    if (p->stride < 0 || p->padding < 0 || p->dilation < 0 || p->groups < 0)
        return kiln__err(KILN_ERR_ARG, "%s: negative parameter (stride %d, padding %d, dilation %d, groups %d)", who,
                         p->stride, p->padding, p->dilation, p->groups);
    if (p->causal && p->padding)
        return kiln__err(KILN_ERR_ARG, "%s: causal pads on the left by itself; padding %d must be 0", who, p->padding);
    int64_t n = x->shape[0], c = x->shape[1], l = x->shape[2], k = w->shape[2], dil = p->dilation ? p->dilation : 1;
    if (p->causal) {
        int64_t left;
        if (!kiln__mul_ok(dil, k - 1, &left))
            return kiln__err(KILN_ERR_ARG, "%s: dilation %lld and kernel %lld pad past int64", who, (long long)dil,
                             (long long)k);
        x = kiln_pad(ctx, x, (const int64_t[]){0, 0, 0, 0, left, 0}, 0.0);
        l = x ? x->shape[2] : 0;
    }
    kiln_conv2d_params q = {.stride = {1, p->stride}, .padding = {0, p->padding}, .dilation = {1, (int)dil},
                            .groups = p->groups};
    kiln_tensor *y = kiln_conv2d(ctx, kiln_reshape(ctx, x, 4, (int64_t[]){n, c, 1, l}),
                                 kiln_reshape(ctx, w, 4, (int64_t[]){w->shape[0], w->shape[1], 1, k}), bias, &q);
    if (!y) return kiln__err_context("%s", who), NULL;
    return kiln_reshape(ctx, y, 3, (int64_t[]){n, y->shape[1], y->shape[3]});
}
