/* llama_qlora.c — a llama quantized on load for QLoRA (see llama_qlora.h). */
#include "llama_qlora.h"

#include <string.h>

typedef struct qlora_types {
    kiln_dtype base, ends;
} qlora_types;

/* llama_new_inference_typed's chooser: the ends in 16 or 32 bits, the
 * layers in base (NF4_DQ only over whole super-blocks, as llama.h says);
 * a layer whose rows are not whole blocks of base (a width under NF4's 64)
 * stays in f32, frozen all the same, where bitsandbytes would quantize the
 * flattened tensor: kiln's blocks never cross a row. */
static kiln_dtype choose(void *user, const char *name, int64_t rows, int64_t cols) {
    const qlora_types *t = user;
    if (!strcmp(name, "tok_embeddings.weight") || !strcmp(name, "output.weight")) return t->ends;
    kiln_dtype d = t->base;
    if (d == KILN_NF4_DQ && (rows * cols) % kiln_dtype_block(KILN_NF4_DQ)) d = KILN_NF4;
    return cols % kiln_dtype_block(d == KILN_NF4_DQ ? KILN_NF4 : d) ? KILN_F32 : d;
}

typedef enum source { NEW, GGUF, HF } source;
static const char *const who[3] = {"llama_qlora_new", "llama_qlora_from_gguf", "llama_qlora_from_hf"};

/* from: the file or directory (src GGUF, HF), or cfg: the shape (NEW) */
static llama *make(kiln_ctx *ctx, source src, const char *from, const llama_config *cfg, kiln_dtype base,
                   kiln_dtype compute) {
    if (src != NEW && !from) {
        kiln_set_error(KILN_ERR_ARG, "%s: the path is NULL", who[src]);
        return NULL;
    }
    if (src == NEW) from = "(new)";
    if (base < 0 || base >= KILN_DTYPE_COUNT || (base != KILN_F32 && !kiln_dtype_is_quantized(base))) {
        kiln_set_error(KILN_ERR_DTYPE, "%s: %s: base = %s must be a quantized dtype (KILN_NF4_DQ) or KILN_F32",
                       who[src], from, base >= 0 && base < KILN_DTYPE_COUNT ? kiln_dtype_name(base) : "?");
        return NULL;
    }
    if (compute != KILN_F32 && compute != KILN_BF16) {
        kiln_set_error(KILN_ERR_DTYPE, "%s: %s: compute = %s must be KILN_F32 or KILN_BF16", who[src], from,
                       compute >= 0 && compute < KILN_DTYPE_COUNT ? kiln_dtype_name(compute) : "?");
        return NULL;
    }
    qlora_types t = {base, compute};
    llama_config c = cfg ? *cfg : llama_defaults();
    llama *m = src == NEW    ? llama_new_inference_typed(ctx, &c, choose, &t, false)
               : src == GGUF ? llama_infer_from_gguf_typed(ctx, from, choose, &t)
                             : llama_infer_from_hf_typed(ctx, from, choose, &t);
    if (m) m->checkpoint = true;
    return m;
}

llama *llama_qlora_from_gguf(kiln_ctx *ctx, const char *path, kiln_dtype base, kiln_dtype compute) {
    return make(ctx, GGUF, path, NULL, base, compute);
}

llama *llama_qlora_from_hf(kiln_ctx *ctx, const char *dir, kiln_dtype base, kiln_dtype compute) {
    return make(ctx, HF, dir, NULL, base, compute);
}

llama *llama_qlora_new(kiln_ctx *ctx, const llama_config *cfg, kiln_dtype base, kiln_dtype compute) {
    return make(ctx, NEW, NULL, cfg, base, compute);
}
