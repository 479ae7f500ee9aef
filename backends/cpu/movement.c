/* movement.c — CPU kernels of the movement ops that copy: contiguous and
 * cast (any source strides), concat, pad and slice_scatter (contiguous
 * sources), slice_assign (any strides, in place). Copies move bytes, so they work for every dtype. */
#include "internal.h"
#include "strided.h"
#include "pool.h"

#define PAR_MIN 32768 /* elements below which a kernel stays on one thread */
#define BLOCK 4096    /* elements per work item of the strided copies */

/* n elements of es bytes from src (element stride istride) to dense dst. */
static void copy_row(char *dst, const char *src, int64_t istride, int64_t n, size_t es) {
    if (istride == 1) {
        memcpy(dst, src, (size_t)n * es);
        return;
    }
    switch (es) {
    case 8:
        for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + 8 * i * istride, 8);
        break;
    case 4:
        for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + 4 * i * istride, 4);
        break;
    case 2:
        for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, src + 2 * i * istride, 2);
        break;
    default:
        for (int64_t i = 0; i < n; i++) memcpy(dst + es * (size_t)i, src + es * (size_t)(i * istride), es);
    }
}

/* n elements of type st (element stride istride) to dense elements of dt. */
static void cast_row(kiln_dtype st, const char *src, int64_t istride, kiln_dtype dt, char *dst, int64_t n) {
    const kiln_type_traits *ts = &kiln__types[st], *td = &kiln__types[dt];
    if (st == KILN_F32 && dt == KILN_F64) {
        const float *s = (const float *)src;
        double *d = (double *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = s[i * istride];
    } else if (st == KILN_F64 && dt == KILN_F32) {
        const double *s = (const double *)src;
        float *d = (float *)dst;
        for (int64_t i = 0; i < n; i++) d[i] = (float)s[i * istride];
    } else if (istride == 1 && st == KILN_F32) {
        td->from_f32((const float *)src, dst, n);
    } else if (istride == 1 && dt == KILN_F32) {
        ts->to_f32(src, (float *)dst, n);
    } else { /* element by element through double */
        for (int64_t i = 0; i < n; i++) td->set(dst, i, ts->get(src, i * istride));
    }
}

/* What a kernel's range function reads: the node, and per kernel a few
 * numbers worked out once. */
typedef struct move_job {
    const kiln_tensor *t, *x;
    kiln_strided s;
    int64_t len, per, inner, off;
    bool cast;
} move_job;

static void copy_items(void *arg, int64_t b0, int64_t b1, int tid) {
    const move_job *j = arg;
    const kiln_tensor *t = j->t, *x = j->x;
    const int64_t len = j->len, istride = j->s.stride[j->s.ndim - 1];
    const size_t ies = kiln__types[x->dtype].size, oes = kiln__types[t->dtype].size;
    (void)tid;
    for (int64_t b = b0; b < b1; b++) {
        int64_t r = b / j->per, c0 = (b % j->per) * BLOCK, m = len - c0 < BLOCK ? len - c0 : BLOCK;
        const char *in = (const char *)x->data + (size_t)(kiln__strided_row_offset(&j->s, r) + c0 * istride) * ies;
        char *out = (char *)t->data + (size_t)(r * len + c0) * oes;
        if (j->cast) cast_row(x->dtype, in, istride, t->dtype, out, m);
        else copy_row(out, in, istride, m, ies);
    }
}

/* Shared walk of contiguous and cast: work items are blocks of at most
 * BLOCK elements of one innermost row, so a single long strided row is
 * split across threads as well as many short ones. */
static kiln_status strided_copy(kiln_tensor *t, const kiln_exec *ex, bool cast) {
    move_job j = {.t = t, .x = t->src[0], .s = kiln__strided_of(t->src[0]), .cast = cast};
    int64_t rows = kiln__strided_rows(&j.s);
    j.len = kiln__strided_row_len(&j.s), j.per = (j.len + BLOCK - 1) / BLOCK;
    kiln__pool_for(rows * j.per, 1, rows * j.len > PAR_MIN ? ex->n_threads : 1, copy_items, &j);
    return KILN_OK;
}

static kiln_status contiguous_kernel(kiln_tensor *t, const kiln_exec *ex) { return strided_copy(t, ex, false); }
static kiln_status cast_kernel(kiln_tensor *t, const kiln_exec *ex) { return strided_copy(t, ex, true); }

/* Product of dims [from, to). */
static int64_t span(const kiln_tensor *t, int from, int to) {
    int64_t n = 1;
    for (int i = from; i < to; i++) n *= t->shape[i];
    return n;
}

/* outer slices [o0, o1) of part x, at offset off along the axis */
static void concat_range(void *arg, int64_t o0, int64_t o1, int tid) {
    const move_job *j = arg;
    const size_t es = kiln__types[j->t->dtype].size;
    const int64_t total = j->t->shape[j->t->ip[0]], len = j->len;
    const char *src = j->x->data;
    char *dst = (char *)j->t->data + (size_t)(j->off * j->inner) * es;
    (void)tid;
    for (int64_t o = o0; o < o1; o++)
        memcpy(dst + (size_t)(o * total * j->inner) * es, src + (size_t)(o * len) * es, (size_t)len * es);
}

static kiln_status concat_kernel(kiln_tensor *t, const kiln_exec *ex) {
    int a = (int)t->ip[0];
    int64_t outer = span(t, 0, a);
    move_job j = {.t = t, .inner = span(t, a + 1, t->ndim)};
    for (int p = 0; p < t->nsrc; p++) {
        j.x = t->src[p], j.len = j.x->shape[a] * j.inner;
        kiln__pool_for(outer, 1, outer * j.len > PAR_MIN && outer > 1 ? ex->n_threads : 1, concat_range, &j);
        j.off += j.x->shape[a];
    }
    return KILN_OK;
}

/* Fill n elements of es bytes with one element's bit pattern. */
static void fill_pattern(char *dst, int64_t n, const unsigned char *pat, size_t es) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, pat, es);
}

