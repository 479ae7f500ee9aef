/* tensor.c — creating tensors and nodes, reading and writing their values. */
#include "backend.h"
#include "pool.h"

#include <math.h>

int64_t kiln__numel(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    return n;
}

int kiln__axis(int ndim, int axis) {
    if (axis < 0) axis += ndim;
    return axis >= 0 && axis < ndim ? axis : -1;
}

void kiln__set_contiguous_strides(kiln_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        t->stride[i] = s;
        s *= t->shape[i];
    }
}

bool kiln__shape_eq(int na, const int64_t *a, int nb, const int64_t *b) {
    if (na != nb) return false;
    for (int i = 0; i < na; i++)
        if (a[i] != b[i]) return false;
    return true;
}

bool kiln__same_shape(const kiln_tensor *a, const kiln_tensor *b) {
    return kiln__shape_eq(a->ndim, a->shape, b->ndim, b->shape);
}

bool kiln__shape_check(const char *who, int ndim, const int64_t *shape) {
    char buf[96];
    if (ndim < 1 || ndim > KILN_MAX_DIMS || !shape) {
        kiln__err(KILN_ERR_SHAPE, "%s: ndim %d is outside 1..%d", who, ndim, KILN_MAX_DIMS);
        return false;
    }
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        if (shape[i] < 0) {
            kiln__err(KILN_ERR_SHAPE, "%s: invalid shape %s (dim %d is %lld; dims must be >= 0)", who,
                      kiln__dims_str(ndim, shape, buf), i, (long long)shape[i]);
            return false;
        }
        if (shape[i] && (!kiln__mul_ok(n, shape[i], &n) || n > KILN_MAX_NUMEL)) {
            kiln__err(KILN_ERR_SHAPE, "%s: shape %s has more than 2^40 elements", who,
                      kiln__dims_str(ndim, shape, buf));
            return false;
        }
    }
    return true;
}

static kiln_tensor *tensor_meta(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape) {
    kiln_tensor *t = kiln__arena_alloc(ctx, sizeof *t);
    if (!t) return NULL;
    t->ctx = ctx;
    t->dtype = dtype;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    kiln__set_contiguous_strides(t);
    t->id = ctx->n_tensors++;
    return t;
}

kiln_tensor *kiln_tensor_new(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape) {
    if (!ctx) return kiln__err(KILN_ERR_ARG, "kiln_tensor_new: ctx is NULL");
    if ((unsigned)dtype >= KILN_DTYPE_COUNT) return kiln__err(KILN_ERR_DTYPE, "kiln_tensor_new: bad dtype %d", dtype);
    if (!kiln__shape_check("kiln_tensor_new", ndim, shape)) return NULL;
    if (kiln__is_quant(dtype) && !kiln__quant_shape_ok("kiln_tensor_new", dtype, ndim, shape)) return NULL;
    kiln_tensor *t = tensor_meta(ctx, dtype, ndim, shape);
    if (!t) return NULL;
    size_t bytes = kiln__storage_size(kiln__elems_bytes(dtype, kiln__numel(ndim, shape)));
    t->data = kiln__owned_alloc_lasting(ctx, bytes);
    if (!t->data) return NULL;
    t->storage_bytes = bytes;
    ctx->storage_bytes += bytes;
    return t;
}

kiln_tensor *kiln__tensor_borrowed(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape, void *data) {
    if (!kiln__shape_check("kiln_tensor_borrowed", ndim, shape) ||
        (kiln__is_quant(dtype) && !kiln__quant_shape_ok("kiln_tensor_borrowed", dtype, ndim, shape)))
        return NULL;
    size_t bytes = kiln__elems_bytes(dtype, kiln__numel(ndim, shape));
    kiln_tensor *t = bytes ? tensor_meta(ctx, dtype, ndim, shape) : NULL;
    if (!t) return bytes ? NULL : kiln__err(KILN_ERR_ARG, "kiln_tensor_borrowed: an empty tensor");
    t->data = data;
    t->storage_bytes = bytes;
    ctx->storage_bytes += bytes;
    return t;
}

