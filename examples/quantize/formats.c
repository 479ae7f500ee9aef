/* formats.c — a model's linear weights in each format of the table (see
 * quantize.h): f32 as trained; kiln's block dtypes and RTN / GPTQ packed
 * in the GQ dtypes, really quantized, written to a safetensors file and
 * read back from it, the model running on what it read. */
#include "quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

kiln_status qmodel_snapshot(qmodel *q) {
    for (int k = 0; k < q->n_lin; k++) {
        kiln_tensor *w = q->orig[k] = *q->slot[k];
        if (!(q->values[k] = malloc(sizeof(float) * (size_t)kiln_tensor_numel(w))))
            return kiln_set_error(KILN_ERR_OOM, "out of memory");
        kiln_status s = kiln_tensor_get_f32(w, q->values[k], kiln_tensor_numel(w));
        if (s) return s;
    }
    return KILN_OK;
}

kiln_status qmodel_restore(qmodel *q) {
    for (int k = 0; k < q->n_lin; k++) {
        *q->slot[k] = q->orig[k];
        *q->perm[k] = NULL;
        kiln_status s = kiln_tensor_set_f32(q->orig[k], q->values[k], kiln_tensor_numel(q->orig[k]));
        if (s) return s;
    }
    return KILN_OK;
}

static int64_t file_size(const char *path) {
    struct stat sb;
    return stat(path, &sb) ? -1 : (int64_t)sb.st_size;
}

/* Weight k as dtype t: [rows, cols] when t allows that shape, else its
 * values flattened and zero-padded to whole blocks, [1, padded] (as
 * bitsandbytes blocks the flattened tensor). */
static kiln_tensor *block_quantize(qmodel *q, int k, kiln_dtype t, bool *flat) {
    kiln_tensor *w = q->orig[k];
    *flat = false;
    kiln_tensor *r = kiln_quantize(q->ctx, w, t);
    if (r || kiln_last_status() != KILN_ERR_SHAPE) return r;
    kiln_clear_error();
    *flat = true;
    const int64_t n = kiln_tensor_numel(w), blk = kiln_dtype_block(t), padded = (n + blk - 1) / blk * blk;
    kiln_tensor *f = kiln_new_2d(q->ctx, KILN_F32, 1, padded);
    if (!f) return NULL;
    float *v = kiln_tensor_data(f);
    memcpy(v, q->values[k], sizeof(float) * (size_t)n);
    memset(v + n, 0, sizeof(float) * (size_t)(padded - n));
    kiln_tensor_set_name(f, kiln_tensor_name(w));
    return kiln_quantize(q->ctx, f, t);
}

/* Write every parameter of q to file, linear weight k as stored[k] and,
 * where perms[k] is set, "<weight name without .weight>.perm" after the
 * parameters; then load weight k and its perm back into loaded[k] and
 * lperm[k] (leaves of q->ctx). */
static kiln_status write_read(qmodel *q, const char *file, kiln_tensor **stored, kiln_tensor **perms,
                              const char **meta, int n_meta, kiln_tensor **loaded, kiln_tensor **lperm) {
    kiln_tensor **ts = malloc(sizeof *ts * (size_t)(q->n_params + q->n_lin));
    const char **names = malloc(sizeof *names * (size_t)(q->n_params + q->n_lin));
    char (*pname)[96] = calloc((size_t)q->n_lin, sizeof *pname);
    kiln_status s = ts && names && pname ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "out of memory");
    int n = 0;
    for (int i = 0; !s && i < q->n_params; i++, n++) {
        ts[n] = q->params[i];
        for (int k = 0; k < q->n_lin; k++)
            if (q->params[i] == q->orig[k]) ts[n] = stored[k];
        names[n] = kiln_tensor_name(q->params[i]);
    }
    for (int k = 0; !s && k < q->n_lin; k++) {
        const char *w = kiln_tensor_name(q->orig[k]);
        size_t len = strlen(w);
        if (len > 7 && !strcmp(w + len - 7, ".weight")) len -= 7;
        snprintf(pname[k], sizeof pname[k], "%.*s.perm", (int)len, w);
        if (perms && perms[k]) ts[n] = perms[k], names[n++] = pname[k];
    }
    if (!s) s = kiln_safetensors_save(file, ts, names, n, meta, n_meta);
    kiln_safetensors *st = s ? NULL : kiln_safetensors_open(file);
    if (!s && !st) s = kiln_last_status();
    for (int k = 0; !s && k < q->n_lin; k++) {
        lperm[k] = NULL;
        if (!(loaded[k] = kiln_safetensors_load(st, q->ctx, kiln_tensor_name(q->orig[k])))) s = kiln_last_status();
        else if (perms && perms[k] && !(lperm[k] = kiln_safetensors_load(st, q->ctx, pname[k]))) s = kiln_last_status();
    }
    kiln_safetensors_close(st);
    free(ts);
    free(names);
    free(pname);
    return s;
}

