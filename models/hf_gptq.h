/* hf_gptq.h — Hugging Face GPTQ checkpoints (AutoGPTQ / GPTQModel) read
 * into kiln's GPTQ layout (include/kiln_gptq.h), for any model's loader.
 *
 * The settings come from quantize_config.json, or else from config.json's
 * quantization_config (quant_method "gptq"): bits (2, 3, 4 or 8),
 * group_size (-1: one group per row), sym, desc_act (act order) and
 * checkpoint_format ("gptq", the default: qzeros hold zero - 1, as
 * AutoGPTQ writes them; "gptq_v2": the zero itself). Each quantized linear
 * [out, in] is four tensors beside where its .weight would be:
 *   qweight  int32 [in * bits / 32, out]: output column o's codes packed
 *            along the input dim as one little-endian bit stream (code k
 *            at bit bits * k; 3-bit codes run on across words)
 *   qzeros   int32 [groups, out * bits / 32]: each group's zero points,
 *            packed along the output dim the same way
 *   scales   f16 [groups, out]
 *   g_idx    int32 [in]: the group of each input column (absent: column /
 *            group_size); under act order each group is a set of columns
 * w[o, k] = scales[g, o] * (q[o, k] - zero[g, o]) with g = g_idx[k]. A
 * linear becomes a kiln_gptq_result (codes in the file's column order,
 * perm: the columns sorted by group, so that each group is contiguous as
 * kiln's own act order keeps it), which kiln_gptq_pack stores in a GQ
 * dtype of its bits; 8-bit codes, symmetric (zero 128), are stored as
 * Q8_0 blocks, d = scale and q - 128 (exact). What kiln cannot represent
 * is refused with a message naming the file, the tensor and the value:
 * other formats (marlin, bitblas, ...), per-module "dynamic" settings,
 * 8-bit asymmetric codes, groups that are not multiples of 32, a g_idx
 * whose groups are not group_size columns each.
 *
 *     hf_gptq q;
 *     bool found;
 *     if (hf_gptq_config("load", dir, &q, &found)) ...;
 *     kiln_dtype dt = hf_gptq_dtype(&q, "load", (int64_t[]){dim, hidden}, 2);
 *     hf_gptq_files f = {st, st, st, st};   // the safetensors file(s) holding them
 *     kiln_gptq_result *r = hf_gptq_read(&q, "load", dir, "model.layers.0.mlp.up_proj", &f, out, in);
 *     hf_gptq_store(r, "model.layers.0.mlp.up_proj", w, ctx, &perm);  // w [out, in] of dt
 *     kiln_gptq_result_free(r);
 */
#ifndef HF_GPTQ_H
#define HF_GPTQ_H

#include "kiln.h"

typedef struct hf_gptq {
    int bits;
    int64_t group_size; /* -1: per row */
    bool sym, act_order;
    bool v2;            /* checkpoint_format gptq_v2: zeros stored as they are */
    char source[4200];  /* the file the settings came from */
} hf_gptq;

/* dir's GPTQ settings into q, *found true; *found false (KILN_OK) where
 * the directory declares no quantization. */
kiln_status hf_gptq_config(const char *who, const char *dir, hf_gptq *q, bool *found);

/* The dtype that holds linears of q with these input sizes: GQ<bits>_<G>
 * with the largest G of 128, 64, 32 dividing the group size and every
 * size (per row: every size), Q8_0 for 8 bits; KILN_DTYPE_COUNT with the
 * error set. */
kiln_dtype hf_gptq_dtype(const hf_gptq *q, const char *who, const int64_t *cols, int n);

/* The files holding base.qweight, .qzeros, .scales and .g_idx (NULL: no
 * g_idx). */
typedef struct hf_gptq_files {
    kiln_safetensors *qweight, *qzeros, *scales, *g_idx;
} hf_gptq_files;

/* Linear base [rows, cols] as a result (kiln_gptq_result_free), every
 * shape, code, zero, scale and group checked; NULL with the error set. */
kiln_gptq_result *hf_gptq_read(const hf_gptq *q, const char *who, const char *dir, const char *base,
                               const hf_gptq_files *f, int64_t rows, int64_t cols);

/* r's rows src[0 .. n) as its rows 0 .. n: a permutation, or a part of
 * a fused linear (Phi-3's qkv_proj, gate_up_proj). */
kiln_status hf_gptq_take_rows(kiln_gptq_result *r, const int64_t *src, int64_t n);

/* r into dst, a contiguous [rows, cols] tensor (or row view) of
 * hf_gptq_dtype's dtype; *perm: NULL, or a new i32 [cols] leaf of ctx
 * holding r's column order (model.h's model_linear gathers x by it). */
kiln_status hf_gptq_store(const kiln_gptq_result *r, const char *base, kiln_tensor *dst, kiln_ctx *ctx,
                          kiln_tensor **perm);

#endif
