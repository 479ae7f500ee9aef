/* cu_nn.c — the row ops on the CUDA backend (see cu.h), f32 or f64 (the
 * node and its float sources alike) with contiguous sources: SOFTMAX,
 * LOG_SOFTMAX (causal or not) and SOFTMAX_GRAD; LAYER_NORM, RMS_NORM and
 * their fused backward (packed dx | dw | db, as backends/cpu/nn_norm.c);
 * BATCH_NORM (training; running statistics updated in place) and its
 * backward (backends/cpu/nn_norm_chan.c);
 * CROSS_ENTROPY and CROSS_ENTROPY_GRAD (backends/cpu/nn_loss.c); GET_ROWS
 * (f32, f64, f16 or bf16 table of any strides, or a quantized one through
 * cu_quant.c), SCATTER_ADD_ROWS and ONE_HOT; ROPE (NEOX or interleaved,
 * positions given or 0..T-1) and DROPOUT (the CPU's mask). The kernels
 * are k_nn.cu's. (kiln's row ops take f32 and f64 only: the constructors
 * refuse f16/bf16, so there is no half-precision row kernel to write.)
 * Where the CPU would fail the compute on an index or label out of range,
 * a kernel cannot: get_rows reads a zero row, scatter_add_rows adds
 * nothing, cross_entropy leaves the row out. */
#include "cu.h"

/* f32 or f64 and contiguous: what k_nn.cu's row kernels take */
static bool rowc(const kiln_tensor *t) {
    return (t->dtype == KILN_F32 || t->dtype == KILN_F64) && kiln_tensor_is_contiguous(t);
}

/* s contiguous, of t's dtype */
static bool like(const kiln_tensor *s, const kiln_tensor *t) {
    return s->dtype == t->dtype && kiln_tensor_is_contiguous(s);
}

static bool all_like(const kiln_tensor *t) {
    if (!rowc(t)) return false;
    for (int i = 0; i < t->nsrc; i++)
        if (!like(t->src[i], t)) return false;
    return true;
}

/* cu_kernels.h's code of t's dtype (f32 or f64) */
static int cdt(const kiln_tensor *t) { return t->dtype == KILN_F64 ? CU_F64 : CU_F32; }

static int64_t last_dim(const kiln_tensor *t) { return t->shape[t->ndim - 1]; }

static bool index_ok(const kiln_tensor *ix) { return ix->dtype == KILN_I32 && kiln_tensor_is_contiguous(ix); }

/* Scratch of n doubles, handed back to the cache once the kernels are queued. */
static kiln_devbuf *scratch(kiln_cu *cu, int64_t n) { return kiln__cu_buffer_new(cu, (size_t)n * sizeof(double), false); }

static kiln_status oom(void) { return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM; }

/* ---- softmax ---- */

static bool softmax_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return all_like(t) && (!t->ip[0] || t->ndim >= 2);
}

static kiln_status softmax_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t n = last_dim(t), rows = kiln_tensor_numel(t) / n;
    bool causal = t->ip[0] != 0;
    int64_t mrows = causal ? t->shape[t->ndim - 2] : 1;
    if (t->op == KILN_OP_SOFTMAX_GRAD)
        return kiln__cu_launched(kiln__cu_softmax_grad(cu->stream, cdt(t), rows, n, mrows, causal, t->ip[1] != 0,
                                                       kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t->src[1]), kiln__cu_ptr(t)),
                                 "softmax_grad kernel");
    return kiln__cu_launched(kiln__cu_softmax(cu->stream, cdt(t), rows, n, mrows, causal, t->op == KILN_OP_LOG_SOFTMAX,
                                              kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t)),
                             "softmax kernel");
}

/* ---- layer_norm, rms_norm ---- */

static bool norm_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return all_like(t);
}

static kiln_status norm_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool rms = t->op == KILN_OP_RMS_NORM, has_w = t->ip[0] != 0, has_b = !rms && t->ip[1] != 0;
    int64_t c = last_dim(t), rows = kiln_tensor_numel(t) / c;
    const void *w = has_w ? kiln__cu_ptr(t->src[1]) : NULL, *b = has_b ? kiln__cu_ptr(t->src[1 + has_w]) : NULL;
    return kiln__cu_launched(kiln__cu_norm(cu->stream, cdt(t), rows, c, t->fp[0], rms, kiln__cu_ptr(t->src[0]), w, b, kiln__cu_ptr(t)),
                             "norm kernel");
}

