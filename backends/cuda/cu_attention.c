/* cu_attention.c — ATTENTION and ATTENTION_GRAD on the CUDA backend (see
 * cu.h): f32 or f64 (every operand alike), contiguous q [B, Hq, T, D], k [B, Hk, S, D],
 * v [B, Hk, S, Dv], head sizes up to 256. f32 with D, Dv <= 128 runs the
 * tiled FlashAttention-2 style kernels (k_attention_flash.cu, decoding
 * with the keys split over blocks); the rest the row kernels of
 * k_attention.cu (one thread per head element). Under KILN_MATMUL_TF32
 * ($KILN_CUDA_TF32) or KILN_MATMUL_BF16, as cuBLAS's products, the tiled
 * kernels' products run on tensor cores where their shapes fit
 * (k_attention_flash_tc.cu: D, Dv multiples of 16); graph replay's key
 * holds the precision (core/graph_replay.c).
 * The forward writes the packed [O | L] of ops/nn_attention.c; the
 * backward reads it (src 3) and dO (src 4) and writes packed [dq | dk | dv].
 * ATTENTION_CACHED (kiln_attention_cached) writes the rows' keys and
 * values into the caches, then attends over each row's sequence up to its
 * position, read from device memory: tiles of a kv head's query slots
 * against K/V tiles in shared memory, the keys split over blocks when few
 * tiles face a long cache (k_attention_cached.cu, D, Dv <= 256 in f32,
 * <= 128 in f64); larger heads a block per (row, query head) (k_attention.cu). */
#include "cu.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_HEAD = 256, FLASH_HEAD = 128 }; /* k_attention.cu's THREADS; k_attention_flash.cu's tiles */

/* t's dtype (f32 or f64), contiguous */
static bool like(const kiln_tensor *s, const kiln_tensor *t) {
    return (t->dtype == KILN_F32 || t->dtype == KILN_F64) && s->dtype == t->dtype && kiln_tensor_is_contiguous(s);
}

static void shape_of(const kiln_tensor *t, int64_t sh[7]) {
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    sh[0] = q->shape[0], sh[1] = q->shape[1], sh[2] = k->shape[1], sh[3] = q->shape[2], sh[4] = k->shape[2];
    sh[5] = q->shape[3], sh[6] = v->shape[3];
}

static bool attention_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    if (!like(t, t) || !like(q, t) || !like(k, t) || !like(v, t) || q->ndim != 4 || k->ndim != 4 || v->ndim != 4) return false;
    int64_t sh[7];
    shape_of(t, sh);
    if (sh[2] <= 0 || sh[1] % sh[2] || sh[5] > MAX_HEAD || sh[6] > MAX_HEAD) return false;
    int64_t no = sh[0] * sh[1] * sh[3] * sh[6], nl = sh[0] * sh[1] * sh[3];
    if (t->op == KILN_OP_ATTENTION) return kiln_tensor_numel(t) == no + nl;
    const kiln_tensor *fwd = t->src[3], *dout = t->src[4];
    return like(fwd, t) && like(dout, t) && kiln_tensor_numel(fwd) == no + nl && kiln_tensor_numel(dout) == no &&
           kiln_tensor_numel(t) == kiln_tensor_numel(q) + kiln_tensor_numel(k) + kiln_tensor_numel(v);
}

/* The tensor-core mode of f32 products (cu_matmul.c's choice), 0 for exact f32. */
static int tc_mode(const kiln_cu *cu) {
    kiln_matmul_precision p = kiln_get_matmul_precision();
    return p == KILN_MATMUL_BF16 ? CU_TC_BF16 : p == KILN_MATMUL_TF32 || cu->tf32 ? CU_TC_TF32 : 0;
}

