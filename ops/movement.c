/* movement.c — shape ops that make views (reshape, view, flatten, permute,
 * transpose, slice, broadcast_to, detach), contiguous, and repeat built
 * from them: constructors, checks and backward rules. The ops that copy
 * (concat, pad, slice_scatter, cast) are in movement_copy.c. */
#include "internal.h"
#include "movement_copy.h"

static void contiguous_strides(int ndim, const int64_t *shape, int64_t *stride) {
    int64_t s = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        stride[i] = s;
        s *= shape[i];
    }
}

static bool ndim_ok(const char *who, int ndim, const void *shape) {
    if (ndim < 1 || ndim > KILN_MAX_DIMS || !shape) {
        kiln__err(KILN_ERR_SHAPE, "%s: ndim %d is outside 1..%d (or the shape is NULL)", who, ndim, KILN_MAX_DIMS);
        return false;
    }
    return true;
}

/* ---- reshape, view, flatten ---- */

/* Resolve a target shape with at most one -1 for x; false with an error. */
static bool target_shape(const char *who, const kiln_tensor *x, int ndim, const int64_t *shape, int64_t *out) {
    char sx[96], st[96];
    if (!ndim_ok(who, ndim, shape)) return false;
    int infer = -1;
    int64_t known = 1, n = kiln_tensor_numel(x);
    for (int i = 0; i < ndim; i++) {
        out[i] = shape[i];
        if (shape[i] == -1 && infer < 0) {
            infer = i;
            continue;
        }
        if (shape[i] < 0) {
            kiln__err(KILN_ERR_SHAPE, "%s: bad target shape %s for %s (dims must be >= 0, one may be -1)", who,
                      kiln__dims_str(ndim, shape, st), kiln__shape_str(x, sx));
            return false;
        }
        if (!kiln__mul_ok(known, shape[i], &known) || known > KILN_MAX_NUMEL) {
            kiln__err(KILN_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", who, kiln__shape_str(x, sx),
                      (long long)n, kiln__dims_str(ndim, shape, st));
            return false;
        }
    }
    if (infer >= 0) {
        if (!known) { /* torch's rule: any size would do */
            kiln__err(KILN_ERR_SHAPE, "%s: cannot reshape %s to %s: with a 0 beside it the -1 is ambiguous", who,
                      kiln__shape_str(x, sx), kiln__dims_str(ndim, shape, st));
            return false;
        }
        if (n % known) {
            kiln__err(KILN_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s", who, kiln__shape_str(x, sx),
                      (long long)n, kiln__dims_str(ndim, shape, st));
            return false;
        }
        out[infer] = n / known;
        known = n;
    }
    if (known != n) {
        kiln__err(KILN_ERR_SHAPE, "%s: cannot reshape %s (%lld elements) to %s (%lld elements)", who,
                  kiln__shape_str(x, sx), (long long)n, kiln__dims_str(ndim, shape, st), (long long)known);
        return false;
    }
    return true;
}

static kiln_tensor *view_of_contiguous(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape) {
    int64_t stride[KILN_MAX_DIMS];
    contiguous_strides(ndim, shape, stride);
    return kiln__view_new(ctx, KILN_OP_VIEW, x, ndim, shape, stride, 0);
}

kiln_tensor *kiln_view(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape) {
    char sx[96];
    int64_t out[KILN_MAX_DIMS];
    if (!x) return NULL;
    if (!target_shape("kiln_view", x, ndim, shape, out)) return NULL;
    if (!kiln_tensor_is_contiguous(x))
        return kiln__err(KILN_ERR_SHAPE,
                         "kiln_view: the %s input is not contiguous (a permuted, sliced or expanded view); use "
                         "kiln_reshape or kiln_contiguous first",
                         kiln__shape_str(x, sx));
    return view_of_contiguous(ctx, x, ndim, out);
}

kiln_tensor *kiln_reshape(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape) {
    int64_t out[KILN_MAX_DIMS];
    if (!x) return NULL;
    if (!target_shape("kiln_reshape", x, ndim, shape, out)) return NULL;
    return view_of_contiguous(ctx, kiln__contig(ctx, x), ndim, out);
}