/* The block formats: quantize, write the file, read the weights back from
 * it and run the model on them. */
static kiln_status apply_block(qmodel *q, const format *f, const char *file, fmt_result *out) {
    kiln_tensor *stored[256], *loaded[256], *lperm[256];
    const char **meta = calloc(2 * (size_t)q->n_lin, sizeof *meta);
    char (*shape)[48] = calloc((size_t)q->n_lin, sizeof *shape), (*key)[96] = calloc((size_t)q->n_lin, sizeof *key);
    bool flat[256];
    kiln_status s = meta && shape && key ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "out of memory");
    int n_meta = 0;
    for (int k = 0; !s && k < q->n_lin; k++) {
        if (!(stored[k] = block_quantize(q, k, f->dtype, &flat[k]))) s = kiln_last_status();
        else if (flat[k]) { /* the logical shape, for a reader of the file */
            snprintf(shape[k], sizeof shape[k], "[%lld, %lld]", (long long)kiln_tensor_dim(q->orig[k], 0),
                     (long long)kiln_tensor_dim(q->orig[k], 1));
            snprintf(key[k], sizeof key[k], "shape.%s", kiln_tensor_name(q->orig[k]));
            meta[2 * n_meta] = key[k];
            meta[2 * n_meta++ + 1] = shape[k];
        }
    }
    if (!s) s = write_read(q, file, stored, NULL, meta, n_meta, loaded, lperm);
    for (int k = 0; !s && k < q->n_lin; k++) {
        kiln_tensor *l = loaded[k], *w = l;
        if (flat[k]) { /* f32 again each pass: the first numel values, in the weight's shape */
            const int64_t rows = kiln_tensor_dim(q->orig[k], 0), cols = kiln_tensor_dim(q->orig[k], 1);
            w = kiln_reshape(q->ctx, kiln_contiguous(q->ctx, kiln_slice(q->ctx, kiln_dequantize(q->ctx, l), 1, 0,
                                                                        rows * cols, 1)),
                             2, (int64_t[]){rows, cols});
        }
        if (!w) s = kiln_last_status();
        else {
            *q->slot[k] = w;
            out->weight_bytes += (double)kiln_tensor_nbytes(l);
            out->fused += !flat[k];
            out->dequantized += flat[k];
        }
    }
    out->file_bytes = s ? 0 : file_size(file);
    free(meta);
    free(shape);
    free(key);
    return s;
}

/* The GQ dtype of r's bits whose block (128, 64 or 32, the largest that
 * fits) divides the group r used and the row; KILN_F32 if none does. */
static kiln_dtype gq_dtype(const kiln_gptq_result *r) {
    static const kiln_dtype t[3][3] = {{KILN_GQ2_128, KILN_GQ2_64, KILN_GQ2_32},
                                       {KILN_GQ3_128, KILN_GQ3_64, KILN_GQ3_32},
                                       {KILN_GQ4_128, KILN_GQ4_64, KILN_GQ4_32}};
    if (r->bits < 2 || r->bits > 4) return KILN_F32;
    for (int i = 0; i < 3; i++) {
        const int64_t blk = 128 >> i;
        if (r->group_size % blk == 0 && r->cols % blk == 0) return t[r->bits - 2][i];
    }
    return KILN_F32;
}

