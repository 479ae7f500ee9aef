/* cu_conv.c — the convolution primitives on the CUDA backend (see cu.h and
 * k_conv.cu): IM2COL and COL2IM with every attribute of ops/conv.c
 * (kernel, stride, padding, dilation, either cols layout, ip[11]) and the
 * fused max-pool and its backward (ip[10] = 1), f32 and f64, contiguous
 * operands (the constructors make them so) but for the max-pool's image
 * with ip[11] = 1: a view [N, C, H, W] of [C, N, H, W] storage (a conv
 * product read without its permuting copy, ops/conv.c), whose backward
 * writes gx in that storage order ([C, N, H, W], the node's dims). */
#include "cu.h"

enum { MODE_COLS = 0, MODE_POOL_MAX = 1 }; /* ip[10], ops/conv.c */

static bool conv_dtype(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64; }

static bool same_contig(const kiln_tensor *t, const kiln_tensor *s) {
    return s->dtype == t->dtype && kiln_tensor_is_contiguous(s);
}

/* The geometry of ip[0..9] (kh kw sh sw ph pw dh dw H W) and ip[11]; false
 * when an entry is out of the range ops/conv.c checks. */
static bool geom_of(const kiln_tensor *t, int64_t n, int64_t c, int64_t oh, int64_t ow, cu_conv *g) {
    const int64_t *ip = t->ip;
    *g = (cu_conv){.n = n, .c = c, .h = ip[8], .w = ip[9], .oh = oh, .ow = ow, .kh = ip[0], .kw = ip[1], .sh = ip[2],
                   .sw = ip[3], .ph = ip[4], .pw = ip[5], .dh = ip[6], .dw = ip[7], .cn = ip[11] == 1};
    return g->kh >= 1 && g->kw >= 1 && g->sh >= 1 && g->sw >= 1 && g->ph >= 0 && g->pw >= 0 && g->dh >= 1 &&
           g->dw >= 1 && g->h >= 1 && g->w >= 1 && g->oh >= 1 && g->ow >= 1 && (ip[11] == 0 || ip[11] == 1);
}

/* The cols shape of geometry g in its layout. */
static bool cols_shape_is(const kiln_tensor *cols, const cu_conv *g) {
    int64_t want[6] = {g->cn ? g->c : g->n, g->cn ? g->kh : g->c, g->cn ? g->kw : g->kh, g->cn ? g->n : g->kw, g->oh, g->ow};
    if (cols->ndim != 6) return false;
    for (int d = 0; d < 6; d++)
        if (cols->shape[d] != want[d]) return false;
    return true;
}

static bool image_is(const kiln_tensor *x, const cu_conv *g) {
    return x->ndim == 4 && x->shape[0] == g->n && x->shape[1] == g->c && x->shape[2] == g->h && x->shape[3] == g->w;
}

/* x [N, C, H, W] viewing [C, N, H, W] storage (the max-pool's ip[11] = 1). */
static bool planes_swapped(const kiln_tensor *v) {
    const int64_t *s = v->shape, *st = v->stride;
    return v->ndim == 4 && st[3] == 1 && st[2] == s[3] && st[0] == s[2] * s[3] && st[1] == s[0] * s[2] * s[3];
}

/* The max-pool's image operand: contiguous, or with ip[11] = 1 swapped. */
static bool pool_image_ok(const kiln_tensor *t, const kiln_tensor *x) {
    return x->dtype == t->dtype && (t->ip[11] == 1 ? planes_swapped(x) : kiln_tensor_is_contiguous(x));
}

static bool pooled_is(const kiln_tensor *y, const cu_conv *g) {
    return y->ndim == 4 && y->shape[0] == g->n && y->shape[1] == g->c && y->shape[2] == g->oh && y->shape[3] == g->ow;
}