static void pad_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const move_job *j = arg;
    const kiln_tensor *t = j->t, *x = j->x;
    const size_t es = kiln__types[t->dtype].size;
    const int nd = x->ndim;
    const int64_t len = j->len;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t off = t->ip[2 * (nd - 1)], rem = r; /* row r of x lands at its index + pad before, per dim */
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % x->shape[d] + t->ip[2 * d]) * t->stride[d];
            rem /= x->shape[d];
        }
        memcpy((char *)t->data + (size_t)off * es, (const char *)x->data + (size_t)(r * len) * es, (size_t)len * es);
    }
}

static kiln_status pad_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[0];
    size_t es = kiln__types[t->dtype].size;
    unsigned char pat[8] = {0};
    kiln__types[t->dtype].set(pat, 0, t->fp[0]);
    int64_t n = kiln_tensor_numel(t);
    fill_pattern(t->data, n, pat, es);
    move_job j = {.t = t, .x = x, .len = x->shape[x->ndim - 1]};
    int64_t rows = span(x, 0, x->ndim - 1);
    kiln__pool_for(rows, 1, rows * j.len > PAR_MIN ? ex->n_threads : 1, pad_rows, &j);
    return KILN_OK;
}

static void scatter_slices(void *arg, int64_t o0, int64_t o1, int tid) {
    const move_job *j = arg;
    const kiln_tensor *t = j->t;
    const int64_t start = t->ip[1], step = t->ip[2], d = t->shape[t->ip[0]], len = j->len, inner = j->inner;
    const size_t es = kiln__types[t->dtype].size;
    const char *src = j->x->data;
    char *dst = t->data;
    (void)tid;
    for (int64_t o = o0; o < o1; o++)
        for (int64_t i = 0; i < len; i++)
            memcpy(dst + (size_t)((o * d + start + i * step) * inner) * es, src + (size_t)((o * len + i) * inner) * es,
                   (size_t)inner * es);
}

static kiln_status slice_scatter_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *g = t->src[0];
    int a = (int)t->ip[0];
    move_job j = {.t = t, .x = g, .len = g->shape[a], .inner = span(t, a + 1, t->ndim)};
    int64_t outer = span(t, 0, a);
    memset(t->data, 0, (size_t)kiln_tensor_numel(t) * kiln__types[t->dtype].size);
    kiln__pool_for(outer, 1, outer * j.len * j.inner > PAR_MIN && outer > 1 ? ex->n_threads : 1, scatter_slices, &j);
    return KILN_OK;
}

static void assign_rows(void *arg, int64_t r0, int64_t r1, int tid) {
    const move_job *j = arg;
    const kiln_tensor *t = j->t, *x = j->x;
    const int nd = x->ndim;
    const size_t es = kiln__types[t->dtype].size;
    const int64_t len = j->len, is = nd ? x->stride[nd - 1] : 1, os = nd ? t->stride[nd - 1] : 1;
    const char *src = x->data;
    char *dst = (char *)t->data + (size_t)(t->ip[1] * t->stride[t->ip[0]]) * es;
    (void)tid;
    for (int64_t r = r0; r < r1; r++) {
        int64_t xo = 0, yo = 0, rem = r;
        for (int d = nd - 2; d >= 0; d--) {
            int64_t c = rem % x->shape[d];
            rem /= x->shape[d];
            xo += c * x->stride[d];
            yo += c * t->stride[d];
        }
        const char *in = src + (size_t)xo * es;
        char *out = dst + (size_t)yo * es;
        if (is == 1 && os == 1) memcpy(out, in, (size_t)len * es);
        else
            for (int64_t i = 0; i < len; i++) memcpy(out + (size_t)(i * os) * es, in + (size_t)(i * is) * es, es);
    }
}

/* src (any strides) into t's storage at ip[1] along axis ip[0] (t has dst's strides). */
static kiln_status slice_assign_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[1];
    const int nd = x->ndim;
    move_job j = {.t = t, .x = x, .len = nd ? x->shape[nd - 1] : 1};
    int64_t rows = kiln_tensor_numel(x) / (j.len ? j.len : 1);
    if (kiln_tensor_numel(x) == 0) return KILN_OK;
    kiln__pool_for(rows, 1, rows * j.len > PAR_MIN ? ex->n_threads : 1, assign_rows, &j);
    return KILN_OK;
}

void kiln__cpu_register_movement(kiln_cpu_kernel *tab) {
    tab[KILN_OP_CONTIGUOUS] = contiguous_kernel;
    tab[KILN_OP_CAST] = cast_kernel;
    tab[KILN_OP_CONCAT] = concat_kernel;
    tab[KILN_OP_PAD] = pad_kernel;
    tab[KILN_OP_SLICE_SCATTER] = slice_scatter_kernel;
    tab[KILN_OP_SLICE_ASSIGN] = slice_assign_kernel;
}
