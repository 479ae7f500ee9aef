/* resize.c — adaptive average pooling and upsampling (nearest, bilinear)
 * of x [N, C, H, W]. Each is separable: the output is A_h x A_w^T, with
 * A_h [OH, H] and A_w [OW, W] constant matrices of each axis's weights
 * (a window's 1/len, the nearest pixel's 1, or the two bilinear weights),
 * so both run as two matmuls, any backend runs them, and their gradients
 * are the matmuls' (the transposed maps). An axis whose map is the
 * identity is skipped; a global average pool is a plain mean, and
 * nearest upsampling by whole factors a broadcast copied out. */
#include "internal.h"

#include <math.h>

/* A constant [rows, cols] of x's dtype holding m (row-major). */
static kiln_tensor *matrix(kiln_ctx *ctx, const kiln_tensor *x, int64_t rows, int64_t cols, const double *m) {
    kiln_tensor *t = kiln_new_2d(ctx, x->dtype, rows, cols);
    if (t && kiln_tensor_set_f64(t, m, rows * cols)) return NULL;
    return t;
}

static bool identity(const double *m, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = 0; j < n; j++)
            if (m[i * n + j] != (i == j)) return false;
    return true;
}

/* A_h x A_w^T from the maps (freed here; NULL: out of memory), an axis
 * whose map is the identity skipped. */
static kiln_tensor *apply(const char *who, kiln_ctx *ctx, kiln_tensor *x, int64_t oh, double *ah, int64_t ow,
                          double *aw) {
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    kiln_tensor *y = x;
    if (!ah || !aw) {
        y = kiln__err(KILN_ERR_OOM, "%s: out of memory", who);
        goto done;
    }
    if (!(ow == w && identity(aw, w))) { /* [N*C*H, W] @ A_w^T */
        kiln_tensor *m = matrix(ctx, x, ow, w, aw);
        y = kiln_matmul_t(ctx, kiln_reshape(ctx, y, 2, (int64_t[]){n * c * h, w}), false, m, true);
    }
    if (!(oh == h && identity(ah, h))) /* A_h @ [N*C, H, OW], A_h shared over the batch */
        y = kiln_matmul(ctx, matrix(ctx, x, oh, h, ah), kiln_reshape(ctx, y, 3, (int64_t[]){n * c, h, ow}));
    y = y == x ? kiln_contiguous(ctx, x) : kiln_reshape(ctx, y, 4, (int64_t[]){n, c, oh, ow});
done:
    free(ah);
    free(aw);
    return y;
}

/* Each map is at most out * in doubles, both below 2^24 here. */
#define RESIZE_MAX_SIDE ((int64_t)1 << 24)
#define RESIZE_MAX_MAP ((int64_t)1 << 26)

static bool sizes_ok(const char *who, const kiln_tensor *x, int64_t oh, int64_t ow) {
    char sx[96];
    if (!x) return false;
    if (!kiln__is_compute_float(x->dtype)) {
        if (!kiln__not_quant(who, x)) return false;
        kiln__err(KILN_ERR_DTYPE, "%s: x is %s; needs f32 or f64", who, kiln_dtype_name(x->dtype));
        return false;
    }
    if (x->ndim != 4) {
        kiln__err(KILN_ERR_SHAPE, "%s: x must be [N, C, H, W], not %s", who, kiln__shape_str(x, sx));
        return false;
    }
    if (oh < 1 || ow < 1 || oh > RESIZE_MAX_SIDE || ow > RESIZE_MAX_SIDE || oh * x->shape[2] > RESIZE_MAX_MAP ||
        ow * x->shape[3] > RESIZE_MAX_MAP || !x->shape[2] || !x->shape[3]) {
        kiln__err(KILN_ERR_SHAPE, "%s: output %lldx%lld for x %s: each side from 1 to 2^24, an image of at least 1x1, "
                  "and output times input side at most 2^26", who, (long long)oh, (long long)ow,
                  kiln__shape_str(x, sx));
        return false;
    }
    return true;
}

/* ---- adaptive average pooling ---- */

/* torch's windows: output i averages inputs floor(i*in/out) .. ceil((i+1)*in/out) - 1. */
static double *pool_map(int64_t out, int64_t in) {
    double *m = kiln__calloc((size_t)(out * in), sizeof *m);
    for (int64_t i = 0; m && i < out; i++) {
        int64_t s = i * in / out, e = ((i + 1) * in + out - 1) / out;
        for (int64_t j = s; j < e; j++) m[i * in + j] = 1.0 / (double)(e - s);
    }
    return m;
}

kiln_tensor *kiln_adaptive_avg_pool2d(kiln_ctx *ctx, kiln_tensor *x, int64_t oh, int64_t ow) {
    static const char who[] = "kiln_adaptive_avg_pool2d";
    if (!sizes_ok(who, x, oh, ow)) return NULL;
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    if (oh == 1 && ow == 1) /* the global pool before a classifier */
        return kiln_reshape(ctx, kiln_mean(ctx, kiln_reshape(ctx, x, 3, (int64_t[]){n, c, h * w}), 2, false), 4,
                            (int64_t[]){n, c, 1, 1});
    return apply(who, ctx, x, oh, pool_map(oh, h), ow, pool_map(ow, w));
}