/* IM2COL: x [N, C, H, W] -> cols (ip[11]'s layout), or the pooled max [N, C, OH, OW]. */
static bool im2col_geom(const kiln_tensor *t, cu_conv *g) {
    const kiln_tensor *x = t->src[0];
    if (x->ndim != 4) return false;
    bool pool = t->ip[10] == MODE_POOL_MAX;
    if (pool ? t->ndim != 4 : t->ndim != 6) return false;
    if (!geom_of(t, x->shape[0], x->shape[1], t->shape[pool ? 2 : 4], t->shape[pool ? 3 : 5], g)) return false;
    return image_is(x, g) && (pool ? pooled_is(t, g) : cols_shape_is(t, g));
}

static bool im2col_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    cu_conv g;
    bool pool = t->ip[10] == MODE_POOL_MAX;
    return conv_dtype(t->dtype) && t->nsrc == 1 && kiln_tensor_is_contiguous(t) &&
           (pool ? pool_image_ok(t, t->src[0]) : same_contig(t, t->src[0])) && (pool || t->ip[10] == MODE_COLS) &&
           im2col_geom(t, &g);
}

static kiln_status im2col_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    cu_conv g;
    im2col_geom(t, &g);
    int dt = t->dtype == KILN_F64 ? CU_F64 : CU_F32;
    if (t->ip[10] == MODE_POOL_MAX)
        return kiln__cu_launched(kiln__cu_pool_max(cu->stream, dt, &g, kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t), t->fp[0]),
                                 "max_pool kernel");
    return kiln__cu_launched(kiln__cu_im2col(cu->stream, dt, &g, kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t), t->fp[0]),
                             "im2col kernel");
}

/* COL2IM: cols -> img [N, C, H, W]; or the pool's backward: x, y, gy -> gx
 * ([C, N, H, W] with ip[11] = 1). */
static bool col2im_geom(const kiln_tensor *t, cu_conv *g) {
    if (t->ndim != 4) return false;
    if (t->ip[10] == MODE_POOL_MAX) {
        const kiln_tensor *y = t->src[1];
        if (y->ndim != 4 || !geom_of(t, y->shape[0], y->shape[1], y->shape[2], y->shape[3], g)) return false;
        bool cn = g->cn;
        bool gx_ok = t->shape[0] == (cn ? g->c : g->n) && t->shape[1] == (cn ? g->n : g->c) && t->shape[2] == g->h &&
                     t->shape[3] == g->w;
        return gx_ok && image_is(t->src[0], g) && pooled_is(y, g) && pooled_is(t->src[2], g);
    }
    const kiln_tensor *cols = t->src[0];
    if (cols->ndim != 6 || !geom_of(t, t->shape[0], t->shape[1], cols->shape[4], cols->shape[5], g)) return false;
    return image_is(t, g) && cols_shape_is(cols, g);
}

static bool col2im_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    cu_conv g;
    bool pool = t->ip[10] == MODE_POOL_MAX;
    if (!conv_dtype(t->dtype) || (!pool && t->ip[10] != MODE_COLS) || t->nsrc != (pool ? 3 : 1)) return false;
    if (!kiln_tensor_is_contiguous(t)) return false;
    for (int i = 0; i < t->nsrc; i++)
        if (!(pool && i == 0 ? pool_image_ok(t, t->src[0]) : same_contig(t, t->src[i]))) return false;
    return col2im_geom(t, &g);
}

static kiln_status col2im_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    cu_conv g;
    col2im_geom(t, &g);
    int dt = t->dtype == KILN_F64 ? CU_F64 : CU_F32;
    if (t->ip[10] == MODE_POOL_MAX)
        return kiln__cu_launched(kiln__cu_pool_max_grad(cu->stream, dt, &g, kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t->src[1]),
                                                        kiln__cu_ptr(t->src[2]), kiln__cu_ptr(t)),
                                 "max_pool backward kernel");
    return kiln__cu_launched(kiln__cu_col2im(cu->stream, dt, &g, kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t)), "col2im kernel");
}

void kiln__cu_register_conv(kiln_cu_kernel *tab) {
    tab[KILN_OP_IM2COL] = (kiln_cu_kernel){im2col_supports, im2col_record};
    tab[KILN_OP_COL2IM] = (kiln_cu_kernel){col2im_supports, col2im_record};
}