kiln_tensor *kiln_flatten(kiln_ctx *ctx, kiln_tensor *x, int start_axis) {
    if (!x) return NULL;
    int a = kiln__axis(x->ndim, start_axis);
    if (a < 0)
        return kiln__err(KILN_ERR_ARG, "kiln_flatten: axis %d is out of range for %d dims", start_axis, x->ndim);
    int64_t shape[KILN_MAX_DIMS];
    memcpy(shape, x->shape, (size_t)a * sizeof *shape);
    shape[a] = kiln__numel(x->ndim - a, x->shape + a);
    return kiln_reshape(ctx, x, a + 1, shape);
}

static kiln_status view_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    gsrc[0] = kiln_reshape(ctx, gy, x->ndim, x->shape);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- permute, transpose ---- */

kiln_tensor *kiln_permute(kiln_ctx *ctx, kiln_tensor *x, const int *axes) {
    char sx[96];
    if (!x) return NULL;
    if (!axes) return kiln__err(KILN_ERR_ARG, "kiln_permute: axes is NULL");
    int norm[KILN_MAX_DIMS];
    bool seen[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++) {
        int a = kiln__axis(x->ndim, axes[i]);
        if (a < 0 || seen[a]) {
            char list[96];
            size_t n = 0;
            for (int j = 0; j < x->ndim; j++)
                n += (size_t)snprintf(list + n, sizeof list - n, j ? ", %d" : "%d", axes[j]);
            return kiln__err(KILN_ERR_ARG, "kiln_permute: axes (%s) are not a permutation of the %d dims of %s", list,
                             x->ndim, kiln__shape_str(x, sx));
        }
        seen[a] = true;
        norm[i] = a;
    }
    int64_t shape[KILN_MAX_DIMS], stride[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) {
        shape[i] = x->shape[norm[i]];
        stride[i] = x->stride[norm[i]];
    }
    kiln_tensor *t = kiln__view_new(ctx, KILN_OP_PERMUTE, x, x->ndim, shape, stride, 0);
    if (t)
        for (int i = 0; i < x->ndim; i++) t->ip[i] = norm[i];
    return t;
}

kiln_tensor *kiln_transpose(kiln_ctx *ctx, kiln_tensor *x, int axis0, int axis1) {
    if (!x) return NULL;
    int a = kiln__axis(x->ndim, axis0), b = kiln__axis(x->ndim, axis1);
    if (a < 0 || b < 0)
        return kiln__err(KILN_ERR_ARG, "kiln_transpose: axes %d, %d are out of range for %d dims", axis0, axis1,
                         x->ndim);
    int axes[KILN_MAX_DIMS];
    for (int i = 0; i < x->ndim; i++) axes[i] = i;
    axes[a] = b;
    axes[b] = a;
    return kiln_permute(ctx, x, axes);
}

static kiln_status permute_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    int inv[KILN_MAX_DIMS];
    for (int i = 0; i < node->ndim; i++) inv[node->ip[i]] = i;
    gsrc[0] = kiln_permute(ctx, gy, inv);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- slice ---- */

/* Python's rule: negative counts from the end, then clamp to [0, n]. */
static int64_t clamp_index(int64_t i, int64_t n) {
    if (i < 0) i += n;
    return i < 0 ? 0 : i > n ? n : i;
}

kiln_tensor *kiln_slice(kiln_ctx *ctx, kiln_tensor *x, int axis, int64_t start, int64_t end, int64_t step) {
    char sx[96];
    if (!x) return NULL;
    int a = kiln__axis(x->ndim, axis);
    if (a < 0)
        return kiln__err(KILN_ERR_ARG, "kiln_slice: axis %d is out of range for %s", axis, kiln__shape_str(x, sx));
    if (step < 1) return kiln__err(KILN_ERR_ARG, "kiln_slice: step %lld must be >= 1", (long long)step);
    int64_t n = x->shape[a], s = clamp_index(start, n), e = clamp_index(end, n);
    int64_t len = e > s ? (e - s - 1) / step + 1 : 0; /* e - s + step - 1 could pass INT64_MAX */
    int64_t shape[KILN_MAX_DIMS], stride[KILN_MAX_DIMS];
    memcpy(shape, x->shape, sizeof shape);
    memcpy(stride, x->stride, sizeof stride);
    shape[a] = len;
    if (len > 1) stride[a] = x->stride[a] * step; /* step < n then: no overflow */
    if (len && kiln__is_quant(x->dtype) && (s * x->stride[a]) % kiln__types[x->dtype].blck)
        return kiln__err(KILN_ERR_SHAPE, "kiln_slice: [%lld:%lld:%lld] of axis %d of the %s tensor %s starts inside a block",
                         (long long)start, (long long)end, (long long)step, a, kiln_dtype_name(x->dtype),
                         kiln__shape_str(x, sx));
    size_t offs = kiln__elems_bytes(x->dtype, s * x->stride[a]);
    kiln_tensor *t = kiln__view_new(ctx, KILN_OP_SLICE, x, x->ndim, shape, stride, offs);
    if (t) {
        t->ip[0] = a;
        t->ip[1] = s;
        t->ip[2] = step;
    }
    return t;
}