kiln_tensor *kiln_new_1d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0) {
    return kiln_tensor_new(ctx, dtype, 1, (int64_t[]){d0});
}
kiln_tensor *kiln_new_2d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1) {
    return kiln_tensor_new(ctx, dtype, 2, (int64_t[]){d0, d1});
}
kiln_tensor *kiln_new_3d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2) {
    return kiln_tensor_new(ctx, dtype, 3, (int64_t[]){d0, d1, d2});
}
kiln_tensor *kiln_new_4d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3) {
    return kiln_tensor_new(ctx, dtype, 4, (int64_t[]){d0, d1, d2, d3});
}

kiln_tensor *kiln_scalar(kiln_ctx *ctx, kiln_dtype dtype, double v) {
    kiln_tensor *t = kiln_new_1d(ctx, dtype, 1);
    if (t) kiln__types[dtype].set(t->data, 0, v);
    return t;
}

kiln_tensor *kiln__full_like(kiln_ctx *ctx, const kiln_tensor *like, double v) {
    kiln_tensor *t = kiln_tensor_new(ctx, like->dtype, like->ndim, like->shape);
    if (t && v != 0.0) kiln_tensor_fill(t, v);
    return t;
}

kiln_status kiln_tensor_set_requires_grad(kiln_tensor *t, bool requires) {
    if (!t) return kiln__errs(KILN_ERR_ARG, "kiln_tensor_set_requires_grad: tensor is NULL");
    if (t->op != KILN_OP_NONE)
        return kiln__errs(KILN_ERR_STATE, "kiln_tensor_set_requires_grad: '%s' is not a leaf", t->name);
    if (!requires) {
        t->flags &= ~(uint32_t)KILN_FLAG_REQUIRES_GRAD;
        return KILN_OK;
    }
    if (!kiln__is_float(t->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "kiln_tensor_set_requires_grad: %s tensors have no gradient",
                          kiln_dtype_name(t->dtype));
    if (!t->grad) {
        t->grad = kiln_tensor_new(t->ctx, t->dtype, t->ndim, t->shape);
        if (!t->grad) return kiln_last_status();
        t->grad->flags |= KILN_FLAG_GRAD;
        snprintf(t->grad->name, sizeof t->grad->name, "%.40s.grad", t->name);
    }
    t->flags |= KILN_FLAG_REQUIRES_GRAD;
    return KILN_OK;
}

/* Files find a parameter or buffer by its name (kiln_save_params,
 * checkpoints): it must be there, whole (not cut to fit) and the only one
 * in ctx, checked now rather than at the first save after training. */
static bool saved_name_ok(const kiln_ctx *ctx, const char *name, const char *who) {
    const size_t max = sizeof ((kiln_tensor *)0)->name - 1;
    if (!ctx) return kiln__err(KILN_ERR_ARG, "%s: ctx is NULL", who), false;
    if (!name || !*name)
        return kiln__err(KILN_ERR_ARG, "%s: the name is %s; files find a tensor by its name", who,
                         name ? "empty" : "NULL"), false;
    if (strlen(name) > max)
        return kiln__err(KILN_ERR_ARG, "%s: the name '%.*s...' is %zu bytes long; at most %zu fit", who, (int)max,
                         name, strlen(name), max), false;
    for (int i = 0; i < kiln__n_saved(ctx); i++)
        if (!strcmp(kiln__saved_at(ctx, i)->name, name))
            return kiln__err(KILN_ERR_ARG, "%s: the context already has a %s called '%s'", who,
                             i < ctx->n_params ? "parameter" : "buffer", name), false;
    return true;
}

kiln_tensor *kiln_param(kiln_ctx *ctx, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape) {
    const char *who = "kiln_param";
    if (!saved_name_ok(ctx, name, who)) return NULL;
    kiln_tensor *t = kiln_tensor_new(ctx, dtype, ndim, shape);
    if (!t || kiln_tensor_set_requires_grad(kiln_tensor_set_name(t, name), true))
        return kiln__err_context("%s '%s'", who, name), NULL;
    if (kiln__owned_grow(ctx, (void **)&ctx->params, &ctx->cap_params, ctx->n_params + 1, sizeof(kiln_tensor *)))
        return NULL;
    t->flags |= KILN_FLAG_PARAM;
    ctx->params[ctx->n_params++] = t;
    return t;
}

kiln_tensor *kiln_buffer(kiln_ctx *ctx, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape) {
    const char *who = "kiln_buffer";
    if (!saved_name_ok(ctx, name, who)) return NULL;
    kiln_tensor *t = kiln_tensor_new(ctx, dtype, ndim, shape);
    if (!t) return kiln__err_context("%s '%s'", who, name), NULL;
    if (kiln__owned_grow(ctx, (void **)&ctx->buffers, &ctx->cap_buffers, ctx->n_buffers + 1, sizeof(kiln_tensor *)))
        return NULL;
    ctx->buffers[ctx->n_buffers++] = kiln_tensor_set_name(t, name);
    return t;
}

/* ---- nodes ---- */

/* The call that makes op's nodes, for messages: "kiln_add". The
 * constructors whose op has another name (kiln_broadcast_to's expand,
 * kiln_conv2d's im2col, ...) check what could fail here themselves. */
static const char *api_name(kiln_op op, char buf[48]) {
    snprintf(buf, 48, "kiln_%s", kiln__op_table[op].name);
    return buf;
}

kiln_tensor *kiln__node_new(kiln_ctx *ctx, kiln_op op, kiln_dtype dtype, int ndim, const int64_t *shape, int nsrc,
                            kiln_tensor *const *src) {
    char who[48];
    for (int i = 0; i < nsrc; i++)
        if (!src[i]) return NULL; /* keep the first error */
    if (!ctx) return kiln__err(KILN_ERR_ARG, "%s: ctx is NULL", api_name(op, who));
    if (nsrc > KILN_MAX_SRC) return kiln__err(KILN_ERR_ARG, "%s: too many sources", api_name(op, who));
    for (int i = 0; i < nsrc; i++)
        if (src[i]->ctx != ctx)
            return kiln__err(KILN_ERR_ARG, "%s: source %d belongs to another context", api_name(op, who), i);
    if (!kiln__shape_check(api_name(op, who), ndim, shape)) return NULL;
    if (!kiln__quant_src_ok(op, nsrc, src)) return NULL;
    if (kiln__is_quant(dtype) && kiln__op_table[op].kind != KILN_KIND_VIEW)
        return kiln__err(KILN_ERR_DTYPE, "%s: no op gives a %s result but views of one; use kiln_quantize",
                         api_name(op, who), kiln_dtype_name(dtype));
    kiln_tensor *t = tensor_meta(ctx, dtype, ndim, shape);
    if (!t) return NULL;
    t->op = op;
    t->nsrc = nsrc;
    t->segment = ctx->segment_open;
    bool rg = false;
    for (int i = 0; i < nsrc; i++) {
        t->src[i] = src[i];
        rg |= (src[i]->flags & KILN_FLAG_REQUIRES_GRAD) != 0;
    }
    if (rg && ctx->grad_enabled && kiln__op_table[op].backward) t->flags |= KILN_FLAG_REQUIRES_GRAD;
    return t;
}

/* Quantized views must keep whole blocks: either the view is contiguous
 * (a reshape) with a whole number of blocks, or its rows are: the last dim
 * of stride 1 holding whole blocks, every other stride a whole number of
 * blocks. The byte offset (the caller's) starts a block. */
static bool quant_view_ok(kiln_op op, const kiln_tensor *x, int ndim, const int64_t *shape, const int64_t *stride) {
    const kiln_type_traits *tr = &kiln__types[x->dtype];
    kiln_tensor v = {.ndim = ndim};
    memcpy(v.shape, shape, (size_t)ndim * sizeof *shape);
    memcpy(v.stride, stride, (size_t)ndim * sizeof *stride);
    bool ok = kiln__numel(ndim, shape) % tr->blck == 0 && shape[ndim - 1] % tr->row_blck == 0;
    if (ok && !kiln_tensor_is_contiguous(&v)) {
        ok = stride[ndim - 1] == 1 && shape[ndim - 1] % tr->blck == 0;
        for (int i = 0; ok && i < ndim - 1; i++) ok = shape[i] == 1 || stride[i] % tr->blck == 0;
    }
    if (!ok) {
        char sx[96], sv[96], who[48];
        kiln__err(KILN_ERR_SHAPE, "%s: a view %s of the %s tensor %s would split its blocks of %lld elements",
                  api_name(op, who), kiln__dims_str(ndim, shape, sv), tr->name,
                  kiln__shape_str(x, sx), (long long)tr->blck);
    }
    return ok;
}

kiln_tensor *kiln__view_new(kiln_ctx *ctx, kiln_op op, kiln_tensor *x, int ndim, const int64_t *shape,
                            const int64_t *stride, size_t offs_bytes) {
    if (x && kiln__is_quant(x->dtype) &&
        (!kiln__quant_src_ok(op, 1, &x) ||
         (ndim >= 1 && ndim <= KILN_MAX_DIMS && !quant_view_ok(op, x, ndim, shape, stride))))
        return NULL;
    kiln_tensor *t = kiln__node_new(ctx, op, x ? x->dtype : KILN_F32, ndim, shape, 1, &x);
    if (!t) return NULL;
    memcpy(t->stride, stride, (size_t)ndim * sizeof *stride);
    t->view_src = x->view_src ? x->view_src : x;
    t->view_offs = x->view_offs + offs_bytes;
    if (t->view_src->data) t->data = (char *)t->view_src->data + t->view_offs; /* views of leaves read at once */
    return t;
}

bool kiln_tensor_is_contiguous(const kiln_tensor *t) {
    int64_t s = 1;
    for (int i = t->ndim - 1; i >= 0; i--) {
        if (t->shape[i] != 1 && t->stride[i] != s) return false;
        s *= t->shape[i];
    }
    return true;
}

int kiln__broadcast_shape(const char *op, const kiln_tensor *a, const kiln_tensor *b, int64_t *out) {
    int n = a->ndim > b->ndim ? a->ndim : b->ndim;
    for (int i = 0; i < n; i++) {
        int ia = a->ndim - n + i, ib = b->ndim - n + i;
        int64_t da = ia >= 0 ? a->shape[ia] : 1, db = ib >= 0 ? b->shape[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            char sa[96], sb[96];
            kiln__err(KILN_ERR_SHAPE, "%s: shapes %s and %s do not broadcast (dim %d: %lld vs %lld)", op,
                      kiln__shape_str(a, sa), kiln__shape_str(b, sb), i, (long long)da, (long long)db);
            return -1;
        }
        out[i] = da == 1 ? db : da;
    }
    return n;
}

/* ---- accessors ---- */

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t) { return t->dtype; }
int kiln_tensor_ndim(const kiln_tensor *t) { return t->ndim; }
int64_t kiln_tensor_dim(const kiln_tensor *t, int axis) {
    int a = kiln__axis(t->ndim, axis);
    return a < 0 ? 0 : t->shape[a];
}
const int64_t *kiln_tensor_shape(const kiln_tensor *t) { return t->shape; }
int64_t kiln_tensor_numel(const kiln_tensor *t) { return kiln__numel(t->ndim, t->shape); }
size_t kiln_tensor_nbytes(const kiln_tensor *t) { return kiln__elems_bytes(t->dtype, kiln_tensor_numel(t)); }
const char *kiln_tensor_name(const kiln_tensor *t) { return t->name; }
kiln_tensor *kiln_tensor_set_name(kiln_tensor *t, const char *name) {
    if (t) snprintf(t->name, sizeof t->name, "%s", name ? name : "");
    return t;
}
kiln_tensor *kiln_tensor_grad(const kiln_tensor *t) { return t ? t->grad : NULL; }
bool kiln_tensor_requires_grad(const kiln_tensor *t) { return t && (t->flags & KILN_FLAG_REQUIRES_GRAD); }
/* Why t's bytes do not hold its value, or NULL when they do: a leaf's (or
 * a view of one) always do; a node's only when they are its own, an
 * output's (kiln_graph_add), after a compute wrote them. An intermediate's
 * bytes belong to its graph, which reuses them for later nodes (or never
 * writes them, inside a fused chain) and frees them. Sets t->data for a
 * view made before its output had storage. */
