/* llama_infer.c — filling an inference llama's weights a chunk of rows at
 * a time in their own dtypes (see llama.h): random weights for benchmarks
 * and the loaders' conversions never hold a whole tensor in f32. */
#include "llama.h"

#include <stdlib.h>
#include <string.h>

/* rows and columns of t as a matrix: a 1-d tensor is one row */
static void as_matrix(const kiln_tensor *t, int64_t *rows, int64_t *cols) {
    *rows = kiln_tensor_ndim(t) == 1 ? 1 : kiln_tensor_dim(t, 0);
    *cols = *rows ? kiln_tensor_numel(t) / *rows : 0;
}

static int64_t gcd(int64_t a, int64_t b) {
    while (b) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

int64_t llama_row_chunk(const kiln_tensor *t, int64_t elems) {
    int64_t rows, cols;
    as_matrix(t, &rows, &cols);
    if (rows < 1 || cols < 1) return 1;
    int64_t blk = kiln_dtype_block(kiln_tensor_dtype(t)), step = blk / gcd(cols, blk);
    int64_t n = elems / cols / step * step;
    if (n < step) n = step;
    return n < rows ? n : rows;
}

kiln_status llama_put_rows(kiln_tensor *t, int64_t row0, int64_t rows, const float *src) {
    if (!t || !src) return kiln_set_error(KILN_ERR_ARG, "llama_put_rows: NULL argument");
    int64_t all, cols;
    as_matrix(t, &all, &cols);
    kiln_dtype dt = kiln_tensor_dtype(t);
    int64_t blk = kiln_dtype_block(dt);
    if (row0 < 0 || rows < 1 || row0 > all - rows || (row0 * cols) % blk || (rows * cols) % blk ||
        !kiln_tensor_is_contiguous(t))
        return kiln_set_error(KILN_ERR_ARG,
                              "llama_put_rows: rows %lld..%lld of a contiguous [%lld, %lld] %s in whole blocks of %lld",
                              (long long)row0, (long long)(row0 + rows), (long long)all, (long long)cols,
                              kiln_dtype_name(dt), (long long)blk);
    char *dst = kiln_tensor_data(t);
    if (!dst) return kiln_set_error(KILN_ERR_STATE, "llama_put_rows: '%s' has no storage", kiln_tensor_name(t));
    dst += (size_t)(row0 * cols / blk) * kiln_dtype_size(dt);
    int64_t n = rows * cols;
    if (dt == KILN_F32) {
        memcpy(dst, src, (size_t)n * sizeof *src);
        return KILN_OK;
    }
    kiln_ctx *tmp = kiln_ctx_new();
    kiln_tensor *f = tmp ? kiln_new_2d(tmp, KILN_F32, rows, cols) : NULL;
    kiln_status s = f ? kiln_tensor_set_f32(f, src, n) : KILN_ERR_OOM;
    kiln_tensor *q = NULL;
    if (!s && kiln_dtype_is_quantized(dt)) q = kiln_quantize(tmp, f, dt);
    else if (!s && (q = kiln_new_2d(tmp, dt, rows, cols)) && kiln_tensor_set_f32(q, src, n)) q = NULL;
    if (!s && !q) s = kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    if (!s) memcpy(dst, kiln_tensor_data(q), kiln_tensor_nbytes(q));
    if (s == KILN_ERR_OOM && !tmp) kiln_set_error(s, "llama_put_rows: out of memory");
    kiln_ctx_free(tmp);
    return s;
}

kiln_status llama_init_random(llama *m, uint64_t seed) {
    if (!m) return kiln_set_error(KILN_ERR_ARG, "llama_init_random: NULL model");
    kiln_status s = KILN_OK;
    for (int i = 0; i < m->n_params && !s; i++) {
        kiln_tensor *t = m->params[i];
        if (kiln_tensor_ndim(t) == 1) {
            if (kiln_tensor_dtype(t) == KILN_F32) s = kiln_tensor_fill(t, 1.0);
            continue;
        }
        int64_t rows, cols, step = llama_row_chunk(t, 1 << 20);
        as_matrix(t, &rows, &cols);
        uint64_t base = model_param_seed(seed, kiln_tensor_name(t));
        /* chunks of rows, each drawn and quantized on every core (kiln's
         * random fills and kiln_quantize are threaded) */
        for (int64_t r = 0; r < rows && !s; r += step) {
            int64_t n = rows - r < step ? rows - r : step;
            kiln_ctx *tmp = kiln_ctx_new();
            kiln_tensor *f = tmp ? kiln_new_2d(tmp, KILN_F32, n, cols) : NULL;
            kiln_status e = f ? kiln_tensor_fill_randn(f, base + (uint64_t)r, 0.0, 0.02) : KILN_ERR_OOM;
            if (!e) e = llama_put_rows(t, r, n, kiln_tensor_data(f));
            kiln_ctx_free(tmp);
            if (e) s = kiln_set_error(e, "llama_init_random: %s: %s", kiln_tensor_name(t), kiln_last_error());
        }
    }
    return s;
}

int64_t llama_weight_bytes(const llama *m) {
    int64_t b = 0;
    for (int i = 0; m && i < m->n_params; i++) b += (int64_t)kiln_tensor_nbytes(m->params[i]);
    return b;
}

/* The permutations of n weights: all absent, or all the same i32 values. */
static bool same_perms(kiln_tensor *const *perm, int n) {
    for (int i = 1; i < n; i++) {
        if (!perm[i] != !perm[0]) return false;
        if (!perm[0]) continue;
        const void *a = kiln_tensor_data(perm[0]), *b = kiln_tensor_data(perm[i]);
        if (!a || !b || kiln_tensor_dtype(perm[i]) != kiln_tensor_dtype(perm[0]) ||
            kiln_tensor_nbytes(perm[i]) != kiln_tensor_nbytes(perm[0]) || memcmp(a, b, kiln_tensor_nbytes(perm[0])))
            return false;
    }
    return true;
}

/* One group of a layer (weights w, permutations perm): a new stack of
 * their rows where the one recorded (stack, made, perm_made) does not
 * serve them and they can be stacked. Row-wise dtypes (f32, Q8_0, Q4_0,
 * NF4, GQ...) keep a contiguous tensor's rows in order, whole blocks when
 * each part starts on a block, so stacking is concatenating bytes. */
static kiln_status stack_group(llama *m, kiln_tensor **stack, kiln_tensor **made, kiln_tensor **perm_made,
                               kiln_tensor *const *w, kiln_tensor *const *perm, int n) {
    bool current = *stack != NULL;
    for (int i = 0; current && i < n; i++) current = made[i] == w[i] && perm_made[i] == perm[i];
    if (current) return KILN_OK;
    kiln_dtype dt = kiln_tensor_dtype(w[0]);
    int64_t cols = kiln_tensor_ndim(w[0]) == 2 ? kiln_tensor_dim(w[0], 1) : 0, rows = 0;
    for (int i = 0; i < n; i++) {
        if (kiln_tensor_dtype(w[i]) != dt || kiln_tensor_ndim(w[i]) != 2 || kiln_tensor_dim(w[i], 1) != cols ||
            !kiln_tensor_is_contiguous(w[i]) || kiln_tensor_requires_grad(w[i]) || (rows * cols) % kiln_dtype_block(dt))
            return KILN_OK;
        rows += kiln_tensor_dim(w[i], 0);
    }
    if (!same_perms(perm, n)) return KILN_OK;
    kiln_tensor *s = kiln_tensor_new(m->ctx, dt, 2, (int64_t[]){rows, cols});
    char *dst = s ? kiln_tensor_data(s) : NULL;
    if (!dst) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    for (int i = 0; i < n; i++) {
        const void *src = kiln_tensor_data(w[i]);
        if (!src) return kiln_set_error(KILN_ERR_STATE, "llama_stack_weights: '%s' has no storage", kiln_tensor_name(w[i]));
        memcpy(dst, src, kiln_tensor_nbytes(w[i]));
        dst += kiln_tensor_nbytes(w[i]);
    }
    *stack = s;
    for (int i = 0; i < n; i++) made[i] = w[i], perm_made[i] = perm[i];
    return KILN_OK;
}

kiln_status llama_stack_weights(llama *m) {
    if (!m) return kiln_set_error(KILN_ERR_ARG, "llama_stack_weights: NULL model");
    kiln_status s = KILN_OK;
    for (int l = 0; l < m->cfg.layers && !s; l++) {
        llama_layer *y = &m->layers[l];
        s = stack_group(m, &y->wqkv, y->stacked_of, y->stacked_perm, (kiln_tensor *const[]){y->wq, y->wk, y->wv},
                        (kiln_tensor *const[]){y->wq_perm, y->wk_perm, y->wv_perm}, 3);
        if (!s)
            s = stack_group(m, &y->w13, y->stacked_of + 3, y->stacked_perm + 3, (kiln_tensor *const[]){y->w1, y->w3},
                            (kiln_tensor *const[]){y->w1_perm, y->w3_perm}, 2);
    }
    if (!s) m->fuse = true;
    return s;
}
