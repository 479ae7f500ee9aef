/* movement.c — CPU kernels of the movement ops that copy: contiguous and
 * cast (any source strides), concat, pad and slice_scatter (contiguous
 * sources), slice_assign (any strides, in place). Copies move bytes, so they work for every dtype. */
#include "internal.h"
#include "strided.h"

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

/* Shared walk of contiguous and cast: work items are blocks of at most
 * BLOCK elements of one innermost row, so a single long strided row is
 * split across threads as well as many short ones. */
static kiln_status strided_copy(kiln_tensor *t, const kiln_exec *ex, bool cast) {
    const kiln_tensor *x = t->src[0];
    kiln_strided s = kiln__strided_of(x);
    int64_t len = kiln__strided_row_len(&s), rows = kiln__strided_rows(&s), n = rows * len;
    int64_t per_row = (len + BLOCK - 1) / BLOCK, items = rows * per_row, istride = s.stride[s.ndim - 1];
    size_t ies = kiln__types[x->dtype].size, oes = kiln__types[t->dtype].size;
    const char *src = x->data;
    char *dst = t->data;
#pragma omp parallel for num_threads(ex->n_threads) if (n > PAR_MIN)
    for (int64_t b = 0; b < items; b++) {
        int64_t r = b / per_row, c0 = (b % per_row) * BLOCK, m = len - c0 < BLOCK ? len - c0 : BLOCK;
        const char *in = src + (size_t)(kiln__strided_row_offset(&s, r) + c0 * istride) * ies;
        char *out = dst + (size_t)(r * len + c0) * oes;
        if (cast) cast_row(x->dtype, in, istride, t->dtype, out, m);
        else copy_row(out, in, istride, m, ies);
    }
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

static kiln_status concat_kernel(kiln_tensor *t, const kiln_exec *ex) {
    int a = (int)t->ip[0];
    int64_t outer = span(t, 0, a), inner = span(t, a + 1, t->ndim), total = t->shape[a];
    size_t es = kiln__types[t->dtype].size;
    int64_t off = 0;
    for (int p = 0; p < t->nsrc; p++) {
        const kiln_tensor *x = t->src[p];
        int64_t len = x->shape[a] * inner;
        const char *src = x->data;
        char *dst = (char *)t->data + (size_t)(off * inner) * es;
#pragma omp parallel for num_threads(ex->n_threads) if (outer * len > PAR_MIN && outer > 1)
        for (int64_t o = 0; o < outer; o++)
            memcpy(dst + (size_t)(o * total * inner) * es, src + (size_t)(o * len) * es, (size_t)len * es);
        off += x->shape[a];
    }
    return KILN_OK;
}

/* Fill n elements of es bytes with one element's bit pattern. */
static void fill_pattern(char *dst, int64_t n, const unsigned char *pat, size_t es) {
    for (int64_t i = 0; i < n; i++) memcpy(dst + (size_t)i * es, pat, es);
}

static kiln_status pad_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[0];
    size_t es = kiln__types[t->dtype].size;
    unsigned char pat[8] = {0};
    kiln__types[t->dtype].set(pat, 0, t->fp[0]);
    int64_t n = kiln_tensor_numel(t);
    fill_pattern(t->data, n, pat, es);
    int nd = x->ndim;
    int64_t len = x->shape[nd - 1], rows = span(x, 0, nd - 1);
    const char *src = x->data;
    char *dst = t->data;
#pragma omp parallel for num_threads(ex->n_threads) if (rows * len > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
        int64_t off = t->ip[2 * (nd - 1)], rem = r; /* row r of x lands at its index + pad before, per dim */
        for (int d = nd - 2; d >= 0; d--) {
            off += (rem % x->shape[d] + t->ip[2 * d]) * t->stride[d];
            rem /= x->shape[d];
        }
        memcpy(dst + (size_t)off * es, src + (size_t)(r * len) * es, (size_t)len * es);
    }
    return KILN_OK;
}

static kiln_status slice_scatter_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *g = t->src[0];
    int a = (int)t->ip[0];
    int64_t start = t->ip[1], step = t->ip[2];
    int64_t outer = span(t, 0, a), inner = span(t, a + 1, t->ndim), d = t->shape[a], len = g->shape[a];
    size_t es = kiln__types[t->dtype].size;
    memset(t->data, 0, (size_t)kiln_tensor_numel(t) * es);
    const char *src = g->data;
    char *dst = t->data;
#pragma omp parallel for num_threads(ex->n_threads) if (outer * len * inner > PAR_MIN && outer > 1)
    for (int64_t o = 0; o < outer; o++)
        for (int64_t j = 0; j < len; j++)
            memcpy(dst + (size_t)((o * d + start + j * step) * inner) * es, src + (size_t)((o * len + j) * inner) * es,
                   (size_t)inner * es);
    return KILN_OK;
}

/* src (any strides) into t's storage at ip[1] along axis ip[0] (t has dst's strides). */
static kiln_status slice_assign_kernel(kiln_tensor *t, const kiln_exec *ex) {
    const kiln_tensor *x = t->src[1];
    int nd = x->ndim, a = (int)t->ip[0];
    size_t es = kiln__types[t->dtype].size;
    int64_t len = nd ? x->shape[nd - 1] : 1, rows = kiln_tensor_numel(x) / (len ? len : 1);
    int64_t is = nd ? x->stride[nd - 1] : 1, os = nd ? t->stride[nd - 1] : 1;
    const char *src = x->data;
    char *dst = (char *)t->data + (size_t)(t->ip[1] * t->stride[a]) * es;
    if (kiln_tensor_numel(x) == 0) return KILN_OK;
#pragma omp parallel for num_threads(ex->n_threads) if (rows * len > PAR_MIN)
    for (int64_t r = 0; r < rows; r++) {
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