static kiln_status slice_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    kiln_tensor *x = node->src[0];
    if (!kiln_tensor_requires_grad(x)) return KILN_OK;
    gsrc[0] = kiln__slice_scatter(ctx, gy, x->ndim, x->shape, (int)node->ip[0], node->ip[1], node->ip[2]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- broadcast_to ---- */

kiln_tensor *kiln_broadcast_to(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape) {
    char sx[96], st[96];
    if (!x) return NULL;
    if (!ndim_ok("kiln_broadcast_to", ndim, shape) || !kiln__not_quant("kiln_broadcast_to", x)) return NULL;
    if (ndim < x->ndim)
        return kiln__err(KILN_ERR_SHAPE, "kiln_broadcast_to: cannot broadcast %s to fewer dims %s",
                         kiln__shape_str(x, sx), kiln__dims_str(ndim, shape, st));
    int64_t out[KILN_MAX_DIMS], stride[KILN_MAX_DIMS];
    int lead = ndim - x->ndim;
    for (int i = 0; i < ndim; i++) {
        int64_t d = i >= lead ? x->shape[i - lead] : 1;
        out[i] = shape[i] == -1 && i >= lead ? d : shape[i]; /* -1 keeps x's dim, as torch.expand */
        if (out[i] < 0 || (d != 1 && d != out[i]))
            return kiln__err(KILN_ERR_SHAPE, "kiln_broadcast_to: cannot broadcast %s to %s (dim %d)",
                             kiln__shape_str(x, sx), kiln__dims_str(ndim, shape, st), i);
        /* a stretched or new dim reads the same element again: stride 0 */
        stride[i] = i >= lead && d == out[i] ? x->stride[i - lead] : 0;
    }
    if (!kiln__shape_check("kiln_broadcast_to", ndim, out)) return NULL;
    return kiln__view_new(ctx, KILN_OP_EXPAND, x, ndim, out, stride, 0);
}

static kiln_status expand_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    if (!kiln_tensor_requires_grad(node->src[0])) return KILN_OK;
    gsrc[0] = kiln__sum_to(ctx, gy, node->src[0]);
    return gsrc[0] ? KILN_OK : kiln_last_status();
}

/* ---- detach, contiguous ---- */

kiln_tensor *kiln_detach(kiln_ctx *ctx, kiln_tensor *x) {
    if (!x) return NULL;
    kiln_tensor *t = kiln__view_new(ctx, KILN_OP_DETACH, x, x->ndim, x->shape, x->stride, 0);
    if (t) t->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
    return t;
}

kiln_tensor *kiln_contiguous(kiln_ctx *ctx, kiln_tensor *x) {
    if (!x) return NULL;
    if (kiln_tensor_is_contiguous(x)) return x;
    return kiln__node_new(ctx, KILN_OP_CONTIGUOUS, x->dtype, x->ndim, x->shape, 1, &x);
}

/* Declared in core/internal.h: the helper every kernel-backed constructor
 * uses to hand its kernel row-major sources. */
kiln_tensor *kiln__contig(kiln_ctx *ctx, kiln_tensor *x) { return kiln_contiguous(ctx, x); }

static kiln_status contiguous_backward(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc) {
    (void)ctx;
    if (kiln_tensor_requires_grad(node->src[0])) gsrc[0] = gy;
    return KILN_OK;
}