static kiln_status norm_grad_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    bool rms = t->op == KILN_OP_RMS_NORM_GRAD, has_w = t->ip[0] != 0, has_b = !rms && t->ip[1] != 0;
    int64_t c = last_dim(x), rows = kiln_tensor_numel(x) / c;
    const void *w = has_w ? kiln__cu_ptr(t->src[1]) : NULL, *gy = kiln__cu_ptr(t->src[1 + has_w]);
    size_t es = kiln__types[t->dtype].size; /* packed dx | dw | db */
    char *dx = kiln__cu_ptr(t), *dw = has_w ? dx + (size_t)(rows * c) * es : NULL;
    char *db = has_b ? dx + (size_t)((rows + has_w) * c) * es : NULL;
    kiln_devbuf *st = scratch(cu, 2 * rows);
    if (!st) return oom();
    kiln_status s = kiln__cu_launched(kiln__cu_norm_grad(cu->stream, cdt(t), rows, c, t->fp[0], rms, kiln__cu_ptr(x), w, gy, dx, dw,
                                                         db, st->ptr),
                                      "norm_grad kernel");
    kiln__cu_buffer_free(cu, st);
    return s;
}

static bool norm_grad_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0];
    bool rms = t->op == KILN_OP_RMS_NORM_GRAD;
    int64_t c = last_dim(x), nacc = (t->ip[0] != 0) + (!rms && t->ip[1] != 0);
    return all_like(t) && kiln_tensor_numel(t) == kiln_tensor_numel(x) + nacc * c;
}

/* ---- batch_norm (training) and its backward: x viewed as [N, C, S] ---- */

static void chan_dims(const kiln_tensor *x, int64_t *n, int64_t *c, int64_t *s) {
    *n = x->shape[0], *c = x->shape[1], *s = kiln_tensor_numel(x) / (*n * *c);
}

static bool batch_norm_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return all_like(t) && kiln_tensor_numel(t->src[0]) > 0;
}

static kiln_status batch_norm_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    bool has_w = t->ip[0] != 0, has_b = t->ip[1] != 0, has_r = t->ip[2] != 0;
    int64_t n, c, s, iw = 1 + 2 * has_r;
    chan_dims(t->src[0], &n, &c, &s);
    void *rm = has_r ? kiln__cu_ptr(t->src[1]) : NULL, *rv = has_r ? kiln__cu_ptr(t->src[2]) : NULL;
    const void *w = has_w ? kiln__cu_ptr(t->src[iw]) : NULL, *b = has_b ? kiln__cu_ptr(t->src[iw + has_w]) : NULL;
    return kiln__cu_launched(kiln__cu_batch_norm(cu->stream, cdt(t), n, c, s, t->fp[0], t->fp[1], kiln__cu_ptr(t->src[0]),
                                                 rm, rv, w, b, kiln__cu_ptr(t)),
                             "batch_norm kernel");
}

static kiln_status batch_norm_grad_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0];
    bool has_w = t->ip[0] != 0, has_b = t->ip[1] != 0;
    int64_t n, c, s;
    chan_dims(x, &n, &c, &s);
    size_t es = kiln__types[t->dtype].size, numel = (size_t)kiln_tensor_numel(x); /* packed dx | dw | db */
    char *dx = kiln__cu_ptr(t), *dw = has_w ? dx + numel * es : NULL, *db = has_b ? dx + (numel + has_w * c) * es : NULL;
    const void *w = has_w ? kiln__cu_ptr(t->src[1]) : NULL;
    return kiln__cu_launched(kiln__cu_batch_norm_grad(cu->stream, cdt(t), n, c, s, t->fp[0], kiln__cu_ptr(x), w,
                                                      kiln__cu_ptr(t->src[1 + has_w]), dx, dw, db),
                             "batch_norm_grad kernel");
}

/* ---- cross-entropy: src logits [rows, C] (any leading dims), labels i32 [rows]; ip[0] = ignore_index ---- */

static bool ce_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0], *lab = t->src[1];
    bool grad = t->op == KILN_OP_CROSS_ENTROPY_GRAD;
    return rowc(t) && like(x, t) && lab->dtype == KILN_I32 && kiln_tensor_is_contiguous(lab) &&
           kiln_tensor_numel(lab) * last_dim(x) == kiln_tensor_numel(x) && (!grad || like(t->src[2], t));
}