static kiln_status attention_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    int64_t sh[7];
    shape_of(t, sh);
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    int64_t rows = sh[0] * sh[1] * sh[3], no = rows * sh[6];
    size_t es = kiln__types[t->dtype].size;
    int dt = t->dtype == KILN_F64 ? CU_F64 : CU_F32, causal = t->ip[0] != 0;
    bool flash = dt == CU_F32 && sh[5] <= FLASH_HEAD && sh[6] <= FLASH_HEAD;
    int tc = flash && kiln__cu_flash_tc_fits(sh, t->op == KILN_OP_ATTENTION_GRAD) ? tc_mode(cu) : 0;
    if (t->op == KILN_OP_ATTENTION && tc) {
        float *o = kiln__cu_ptr(t);
        return kiln__cu_launched(kiln__cu_flash_attention_tc(cu->stream, tc, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                             kiln__cu_ptr(k), kiln__cu_ptr(v), o, o + no),
                                 "tensor-core flash attention kernel");
    }
    if (t->op == KILN_OP_ATTENTION && flash) {
        float *o = kiln__cu_ptr(t);
        int nsplit = kiln__cu_flash_splits(sh);
        kiln_devbuf *part = NULL; /* the splits' partial O and L */
        if (nsplit > 1 && !(part = kiln__cu_buffer_new(cu, (size_t)(nsplit * (no + rows)) * sizeof(float), false)))
            return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
        kiln_status s = kiln__cu_launched(kiln__cu_flash_attention(cu->stream, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                                   kiln__cu_ptr(k), kiln__cu_ptr(v), o, o + no, nsplit,
                                                                   part ? part->ptr : NULL),
                                          "flash attention kernel");
        if (part) kiln__cu_buffer_free(cu, part);
        return s;
    }
    if (t->op == KILN_OP_ATTENTION) {
        char *o = kiln__cu_ptr(t);
        return kiln__cu_launched(kiln__cu_attention(cu->stream, dt, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                    kiln__cu_ptr(k), kiln__cu_ptr(v), o, o + (size_t)no * es),
                                 "attention kernel");
    }
    const char *fo = kiln__cu_ptr(t->src[3]);
    char *dq = kiln__cu_ptr(t), *dk = dq + (size_t)kiln_tensor_numel(q) * es, *dv = dk + (size_t)kiln_tensor_numel(k) * es;
    kiln_devbuf *di = kiln__cu_buffer_new(cu, (size_t)rows * sizeof(double), false);
    if (!di) return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    kiln_status s;
    if (tc)
        s = kiln__cu_launched(kiln__cu_flash_attention_grad_tc(cu->stream, tc, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                               kiln__cu_ptr(k), kiln__cu_ptr(v), (const float *)fo,
                                                               (const float *)fo + no, kiln__cu_ptr(t->src[4]),
                                                               (float *)dq, (float *)dk, (float *)dv, di->ptr),
                              "tensor-core flash attention_grad kernel");
    else if (flash)
        s = kiln__cu_launched(kiln__cu_flash_attention_grad(cu->stream, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                            kiln__cu_ptr(k), kiln__cu_ptr(v), (const float *)fo,
                                                            (const float *)fo + no, kiln__cu_ptr(t->src[4]),
                                                            (float *)dq, (float *)dk, (float *)dv, di->ptr),
                              "flash attention_grad kernel");
    else
        s = kiln__cu_launched(kiln__cu_attention_grad(cu->stream, dt, sh, causal, t->fp[0], kiln__cu_ptr(q),
                                                      kiln__cu_ptr(k), kiln__cu_ptr(v), fo, fo + (size_t)no * es,
                                                      kiln__cu_ptr(t->src[4]), dq, dk, dv, di->ptr),
                              "attention_grad kernel");
    kiln__cu_buffer_free(cu, di);
    return s;
}

/* ATTENTION_CACHED src q, k, v, k_cache, v_cache, seq, pos (see
 * kiln_attention_cached): the float operands in the node's dtype, all
 * contiguous. seq and pos stay in device memory, read by the kernels. */
static bool cached_supports(const kiln_cu *cu, const kiln_tensor *t) {
    (void)cu;
    for (int i = 0; i < 5; i++)
        if (!like(t->src[i], t)) return false;
    for (int i = 5; i < 7; i++)
        if (t->src[i]->dtype != KILN_I32 || !kiln_tensor_is_contiguous(t->src[i])) return false;
    return like(t, t) && t->src[1]->shape[2] <= MAX_HEAD && t->src[2]->shape[2] <= MAX_HEAD;
}

enum { ROWS_WORDS = 6 }; /* flag, row, seq, pos, B, S */

/* KILN_ATTN_CACHED=rows: the per-row kernel for every shape (tests reach it). */
static bool rows_forced(void) {
    const char *e = getenv("KILN_ATTN_CACHED");
    return e && !strcmp(e, "rows");
}

