/* movement_copy.c — movement ops with a kernel that copies: concat, pad,
 * slice_scatter (the gradient of slice), slice_assign (in place) and cast. Constructors, checks and
 * backward rules; the kernels are in backends/cpu/movement.c. */
#include "internal.h"
#include "movement_copy.h"

/* ---- concat ---- */

/* One CONCAT node over at most KILN_MAX_SRC contiguous parts (checked by the caller). */
static kiln_tensor *concat_node(kiln_ctx *ctx, kiln_tensor **parts, int n, int axis) {
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, parts[0]->shape, sizeof shape);
    for (int i = 1; i < n; i++)
        if (parts[i]) shape[axis] += parts[i]->shape[axis];
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_CONCAT, parts[0]->dtype, parts[0]->ndim, shape, n, parts);
    if (t) t->ip[0] = axis;
    return t;
}

kiln_tensor *kiln_concat(kiln_ctx *ctx, kiln_tensor *const *xs, int n, int axis) {
    char s0[96], si[96];
    if (!xs || n < 1) return kiln__err(KILN_ERR_ARG, "kiln_concat: no parts given (n = %d)", n);
    for (int i = 0; i < n; i++)
        if (!xs[i]) return NULL;
    const kiln_tensor *x0 = xs[0];
    int a = kiln__axis(x0->ndim, axis);
    if (a < 0)
        return kiln__err(KILN_ERR_ARG, "kiln_concat: axis %d is out of range for %s", axis, kiln__shape_str(x0, s0));
    for (int i = 1; i < n; i++) {
        const kiln_tensor *x = xs[i];
        if (x->dtype != x0->dtype)
            return kiln__err(KILN_ERR_DTYPE, "kiln_concat: part %d is %s but part 0 is %s", i,
                             kiln_dtype_name(x->dtype), kiln_dtype_name(x0->dtype));
        bool ok = x->ndim == x0->ndim;
        for (int d = 0; ok && d < x0->ndim; d++) ok = d == a || x->shape[d] == x0->shape[d];
        if (!ok)
            return kiln__err(KILN_ERR_SHAPE, "kiln_concat: part %d %s and part 0 %s differ outside axis %d", i,
                             kiln__shape_str(x, si), kiln__shape_str(x0, s0), a);
    }
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x0->shape, sizeof shape);
    for (int i = 1; i < n; i++)
        if (!kiln__add_ok(shape[a], xs[i]->shape[a], &shape[a])) shape[a] = INT64_MAX; /* refused just below */
    if (!kiln__shape_check("kiln_concat", x0->ndim, shape)) return NULL;
    if (n == 1) return xs[0];
    /* A node holds KILN_MAX_SRC parts; more are chained: the running
     * result becomes the first part of the next node. */
    kiln_tensor *acc = NULL;
    int i = 0;
    while (i < n) {
        kiln_tensor *parts[KILN_MAX_SRC];
        int k = 0;
        if (acc) parts[k++] = acc;
        while (k < KILN_MAX_SRC && i < n) parts[k++] = kiln__contig(ctx, xs[i++]);
        for (int j = 0; j < k; j++)
            if (!parts[j]) return NULL;
        if (!(acc = concat_node(ctx, parts, k, a))) return NULL;
    }
    return acc;
}

static kiln_status concat_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    int a = (int)node->ip[0];
    int64_t off = 0;
    for (int i = 0; i < node->nsrc; i++) {
        int64_t len = node->src[i]->shape[a];
        if (kiln_tensor_requires_grad(node->src[i]) && !(gsrc[i] = kiln_slice(ctx, gy, a, off, off + len, 1)))
            return kiln_last_status();
        off += len;
    }
    return KILN_OK;
}

/* ---- pad ---- */