static kiln_status ce_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *x = t->src[0], *lab = t->src[1];
    int64_t c = last_dim(x), rows = kiln_tensor_numel(lab);
    int32_t ignore = (int32_t)t->ip[0];
    bool grad = t->op == KILN_OP_CROSS_ENTROPY_GRAD;
    kiln_devbuf *sc = scratch(cu, grad ? 1 : rows);
    if (!sc) return oom();
    kiln_status s = grad ? kiln__cu_launched(kiln__cu_cross_entropy_grad(cu->stream, cdt(t), rows, c, ignore, kiln__cu_ptr(x),
                                                                         kiln__cu_ptr(lab), kiln__cu_ptr(t->src[2]),
                                                                         kiln__cu_ptr(t), sc->ptr),
                                             "cross_entropy_grad kernel")
                         : kiln__cu_launched(kiln__cu_cross_entropy(cu->stream, cdt(t), rows, c, ignore, kiln__cu_ptr(x),
                                                                    kiln__cu_ptr(lab), kiln__cu_ptr(t), sc->ptr),
                                             "cross_entropy kernel");
    kiln__cu_buffer_free(cu, sc);
    return s;
}

/* ---- get_rows, scatter_add_rows, one_hot ---- */

static bool get_rows_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *table = t->src[0];
    if (kiln__cu_quant(table->dtype) >= 0) return kiln__cu_quant_rows_supports(t);
    bool dt = table->dtype == KILN_F32 || table->dtype == KILN_F16 || table->dtype == KILN_BF16 || table->dtype == KILN_F64;
    return dt && (t->dtype == table->dtype || t->dtype == KILN_F32) && table->ndim == 2 && table->stride[0] >= 0 &&
           table->stride[1] >= 0 && index_ok(t->src[1]);
}

static kiln_status get_rows_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *table = t->src[0], *ix = t->src[1];
    if (kiln__cu_quant(table->dtype) >= 0) return kiln__cu_quant_rows_record(cu, t);
    return kiln__cu_launched(kiln__cu_get_rows(cu->stream, kiln__cu_dtype(table->dtype), kiln__cu_ptr(table), table->shape[0],
                                               table->shape[1], table->stride[0], table->stride[1], kiln__cu_ptr(ix),
                                               kiln_tensor_numel(ix), kiln__cu_dtype(t->dtype), kiln__cu_ptr(t)),
                             "get_rows kernel");
}

static bool scatter_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *rows = t->src[0];
    return rowc(t) && like(rows, t) && t->ndim == 2 && index_ok(t->src[1]) &&
           kiln_tensor_numel(rows) == kiln_tensor_numel(t->src[1]) * t->shape[1];
}

static kiln_status scatter_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *rows = t->src[0], *ix = t->src[1];
    return kiln__cu_launched(kiln__cu_scatter_add_rows(cu->stream, cdt(t), kiln__cu_ptr(rows), kiln__cu_ptr(ix), kiln_tensor_numel(ix),
                                                       t->shape[1], t->shape[0], kiln__cu_ptr(t)),
                             "scatter_add_rows kernel");
}

static bool one_hot_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    bool dt = t->dtype == KILN_F32 || t->dtype == KILN_F16 || t->dtype == KILN_BF16 || t->dtype == KILN_F64;
    return dt && index_ok(t->src[0]) && kiln_tensor_numel(t) == kiln_tensor_numel(t->src[0]) * t->ip[0];
}

static kiln_status one_hot_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    return kiln__cu_launched(kiln__cu_one_hot(cu->stream, kiln__cu_ptr(t->src[0]), kiln_tensor_numel(t->src[0]), t->ip[0],
                                              kiln__cu_dtype(t->dtype), kiln__cu_ptr(t)),
                             "one_hot kernel");
}

/* ---- rope: src x [..., T, D] [, pos i32 [T]]; ip[0]=mode ip[1]=inverse ip[2]=has_pos; fp[0]=theta ---- */

