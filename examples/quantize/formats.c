/* formats.c — a model's linear weights in each format of the table (see
 * quantize.h): f32 as trained; kiln's block dtypes, really quantized,
 * written to a safetensors file and read back from it; RTN and GPTQ in
 * the GPTQ layout, as their dequantized values, with the packed size
 * computed from the layout. */
#include "quantize.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int64_t gptq_packed_bytes(int64_t rows, int64_t cols, int bits, int64_t group, bool act_order) {
    const int64_t g = group > 0 && group < cols ? group : cols, full = cols / g, tail = cols % g;
    const int64_t per_row = full * (3 + (g * bits + 7) / 8) + (tail ? 3 + (tail * bits + 7) / 8 : 0);
    return rows * per_row + (act_order && g < cols ? 4 * cols : 0); /* one group: g_idx all 0, not stored */
}

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

/* The block formats: quantize, write the file, read the weights back from
 * it and run the model on them. */
static kiln_status apply_block(qmodel *q, const format *f, const char *file, fmt_result *out) {
    kiln_tensor **ts = malloc(sizeof *ts * (size_t)q->n_params), *stored[256];
    const char **meta = calloc(2 * (size_t)q->n_lin, sizeof *meta);
    char (*shape)[48] = calloc((size_t)q->n_lin, sizeof *shape), (*key)[96] = calloc((size_t)q->n_lin, sizeof *key);
    bool flat[256];
    kiln_status s = ts && meta && shape && key ? KILN_OK : kiln_set_error(KILN_ERR_OOM, "out of memory");
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
    for (int i = 0; !s && i < q->n_params; i++) {
        ts[i] = q->params[i];
        for (int k = 0; k < q->n_lin; k++)
            if (q->params[i] == q->orig[k]) ts[i] = stored[k];
    }
    if (!s) s = kiln_safetensors_save(file, ts, NULL, q->n_params, meta, n_meta);
    kiln_safetensors *st = s ? NULL : kiln_safetensors_open(file);
    if (!s && !st) s = kiln_last_status();
    for (int k = 0; !s && k < q->n_lin; k++) {
        kiln_tensor *l = kiln_safetensors_load(st, q->ctx, kiln_tensor_name(q->orig[k])), *w = l;
        if (l && flat[k]) { /* f32 again each pass: the first numel values, in the weight's shape */
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
    kiln_safetensors_close(st);
    out->file_bytes = s ? 0 : file_size(file);
    free(ts);
    free(meta);
    free(shape);
    free(key);
    return s;
}

kiln_status format_apply(qmodel *q, const format *f, const kiln_gptq_config *cfg, const char *file,
                         const int32_t *calib, int64_t n_calib, int64_t seq, int64_t batch, fmt_result *out) {
    *out = (fmt_result){0};
    kiln_status s = qmodel_restore(q);
    int64_t other = 0; /* bytes of the parameters that stay f32 */
    for (int i = 0; i < q->n_params; i++) other += (int64_t)kiln_tensor_nbytes(q->params[i]);
    for (int k = 0; k < q->n_lin; k++) {
        out->weights += kiln_tensor_numel(q->orig[k]);
        other -= (int64_t)kiln_tensor_nbytes(q->orig[k]);
    }
    if (s) return s;
    switch (f->kind) {
    case FMT_F32:
        out->weight_bytes = 4.0 * (double)out->weights;
        s = kiln_safetensors_save(file, q->params, NULL, q->n_params, NULL, 0);
        out->file_bytes = s ? 0 : file_size(file);
        return s;
    case FMT_BLOCK:
        return apply_block(q, f, file, out);
    default: {
        kiln_gptq_config c = *cfg;
        c.bits = f->bits;
        s = q->quantize(q->model, f->kind == FMT_GPTQ ? MODEL_QUANT_GPTQ : MODEL_QUANT_RTN, &c, calib, n_calib, seq,
                        batch);
        for (int k = 0; !s && k < q->n_lin; k++)
            out->weight_bytes += (double)gptq_packed_bytes(kiln_tensor_dim(q->orig[k], 0),
                                                           kiln_tensor_dim(q->orig[k], 1), c.bits, c.group_size,
                                                           f->kind == FMT_GPTQ && c.act_order);
        out->file_bytes = other + (int64_t)out->weight_bytes;
        out->computed = true;
        return s;
    }
    }
}