kiln_tensor *kiln_pad(kiln_ctx *ctx, kiln_tensor *x, const int64_t *pads, double value) {
    char sx[96];
    if (!x) return NULL;
    if (!pads) return kiln__err(KILN_ERR_ARG, "kiln_pad: pads is NULL");
    int64_t shape[KILN_MAX_DIMS] = {0};
    bool any = false;
    for (int i = 0; i < x->ndim; i++) {
        if (pads[2 * i] < 0 || pads[2 * i + 1] < 0)
            return kiln__err(KILN_ERR_ARG, "kiln_pad: pads %lld, %lld of axis %d of %s must be >= 0",
                             (long long)pads[2 * i], (long long)pads[2 * i + 1], i, kiln__shape_str(x, sx));
        if (!kiln__add_ok(x->shape[i], pads[2 * i], &shape[i]) || !kiln__add_ok(shape[i], pads[2 * i + 1], &shape[i]))
            return kiln__err(KILN_ERR_SHAPE, "kiln_pad: pads %lld, %lld of axis %d of %s make a dim past int64",
                             (long long)pads[2 * i], (long long)pads[2 * i + 1], i, kiln__shape_str(x, sx));
        any |= shape[i] != x->shape[i];
    }
    if (!kiln__shape_check("kiln_pad", x->ndim, shape)) return NULL;
    if (!any) return x;
    kiln_tensor *xc = kiln__contig(ctx, x);
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_PAD, x->dtype, x->ndim, shape, 1, &xc);
    if (!t) return NULL;
    for (int i = 0; i < 2 * x->ndim; i++) t->ip[i] = pads[i];
    t->fp[0] = value;
    return t;
}

static kiln_status pad_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    kiln_tensor *g = gy;
    for (int i = 0; g && i < x->ndim; i++)
        if (node->shape[i] != x->shape[i]) g = kiln_slice(ctx, g, i, node->ip[2 * i], node->ip[2 * i] + x->shape[i], 1);
    gsrc[0] = g;
    return g ? KILN_OK : kiln_last_status();
}

/* ---- slice_scatter ---- */

kiln_tensor *kiln__slice_scatter(kiln_ctx *ctx, kiln_tensor *g, int ndim, const int64_t *shape, int axis,
                                 int64_t start, int64_t step) {
    char sg[96], so[96];
    if (!g) return NULL;
    bool ok = g->ndim == ndim && axis >= 0 && axis < ndim && step >= 1 && start >= 0;
    for (int d = 0; ok && d < ndim; d++) ok = d == axis || g->shape[d] == shape[d];
    if (ok) ok = start + (g->shape[axis] - 1) * step < shape[axis];
    if (!ok)
        return kiln__err(KILN_ERR_SHAPE, "slice_scatter: %s does not fit into %s at axis %d start %lld step %lld",
                         kiln__shape_str(g, sg), kiln__dims_str(ndim, shape, so), axis, (long long)start,
                         (long long)step);
    kiln_tensor *gc = kiln__contig(ctx, g);
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_SLICE_SCATTER, g->dtype, ndim, shape, 1, &gc);
    if (t) {
        t->ip[0] = axis;
        t->ip[1] = start;
        t->ip[2] = step;
    }
    return t;
}

static kiln_status slice_scatter_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *g = node->src[0];
    if (!kiln_tensor_requires_grad(g)) return KILN_OK;
    int a = (int)node->ip[0];
    int64_t start = node->ip[1], step = node->ip[2];
    gsrc[0] = kiln_slice(ctx, gy, a, start, start + (g->shape[a] - 1) * step + 1, step);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- slice_assign (in place) ---- */