static bool rope_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *x = t->src[0];
    bool has_pos = t->ip[2] != 0;
    return rowc(t) && like(x, t) && t->ndim >= 2 && last_dim(t) % 2 == 0 &&
           (t->ip[0] == KILN_ROPE_NEOX || t->ip[0] == KILN_ROPE_INTERLEAVED) &&
           (!has_pos || (t->nsrc >= 2 && index_ok(t->src[1]) && kiln_tensor_numel(t->src[1]) >= t->shape[t->ndim - 2]));
}

static kiln_status rope_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t d = last_dim(t), tt = t->shape[t->ndim - 2], rows = kiln_tensor_numel(t) / d;
    const int32_t *pos = t->ip[2] ? kiln__cu_ptr(t->src[1]) : NULL;
    return kiln__cu_launched(kiln__cu_rope(cu->stream, cdt(t), kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t), rows, tt, d,
                                           t->ip[0] == KILN_ROPE_INTERLEAVED, pos, t->fp[0], t->ip[1] != 0),
                             "rope kernel");
}

/* ---- dropout: fp[0]=p, ip[0]=seed; the mask's stream mixes the seed with
 * the graph's run (backends/cpu/nn.c), which the kernel reads from
 * cu->run_word: a replayed capture draws each run's mask ---- */

kiln_status kiln__cu_set_run(kiln_backend *b, uint64_t run) {
    kiln_cu *cu = (kiln_cu *)b;
    if (!cu->run_word && !(cu->run_word = kiln__cu_buffer_new(cu, sizeof run, false))) return kiln_last_status();
    return kiln__cu_upload(b, cu->run_word, 0, &run, sizeof run);
}

static bool dropout_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    return rowc(t) && like(t->src[0], t) && t->fp[0] >= 0.0 && t->fp[0] < 1.0;
}

static kiln_status dropout_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    int64_t n = kiln_tensor_numel(t);
    if (!ex->training)
        return kiln__cu_check(cudaMemcpyAsync(kiln__cu_ptr(t), kiln__cu_ptr(t->src[0]), (size_t)n * kiln__types[t->dtype].size,
                                              cudaMemcpyDeviceToDevice, cu->stream),
                              "dropout copy");
    if (!cu->run_word) return kiln__errs(KILN_ERR_STATE, "cuda: dropout: no run number (vt->set_run not called)");
    return kiln__cu_launched(kiln__cu_dropout(cu->stream, cdt(t), kiln__cu_ptr(t->src[0]), kiln__cu_ptr(t), n,
                                              (uint64_t)t->ip[0], (const uint64_t *)cu->run_word->ptr, t->fp[0]),
                             "dropout kernel");
}

void kiln__cu_register_nn(kiln_cu_kernel *tab) {
    kiln__cu_register_conv(tab); /* cu_conv.c */
    tab[KILN_OP_ROPE] = (kiln_cu_kernel){rope_supports, rope_record};
    tab[KILN_OP_DROPOUT] = (kiln_cu_kernel){dropout_supports, dropout_record};
    tab[KILN_OP_SOFTMAX] = tab[KILN_OP_LOG_SOFTMAX] = tab[KILN_OP_SOFTMAX_GRAD] =
        (kiln_cu_kernel){softmax_supports, softmax_record};
    tab[KILN_OP_LAYER_NORM] = tab[KILN_OP_RMS_NORM] = (kiln_cu_kernel){norm_supports, norm_record};
    tab[KILN_OP_BATCH_NORM] = (kiln_cu_kernel){batch_norm_supports, batch_norm_record};
    tab[KILN_OP_BATCH_NORM_GRAD] = (kiln_cu_kernel){batch_norm_supports, batch_norm_grad_record};
    tab[KILN_OP_LAYER_NORM_GRAD] = tab[KILN_OP_RMS_NORM_GRAD] = (kiln_cu_kernel){norm_grad_supports, norm_grad_record};
    tab[KILN_OP_CROSS_ENTROPY] = tab[KILN_OP_CROSS_ENTROPY_GRAD] = (kiln_cu_kernel){ce_supports, ce_record};
    tab[KILN_OP_GET_ROWS] = (kiln_cu_kernel){get_rows_supports, get_rows_record};
    tab[KILN_OP_SCATTER_ADD_ROWS] = (kiln_cu_kernel){scatter_supports, scatter_record};
    tab[KILN_OP_ONE_HOT] = (kiln_cu_kernel){one_hot_supports, one_hot_record};
}