/* RTN / GPTQ: quantize (the model runs on the dequantized values meanwhile,
 * so that GPTQ calibrates each layer on the quantized earlier ones), pack
 * each result into its GQ dtype, write the file, read the packed weights
 * and perms back and run the model on them. An act-order weight gets a
 * perm only where a row has two groups or more (GPTQ's g_idx is trivial
 * otherwise). */
static kiln_status apply_gptq(qmodel *q, const format *f, const kiln_gptq_config *cfg, const char *file,
                              const int32_t *calib, int64_t n_calib, int64_t seq, int64_t batch, fmt_result *out) {
    kiln_gptq_result *res[256] = {0};
    kiln_tensor *stored[256], *perms[256], *loaded[256], *lperm[256];
    kiln_gptq_config c = *cfg;
    c.bits = f->bits;
    kiln_status s = q->quantize(q->model, f->kind == FMT_GPTQ ? MODEL_QUANT_GPTQ : MODEL_QUANT_RTN, &c, calib,
                                n_calib, seq, batch, res);
    for (int k = 0; !s && k < q->n_lin; k++) {
        const kiln_dtype t = gq_dtype(res[k]);
        perms[k] = NULL;
        if (res[k]->n_groups == 1) /* one group per row: the columns' order does not matter, keep them in place */
            for (int64_t j = 0; j < res[k]->cols; j++) res[k]->perm[j] = (int32_t)j;
        if (t == KILN_F32)
            s = kiln_set_error(KILN_ERR_SHAPE, "%s: no GQ block (128, 64, 32) divides group %lld and row %lld",
                               kiln_tensor_name(q->orig[k]), (long long)res[k]->group_size, (long long)res[k]->cols);
        else if (!(stored[k] = kiln_gptq_pack(q->ctx, res[k], t, &perms[k]))) s = kiln_last_status();
        else kiln_tensor_set_name(stored[k], kiln_tensor_name(q->orig[k]));
        const int blk = t == KILN_F32 ? 0 : (int)kiln_dtype_block(t);
        if (!s && (!out->block || blk < out->block)) out->block = blk;
        if (!s && blk > out->block_max) out->block_max = blk;
    }
    for (int k = 0; k < q->n_lin; k++) kiln_gptq_result_free(res[k]);
    if (!s) s = write_read(q, file, stored, perms, NULL, 0, loaded, lperm);
    for (int k = 0; !s && k < q->n_lin; k++) {
        *q->slot[k] = loaded[k];
        *q->perm[k] = lperm[k];
        out->weight_bytes += (double)kiln_tensor_nbytes(loaded[k]) + (lperm[k] ? kiln_tensor_nbytes(lperm[k]) : 0);
        out->fused++;
        out->permuted += lperm[k] != NULL;
    }
    out->file_bytes = s ? 0 : file_size(file);
    return s;
}

kiln_status format_apply(qmodel *q, const format *f, const kiln_gptq_config *cfg, const char *file,
                         const int32_t *calib, int64_t n_calib, int64_t seq, int64_t batch, fmt_result *out) {
    *out = (fmt_result){0};
    kiln_status s = qmodel_restore(q);
    for (int k = 0; k < q->n_lin; k++) out->weights += kiln_tensor_numel(q->orig[k]);
    if (s) return s;
    switch (f->kind) {
    case FMT_F32:
        out->weight_bytes = 4.0 * (double)out->weights;
        s = kiln_safetensors_save(file, q->params, NULL, q->n_params, NULL, 0);
        out->file_bytes = s ? 0 : file_size(file);
        return s;
    case FMT_BLOCK:
        return apply_block(q, f, file, out);
    default:
        return apply_gptq(q, f, cfg, file, calib, n_calib, seq, batch, out);
    }
}