kiln_tensor *kiln_slice_assign(kiln_ctx *ctx, kiln_tensor *dst, kiln_tensor *src, int axis, int64_t start) {
    char sd[96], ss[96];
    if (!dst || !src) return NULL;
    if (!kiln__not_quant("kiln_slice_assign", dst) || !kiln__not_quant("kiln_slice_assign", src)) return NULL;
    kiln_tensor *owner = dst->view_src ? dst->view_src : dst;
    if (owner->op != KILN_OP_NONE || !owner->storage_bytes)
        return kiln__err(KILN_ERR_ARG, "kiln_slice_assign: dst %s must be a leaf or a view of one",
                         kiln__shape_str(dst, sd));
    if (owner->flags & KILN_FLAG_REQUIRES_GRAD)
        return kiln__err(KILN_ERR_ARG, "kiln_slice_assign: dst '%s' requires grad; an in-place write would corrupt it",
                         owner->name);
    if (src->dtype != dst->dtype)
        return kiln__err(KILN_ERR_DTYPE, "kiln_slice_assign: src is %s but dst is %s", kiln_dtype_name(src->dtype),
                         kiln_dtype_name(dst->dtype));
    int a = kiln__axis(dst->ndim, axis);
    bool ok = a >= 0 && src->ndim == dst->ndim && start >= 0;
    for (int d = 0; ok && d < dst->ndim; d++) ok = d == a || src->shape[d] == dst->shape[d];
    if (ok) ok = start <= dst->shape[a] - src->shape[a];
    if (!ok)
        return kiln__err(KILN_ERR_SHAPE, "kiln_slice_assign: src %s does not fit into dst %s at axis %d start %lld",
                         kiln__shape_str(src, ss), kiln__shape_str(dst, sd), axis, (long long)start);
    for (int d = 0; d < dst->ndim; d++)
        if (dst->shape[d] > 1 && dst->stride[d] == 0)
            return kiln__err(KILN_ERR_ARG, "kiln_slice_assign: dst %s is a broadcast view (elements overlap)",
                             kiln__shape_str(dst, sd));
    kiln_tensor *srcs[2] = {dst, src};
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_SLICE_ASSIGN, dst->dtype, dst->ndim, dst->shape, 2, srcs);
    if (!t) return NULL;
    memcpy(t->stride, dst->stride, sizeof t->stride);
    t->view_src = owner;
    t->view_offs = dst->view_offs;
    t->ip[0] = a;
    t->ip[1] = start;
    return t;
}

/* src gets its slab of gy; dst (when it carries an earlier write's gradient)
 * gets gy with that slab zeroed, since the write replaced those values. */
static kiln_status slice_assign_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *dst = node->src[0], *src = node->src[1];
    int a = (int)node->ip[0];
    int64_t start = node->ip[1];
    kiln_tensor *slab = kiln_slice(ctx, gy, a, start, start + src->shape[a], 1);
    if (kiln_tensor_requires_grad(src) && !(gsrc[1] = slab)) return kiln_last_status();
    if (kiln_tensor_requires_grad(dst) &&
        !(gsrc[0] = kiln_sub(ctx, gy, kiln__slice_scatter(ctx, slab, gy->ndim, gy->shape, a, start, 1))))
        return kiln_last_status();
    return KILN_OK;
}

/* ---- cast ---- */

kiln_tensor *kiln_cast(kiln_ctx *ctx, kiln_tensor *x, kiln_dtype dtype) {
    if (!x) return NULL;
    if ((unsigned)dtype >= KILN_DTYPE_COUNT) return kiln__err(KILN_ERR_DTYPE, "kiln_cast: bad dtype %d", (int)dtype);
    if (x->dtype == dtype) return x;
    if (kiln__is_quant(dtype))
        return kiln__err(KILN_ERR_DTYPE, "kiln_cast: to %s is kiln_quantize's job (blocks need a scale)",
                         kiln_dtype_name(dtype));
    kiln_tensor *t = kiln__node_new(ctx, KILN_OP_CAST, dtype, x->ndim, x->shape, 1, &x);
    /* an integer result carries no gradient (as torch) */
    if (t && !kiln__is_float(dtype)) t->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
    return t;
}

static kiln_status cast_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    gsrc[0] = kiln_cast(ctx, gy, x->dtype);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

void kiln__ops_register_movement_copy(kiln_op_info *tab) {
    tab[KILN_OP_CONCAT] = (kiln_op_info){"concat", KILN_KIND_KERNEL, concat_backward};
    tab[KILN_OP_PAD] = (kiln_op_info){"pad", KILN_KIND_KERNEL, pad_backward};
    tab[KILN_OP_SLICE_SCATTER] = (kiln_op_info){"slice_scatter", KILN_KIND_KERNEL, slice_scatter_backward};
    tab[KILN_OP_SLICE_ASSIGN] = (kiln_op_info){"slice_assign", KILN_KIND_INPLACE, slice_assign_backward};
    tab[KILN_OP_CAST] = (kiln_op_info){"cast", KILN_KIND_KERNEL, cast_backward};
}