static const char *unreadable(const kiln_tensor *t) {
    const kiln_tensor *o = t->view_src ? t->view_src : t;
    if (o->op != KILN_OP_NONE && !o->storage_bytes)
        return "has no value of its own: pass it to kiln_graph_add and compute the graph to read it";
    if (o->op != KILN_OP_NONE && !(o->flags & KILN_FLAG_COMPUTED))
        return "has not been computed yet: call kiln_graph_compute first";
    ((kiln_tensor *)t)->data = (char *)o->data + (t->view_src ? t->view_offs : 0);
    return NULL;
}

/* The caller may write through the pointer: the host copy becomes the
 * current one (a device copy is refreshed before its next use). */
void *kiln_tensor_data(const kiln_tensor *t) { return t && !unreadable(t) && !kiln__host_write(t) ? t->data : NULL; }

/* Offset (elements) of the i-th element in logical row-major order. */
static int64_t elem_offset(const kiln_tensor *t, int64_t i) {
    int64_t off = 0;
    for (int d = t->ndim - 1; d >= 0; d--) {
        off += (i % t->shape[d]) * t->stride[d];
        i /= t->shape[d];
    }
    return off;
}

static kiln_status check_io(const char *who, const kiln_tensor *t, const void *buf, int64_t n) {
    if (!t || (!buf && n)) return kiln__errs(KILN_ERR_ARG, "%s: NULL argument", who); /* no buffer for no values */
    const char *why = unreadable(t);
    if (why) return kiln__errs(KILN_ERR_STATE, "%s: tensor '%s' (%s) %s", who, t->name, kiln__op_table[t->op].name, why);
    if (n != kiln_tensor_numel(t))
        return kiln__errs(KILN_ERR_SHAPE, "%s: %lld values given for a tensor of %lld elements", who, (long long)n,
                          (long long)kiln_tensor_numel(t));
    return KILN_OK;
}