/* ---- repeat ---- */

/* One tiling pass over axes [*first, ...): view the current tensor with a
 * size-1 dim before every repeated axis, broadcast those to the repeat
 * counts, copy, and merge each (count, dim) pair. Axes before *first and
 * after the last one taken are merged into one dim each so that a pass
 * fits KILN_MAX_DIMS; *first advances past the axes handled. */
static kiln_tensor *repeat_pass(kiln_ctx *ctx, kiln_tensor *x, const int64_t *reps, int *first) {
    int n = x->ndim, i = *first, nd = 0;
    int64_t view[KILN_MAX_DIMS], target[KILN_MAX_DIMS], result[KILN_MAX_DIMS];
    if (i > 0) {
        view[nd] = target[nd] = kiln__numel(i, x->shape);
        nd++;
    }
    /* keep 1 slot free for the merged rest */
    while (i < n) {
        int need = reps[i] != 1 ? 2 : 1;
        if (nd + need + (i + 1 < n ? 1 : 0) > KILN_MAX_DIMS) break;
        if (reps[i] != 1) {
            view[nd] = 1;
            target[nd++] = reps[i];
        }
        view[nd] = target[nd] = x->shape[i];
        nd++;
        i++;
    }
    if (i < n) {
        view[nd] = target[nd] = kiln__numel(n - i, x->shape + i);
        nd++;
    }
    for (int k = 0; k < n; k++) result[k] = x->shape[k] * (k >= *first && k < i ? reps[k] : 1);
    *first = i;
    kiln_tensor *v = kiln_reshape(ctx, x, nd, view);
    kiln_tensor *b = kiln_broadcast_to(ctx, v, nd, target);
    return kiln_reshape(ctx, kiln_contiguous(ctx, b), n, result);
}

kiln_tensor *kiln_repeat(kiln_ctx *ctx, kiln_tensor *x, const int64_t *reps) {
    char sx[96], sr[96];
    if (!x) return NULL;
    if (!reps) return kiln__err(KILN_ERR_ARG, "kiln_repeat: reps is NULL");
    bool any = false;
    int64_t result[KILN_MAX_DIMS] = {0};
    for (int i = 0; i < x->ndim; i++) {
        if (reps[i] < 0)
            return kiln__err(KILN_ERR_ARG, "kiln_repeat: reps[%d] = %lld must be >= 0 (input %s)", i,
                             (long long)reps[i], kiln__shape_str(x, sx));
        if (!kiln__mul_ok(x->shape[i], reps[i], &result[i]))
            return kiln__err(KILN_ERR_SHAPE, "kiln_repeat: %s repeated %s times does not fit int64",
                             kiln__shape_str(x, sx), kiln__dims_str(x->ndim, reps, sr));
        any |= reps[i] != 1;
    }
    /* every pass below then makes a shape no larger than this one */
    if (!kiln__shape_check("kiln_repeat", x->ndim, result)) return NULL;
    if (!any) return x;
    int first = 0, last = x->ndim - 1; /* some reps[i] != 1 */
    while (reps[last] == 1) last--; /* axes after the last repeated one need no pass */
    while (x && first <= last) x = repeat_pass(ctx, x, reps, &first);
    return x;
}

/* ---- registration ---- */

void kiln__ops_register_movement(kiln_op_info *tab) {
    tab[KILN_OP_VIEW] = (kiln_op_info){"view", KILN_KIND_VIEW, view_backward};
    tab[KILN_OP_PERMUTE] = (kiln_op_info){"permute", KILN_KIND_VIEW, permute_backward};
    tab[KILN_OP_SLICE] = (kiln_op_info){"slice", KILN_KIND_VIEW, slice_backward};
    tab[KILN_OP_EXPAND] = (kiln_op_info){"expand", KILN_KIND_VIEW, expand_backward};
    tab[KILN_OP_DETACH] = (kiln_op_info){"detach", KILN_KIND_VIEW, NULL};
    tab[KILN_OP_CONTIGUOUS] = (kiln_op_info){"contiguous", KILN_KIND_KERNEL, contiguous_backward};
    kiln__ops_register_movement_copy(tab);
}