/* ---- upsampling ---- */

/* One axis's map, out x in, as torch's F.interpolate: scale is the
 * caller's scale factor (0: none, in / out is used). */
static double *upsample_map(int64_t out, int64_t in, double scale, kiln_upsample_mode mode, bool align) {
    double *m = kiln__calloc((size_t)(out * in), sizeof *m);
    if (!m) return NULL;
    double ratio = scale > 0 ? 1.0 / scale : (double)in / (double)out;
    for (int64_t i = 0; i < out; i++) {
        if (mode == KILN_UPSAMPLE_NEAREST) { /* torch computes the index in float */
            int64_t j = (int64_t)floorf((float)i * (float)ratio);
            m[i * in + (j < in ? j : in - 1)] = 1.0;
            continue;
        }
        double src = align ? (out > 1 ? (double)i * (double)(in - 1) / (double)(out - 1) : 0.0)
                           : ((double)i + 0.5) * ratio - 0.5;
        if (src < 0) src = 0;
        int64_t j0 = (int64_t)src, j1 = j0 + 1 < in ? j0 + 1 : in - 1;
        if (j0 > in - 1) j0 = in - 1;
        double l = src - (double)j0;
        m[i * in + j0] += 1.0 - l;
        m[i * in + j1] += l;
    }
    return m;
}

/* Is the out x in map each input repeated out / in times (nearest by a
 * whole factor, the usual 2x)? */
static bool repeats(const double *m, int64_t out, int64_t in) {
    if (out % in) return false;
    for (int64_t i = 0; i < out; i++)
        if (m[i * in + i / (out / in)] != 1.0) return false;
    return true;
}

/* Each pixel as a kh x kw block: a broadcast view copied out, so the
 * forward is one copy and the backward the broadcast's sum. */
static kiln_tensor *repeat_pixels(kiln_ctx *ctx, kiln_tensor *x, int64_t kh, int64_t kw) {
    int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
    kiln_tensor *v = kiln_reshape(ctx, x, 6, (int64_t[]){n, c, h, 1, w, 1});
    v = kiln_broadcast_to(ctx, v, 6, (int64_t[]){n, c, h, kh, w, kw});
    return kiln_reshape(ctx, kiln_contiguous(ctx, v), 4, (int64_t[]){n, c, h * kh, w * kw});
}

kiln_tensor *kiln_upsample(kiln_ctx *ctx, kiln_tensor *x, const kiln_upsample_params *p) {
    static const char who[] = "kiln_upsample";
    if (!x) return NULL;
    if (!p) return kiln__err(KILN_ERR_ARG, "%s: params are NULL", who);
    if (p->mode != KILN_UPSAMPLE_NEAREST && p->mode != KILN_UPSAMPLE_BILINEAR)
        return kiln__err(KILN_ERR_ARG, "%s: mode %d is neither nearest nor bilinear", who, (int)p->mode);
    if (p->align_corners && p->mode == KILN_UPSAMPLE_NEAREST)
        return kiln__err(KILN_ERR_ARG, "%s: align_corners is for bilinear only (as torch)", who);
    bool by_size = p->size[0] || p->size[1], by_scale = p->scale[0] != 0 || p->scale[1] != 0;
    if (by_size == by_scale)
        return kiln__err(KILN_ERR_ARG, "%s: give either size (%lldx%lld) or scale (%gx%g), exactly one", who,
                         (long long)p->size[0], (long long)p->size[1], p->scale[0], p->scale[1]);
    if (by_scale && !(p->scale[0] > 0 && p->scale[1] > 0 && p->scale[0] < 1e6 && p->scale[1] < 1e6))
        return kiln__err(KILN_ERR_ARG, "%s: scale %gx%g must be positive and finite", who, p->scale[0], p->scale[1]);
    if (!sizes_ok(who, x, 1, 1)) return NULL;
    int64_t h = x->shape[2], w = x->shape[3];
    int64_t oh = by_size ? p->size[0] : (int64_t)floor((double)h * p->scale[0]);
    int64_t ow = by_size ? p->size[1] : (int64_t)floor((double)w * p->scale[1]);
    if (!sizes_ok(who, x, oh, ow)) return NULL;
    double sh = by_scale ? p->scale[0] : 0, sw = by_scale ? p->scale[1] : 0;
    double *ah = upsample_map(oh, h, sh, p->mode, p->align_corners), *aw = upsample_map(ow, w, sw, p->mode, p->align_corners);
    if (p->mode == KILN_UPSAMPLE_NEAREST && ah && aw && repeats(ah, oh, h) && repeats(aw, ow, w)) {
        free(ah);
        free(aw);
        return repeat_pixels(ctx, x, oh / h, ow / w);
    }
    return apply(who, ctx, x, oh, ah, ow, aw);
}