/* Quantized tensors are written only by kiln_quantize (whole blocks). */
static kiln_status check_writable(const char *who, const kiln_tensor *t) {
    if (t && kiln__is_quant(t->dtype))
        return kiln__errs(KILN_ERR_DTYPE, "%s: '%s' is %s, whose values are set only by kiln_quantize", who, t->name,
                          kiln_dtype_name(t->dtype));
    return KILN_OK;
}

/* Contiguous reads without the per-element walk: a tensor of the buffer's
 * own type copied (a generation step's 32000 logits took 0.3-0.5% of its
 * time element by element), a quantized one dequantized whole. */
static bool get_fast_f32(const kiln_tensor *t, float *dst, int64_t n) {
    if (!n) return true;
    if (!kiln_tensor_is_contiguous(t) || (t->dtype != KILN_F32 && !kiln__is_quant(t->dtype))) return false;
    if (t->dtype == KILN_F32) memcpy(dst, t->data, (size_t)n * sizeof *dst);
    else kiln__types[t->dtype].to_f32(t->data, dst, n);
    return true;
}
static bool get_fast_f64(const kiln_tensor *t, double *dst, int64_t n) {
    if (!n) return true;
    if (t->dtype != KILN_F64 || !kiln_tensor_is_contiguous(t)) return false;
    memcpy(dst, t->data, (size_t)n * sizeof *dst);
    return true;
}

