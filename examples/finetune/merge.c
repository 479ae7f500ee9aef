/* merge.c — --merge-to over a quantized base, as PEFT's merge_and_unload
 * does for a bitsandbytes 4-bit layer: dequantize W, add (alpha / r) B A,
 * and only then write the requested dtype. lora_merge on the NF4_DQ
 * weights themselves would quantize W + BA back to 4 bits before the
 * writer converts it again: two roundings, and an update smaller than
 * NF4's steps lost. */
#include "finetune.h"

#include <stdlib.h>

static kiln_dtype f32(void *user, const char *name, int64_t rows, int64_t cols) {
    (void)user, (void)name, (void)rows, (void)cols;
    return KILN_F32;
}

/* dst's values from src's, dequantized (the same shape; a 1-d tensor is one row) */
static kiln_status copy_f32(kiln_tensor *dst, const kiln_tensor *src) {
    int64_t n = kiln_tensor_numel(src), rows = kiln_tensor_ndim(src) > 1 ? kiln_tensor_dim(src, 0) : 1;
    float *v = malloc((size_t)n * sizeof *v);
    kiln_status s = v ? kiln_tensor_get_f32(src, v, n) : kiln_set_error(KILN_ERR_OOM, "--merge-to: out of memory");
    if (!s) s = llama_put_rows(dst, 0, rows, v);
    free(v);
    return s;
}

llama *merge_dequantized(const llama *m, lora *l) {
    llama *d = llama_new_inference_typed(m->ctx, &m->cfg, f32, NULL, m->tied);
    kiln_status s = d ? KILN_OK : kiln_last_status();
    if (!s && d->n_params != m->n_params)
        s = kiln_set_error(KILN_ERR_STATE, "--merge-to: the f32 copy has %d parameters, the model %d", d->n_params,
                           m->n_params);
    for (int i = 0; !s && i < m->n_params; i++) s = copy_f32(d->params[i], m->params[i]);
    if (!s && m->rope_freqs) s = copy_f32(d->rope_freqs, m->rope_freqs);
    /* the adapters' weights pointed at the copy's for lora_merge, then back */
    kiln_tensor **was = s ? NULL : calloc((size_t)l->n_layers, sizeof *was);
    if (!s && !was) s = kiln_set_error(KILN_ERR_OOM, "--merge-to: out of memory");
    for (int k = 0; !s && k < l->n_layers; k++) {
        int i = 0;
        while (i < m->n_params && m->params[i] != l->layers[k].w) i++;
        if (i == m->n_params)
            s = kiln_set_error(KILN_ERR_STATE, "--merge-to: %s's weight is not the model's", l->layers[k].module);
        was[k] = l->layers[k].w;
        if (!s) l->layers[k].w = d->params[i];
    }
    if (!s) s = lora_merge(l);
    for (int k = 0; was && k < l->n_layers && was[k]; k++) l->layers[k].w = was[k];
    free(was);
    if (s) llama_free(d);
    return s ? NULL : d;
}