/* The rows' keys and values into the caches, before any read. */
static kiln_status cached_write(kiln_cu *cu, const kiln_tensor *t, const int64_t sh[7], int dt) {
    /* made at a graph's first compute, never in a capture (core records at the second) */
    if (!cu->rows_word && !cu->capturing && !(cu->rows_word = kiln__cu_buffer_new(cu, ROWS_WORDS * sizeof(int32_t), true)))
        return kiln_last_status();
    if (!cu->rows_word) return kiln__errs(KILN_ERR_STATE, "cuda: attention_cached: no row word in a capture");
    return kiln__cu_launched(kiln__cu_attention_cache_write(cu->stream, dt, sh, kiln__cu_ptr(t->src[5]),
                                                            kiln__cu_ptr(t->src[6]), kiln__cu_ptr(t->src[1]),
                                                            kiln__cu_ptr(t->src[2]), kiln__cu_ptr(t->src[3]),
                                                            kiln__cu_ptr(t->src[4]), (int32_t *)cu->rows_word->ptr),
                             "attention_cached write kernel");
}

static kiln_status cached_record(kiln_cu *cu, kiln_tensor *t, const kiln_exec *ex) {
    (void)ex;
    const kiln_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2], *kc = t->src[3];
    const int64_t sh[7] = {q->shape[0], q->shape[1], k->shape[1], kc->shape[0], kc->shape[2], k->shape[2], v->shape[2]};
    if (!sh[0]) return KILN_OK;
    int dt = t->dtype == KILN_F64 ? CU_F64 : CU_F32;
    kiln_status s = cached_write(cu, t, sh, dt);
    if (s) return s;
    const int32_t *seq = kiln__cu_ptr(t->src[5]), *pos = kiln__cu_ptr(t->src[6]);
    int nsplit = rows_forced() ? 0 : kiln__cu_attention_cached_splits(dt, sh, t->ip[0]);
    if (!nsplit)
        return kiln__cu_launched(kiln__cu_attention_cached(cu->stream, dt, sh, t->ip[0], t->fp[0], t->fp[1], seq, pos,
                                                           kiln__cu_ptr(q), kiln__cu_ptr(kc), kiln__cu_ptr(t->src[4]),
                                                           kiln__cu_ptr(t)),
                                 "attention_cached kernel");
    kiln_devbuf *part = NULL; /* the splits' partial O and L */
    size_t es = kiln__types[t->dtype].size;
    size_t bytes = (size_t)nsplit * (size_t)(sh[0] * sh[1] * (sh[6] + 1)) * es;
    if (nsplit > 1 && !(part = kiln__cu_buffer_new(cu, bytes, false)))
        return kiln_last_status() ? kiln_last_status() : KILN_ERR_OOM;
    s = kiln__cu_launched(kiln__cu_attention_cached_tiles(cu->stream, dt, sh, t->ip[0], t->fp[0], t->fp[1], nsplit,
                                                          seq, pos, kiln__cu_ptr(q), kiln__cu_ptr(kc),
                                                          kiln__cu_ptr(t->src[4]), kiln__cu_ptr(t),
                                                          part ? part->ptr : NULL),
                          "attention_cached tile kernel");
    if (part) kiln__cu_buffer_free(cu, part);
    return s;
}

kiln_status kiln__cu_rows_error(kiln_backend *b) {
    kiln_cu *cu = (kiln_cu *)b;
    int32_t w[ROWS_WORDS];
    kiln_status s = cu->rows_word ? kiln__cu_download(b, cu->rows_word, 0, w, sizeof w) : KILN_OK;
    if (s || !cu->rows_word || !w[0]) return s;
    if ((s = kiln__cu_zero(b, cu->rows_word, 0, sizeof w))) return s;
    return kiln__errs(KILN_ERR_ARG, "attention_cached: row %d's sequence %d, position %d is outside the cache's %d "
                      "sequences of %d positions", w[1], w[2], w[3], w[4], w[5]);
}

void kiln__cu_register_attention(kiln_cu_kernel *tab) {
    tab[KILN_OP_ATTENTION] = tab[KILN_OP_ATTENTION_GRAD] = (kiln_cu_kernel){attention_supports, attention_record};
    tab[KILN_OP_ATTENTION_CACHED] = (kiln_cu_kernel){cached_supports, cached_record};
}