#define DEFINE_IO(suffix, T)                                                                          \
    kiln_status kiln_tensor_set_##suffix(kiln_tensor *t, const T *src, int64_t n) {                   \
        kiln_status s = check_io("kiln_tensor_set_" #suffix, t, src, n);                              \
        if (s || (s = check_writable("kiln_tensor_set_" #suffix, t)) || (s = kiln__host_write(t))) return s; \
        const kiln_type_traits *tr = &kiln__types[t->dtype];                                          \
        for (int64_t i = 0; i < n; i++) tr->set(t->data, elem_offset(t, i), (double)src[i]);         \
        return KILN_OK;                                                                               \
    }                                                                                                 \
    kiln_status kiln_tensor_get_##suffix(const kiln_tensor *t, T *dst, int64_t n) {                   \
        kiln_status s = check_io("kiln_tensor_get_" #suffix, t, dst, n);                              \
        if (s || (s = kiln__host_read(t))) return s;                                                  \
        if (get_fast_##suffix(t, dst, n)) return KILN_OK;                                             \
        const kiln_type_traits *tr = &kiln__types[t->dtype];                                          \
        for (int64_t i = 0; i < n; i++) {                                                             \
            double v = tr->get(t->data, elem_offset(t, i));                                           \
            dst[i] = (T)v;                                                                            \
        }                                                                                             \
        return KILN_OK;                                                                               \
    }
DEFINE_IO(f32, float)
DEFINE_IO(f64, double)

kiln_status kiln_tensor_set_i32(kiln_tensor *t, const int32_t *src, int64_t n) {
    kiln_status s = check_io("kiln_tensor_set_i32", t, src, n);
    if (s || (s = check_writable("kiln_tensor_set_i32", t)) || (s = kiln__host_write(t))) return s;
    const kiln_type_traits *tr = &kiln__types[t->dtype];
    for (int64_t i = 0; i < n; i++) tr->set(t->data, elem_offset(t, i), (double)src[i]);
    return KILN_OK;
}

kiln_status kiln_tensor_get_i32(const kiln_tensor *t, int32_t *dst, int64_t n) {
    kiln_status s = check_io("kiln_tensor_get_i32", t, dst, n);
    if (s || (s = kiln__host_read(t))) return s;
    const kiln_type_traits *tr = &kiln__types[t->dtype];
    for (int64_t i = 0; i < n; i++) {
        double v = tr->get(t->data, elem_offset(t, i));
        dst[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : (int32_t)v;
    }
    return KILN_OK;
}

double kiln_tensor_item(const kiln_tensor *t) {
    if (!t) return kiln__err(KILN_ERR_ARG, "kiln_tensor_item: tensor is NULL"), NAN;
    if (check_io("kiln_tensor_item", t, t, kiln_tensor_numel(t))) return NAN;
    if (!kiln_tensor_numel(t)) {
        char buf[96];
        kiln__err(KILN_ERR_SHAPE, "kiln_tensor_item: '%s' %s has no elements", t->name, kiln__shape_str(t, buf));
        return NAN;
    }
    if (kiln__host_read(t)) return NAN;
    return kiln__types[t->dtype].get(t->data, 0);
}

/* ---- fills ---- */

static kiln_status fill_check(const char *who, kiln_tensor *t) {
    kiln_status s = check_io(who, t, t, t ? kiln_tensor_numel(t) : 0);
    if (!s) s = check_writable(who, t);
    return s ? s : kiln__host_write(t);
}

kiln_status kiln_tensor_fill(kiln_tensor *t, double value) {
    kiln_status s = fill_check("kiln_tensor_fill", t);
    if (s) return s;
    int64_t n = kiln_tensor_numel(t);
    for (int64_t i = 0; i < n; i++) kiln__types[t->dtype].set(t->data, elem_offset(t, i), value);
    return KILN_OK;
}

/* Random fills: element i is a function of (seed, i) only, so threads
 * (whole elements each) give the same values as one. */
typedef struct fill_job {
    kiln_tensor *t;
    uint64_t seed;
    double a, b; /* lo + (hi - lo) u, or mean + std z */
    bool normal;
} fill_job;

static void fill_range(void *arg, int64_t i0, int64_t i1, int tid) {
    const fill_job *j = arg;
    const kiln_type_traits *tr = &kiln__types[j->t->dtype];
    (void)tid;
    for (int64_t i = i0; i < i1; i++)
        tr->set(j->t->data, elem_offset(j->t, i),
                j->a + j->b * (j->normal ? kiln__normal(j->seed, (uint64_t)i) : kiln__uniform01(j->seed, (uint64_t)i)));
}

static void fill_random(kiln_tensor *t, uint64_t seed, double a, double b, bool normal) {
    fill_job j = {t, seed, a, b, normal};
    kiln__pool_for(kiln_tensor_numel(t), 16384, kiln__threads(), fill_range, &j);
}

kiln_status kiln_tensor_fill_uniform(kiln_tensor *t, uint64_t seed, double lo, double hi) {
    kiln_status s = fill_check("kiln_tensor_fill_uniform", t);
    if (!s) fill_random(t, seed, lo, hi - lo, false);
    return s;
}

kiln_status kiln_tensor_fill_randn(kiln_tensor *t, uint64_t seed, double mean, double std) {
    kiln_status s = fill_check("kiln_tensor_fill_randn", t);
    if (!s) fill_random(t, seed, mean, std, true);
    return s;
}

kiln_status kiln_tensor_init_linear(kiln_tensor *t, uint64_t seed, int64_t fan_in) {
    if (fan_in < 1) return kiln__errs(KILN_ERR_ARG, "kiln_tensor_init_linear: fan_in %lld < 1", (long long)fan_in);
    double b = 1.0 / sqrt((double)fan_in);
    return kiln_tensor_fill_uniform(t, seed, -b, b);
}

void kiln_tensor_print(const kiln_tensor *t, FILE *f, int max) {
    char buf[96];
    if (!t) {
        fprintf(f, "(null tensor)\n");
        return;
    }
    fprintf(f, "%s%s%s %s %s", t->name, t->name[0] ? ": " : "", kiln__op_table[t->op].name, kiln_dtype_name(t->dtype),
            kiln__shape_str(t, buf));
    if (!t->data || kiln__host_read(t)) {
        fprintf(f, " (not computed)\n");
        return;
    }
    int64_t n = kiln_tensor_numel(t);
    fprintf(f, " = [");
    for (int64_t i = 0; i < n && i < max; i++)
        fprintf(f, i ? ", %.6g" : "%.6g", kiln__types[t->dtype].get(t->data, elem_offset(t, i)));
    fprintf(f, n > max ? ", ...]\n" : "]\n");
}

/* The ops that take a quantized source: views keeping whole blocks
 * (checked by kiln__view_new), DEQUANTIZE and QMATMUL. */
bool kiln__not_quant(const char *who, const kiln_tensor *t) {
    if (!t || !kiln__is_quant(t->dtype)) return true;
    kiln__err(KILN_ERR_DTYPE, "%s: does not take %s ('%s'); dequantize first (kiln_dequantize)", who,
              kiln_dtype_name(t->dtype), t->name);
    return false;
}

bool kiln__quant_src_ok(kiln_op op, int nsrc, kiln_tensor *const *src) {
    if (op == KILN_OP_VIEW || op == KILN_OP_SLICE || op == KILN_OP_DETACH || op == KILN_OP_DEQUANTIZE || op == KILN_OP_QMATMUL ||
        op == KILN_OP_GET_ROWS) /* get_rows checks its own table */
        return true;
    char who[48];
    for (int i = 0; i < nsrc; i++)
        if (!kiln__not_quant(api_name(op, who), src[i])) return false;
    return true;
}
