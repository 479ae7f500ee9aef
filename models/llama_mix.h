/* llama_mix.h — llama.cpp's quantization mixes (its llama_ftype): which
 * type llama-quantize gives each tensor of a llama GGUF, so that kiln's
 * writer (llama_files.h's llama_save_gguf_mix) and generate --make-random
 * make the files people download, tensor type for tensor type.
 *
 * A mix has a base type (Q4_K for Q4_K_M) that most weights take; the rules
 * of llama.cpp's llama_tensor_get_type (src/llama-quant.cpp, without an
 * importance matrix, for dense models of the llama architecture) then
 * raise some tensors:
 *  - output.weight (token_embd.weight when the head is tied): Q6_K, unless
 *    the base is Q8_0, or Q8_0 when the width is not whole base blocks;
 *  - attn_v: Q2_K -> Q4_K (n_gqa >= 4) or Q3_K; Q2_K_S -> Q4_K (n_gqa >= 4);
 *    Q3_K_M -> Q5_K on the first two layers, else Q4_K; Q3_K_L -> Q5_K;
 *    IQ4_NL / IQ4_XS -> Q5_K (n_gqa >= 4); Q4_K_M / Q5_K_M -> Q6_K on the
 *    "more bits" layers (the first and last eighth and every third
 *    between); Q4_K_S -> Q5_K on the first four layers;
 *  - ffn_down: Q2_K -> Q3_K; Q2_K_S -> Q4_K on the first eighth; Q3_K_M ->
 *    Q5_K on the first sixteenth, else Q4_K; Q3_K_L -> Q5_K; Q4_K_M /
 *    Q5_K_M -> Q6_K on the more-bits layers; IQ4_NL / IQ4_XS and Q4_K_S ->
 *    Q5_K on the first eighth;
 *  - attn_output: Q2_K -> Q3_K, Q3_K_M -> Q4_K, Q3_K_L -> Q5_K;
 *  - a weight whose width is not whole blocks of its type falls back as
 *    llama.cpp's does (Q2_K / Q3_K -> Q4_0, Q4_K -> Q5_0, Q5_K -> Q5_1,
 *    Q6_K -> Q8_0, IQ4_XS -> IQ4_NL; F16 if still not whole blocks).
 * Norms stay F32; F32, F16 and BF16 "mixes" are every weight in that type.
 *
 *     llama_ftype f = llama_ftype_parse("Q4_K_M");               // 15
 *     kiln_dtype t = llama_mix_dtype(f, &m->cfg, false, "blk.1.attn_v.weight", 256);
 */
#ifndef LLAMA_MIX_H
#define LLAMA_MIX_H

#include "llama.h"

/* llama.cpp's numbers: general.file_type in a GGUF. */
typedef enum llama_ftype {
    LLAMA_FTYPE_ALL_F32 = 0,
    LLAMA_FTYPE_MOSTLY_F16 = 1,
    LLAMA_FTYPE_MOSTLY_Q4_0 = 2,
    LLAMA_FTYPE_MOSTLY_Q4_1 = 3,
    LLAMA_FTYPE_MOSTLY_Q8_0 = 7,
    LLAMA_FTYPE_MOSTLY_Q5_0 = 8,
    LLAMA_FTYPE_MOSTLY_Q5_1 = 9,
    LLAMA_FTYPE_MOSTLY_Q2_K = 10,
    LLAMA_FTYPE_MOSTLY_Q3_K_S = 11,
    LLAMA_FTYPE_MOSTLY_Q3_K_M = 12,
    LLAMA_FTYPE_MOSTLY_Q3_K_L = 13,
    LLAMA_FTYPE_MOSTLY_Q4_K_S = 14,
    LLAMA_FTYPE_MOSTLY_Q4_K_M = 15,
    LLAMA_FTYPE_MOSTLY_Q5_K_S = 16,
    LLAMA_FTYPE_MOSTLY_Q5_K_M = 17,
    LLAMA_FTYPE_MOSTLY_Q6_K = 18,
    LLAMA_FTYPE_MOSTLY_Q2_K_S = 21,
    LLAMA_FTYPE_MOSTLY_IQ4_NL = 25,
    LLAMA_FTYPE_MOSTLY_IQ4_XS = 30,
    LLAMA_FTYPE_MOSTLY_BF16 = 32,
    /* not llama.cpp's: llama_save_gguf_mix writes each weight in the dtype
     * it has (general.file_type from the commonest, as llama.cpp guesses) */
    LLAMA_FTYPE_AS_STORED = -1,
    LLAMA_FTYPE_UNKNOWN = -2,
} llama_ftype;

/* "Q4_K_M", "q4_k_m", "IQ4_XS", "F16", "f32" ... (llama-quantize's names):
 * the mix, or LLAMA_FTYPE_UNKNOWN (no error set: the caller says where). */
llama_ftype llama_ftype_parse(const char *name);
/* "Q4_K_M" ...; NULL for a number kiln does not make. */
const char *llama_ftype_name(llama_ftype f);
/* All the names llama_ftype_parse takes, '|'-separated, for messages. */
const char *llama_ftype_names(void);
/* The mix's base type (Q4_K for Q4_K_M); KILN_DTYPE_COUNT if unknown. */
kiln_dtype llama_ftype_base(llama_ftype f);
/* The ftype a file whose weights are mostly dtype d says it is (Q4_K:
 * Q4_K_M, as llama.cpp's loader guesses); LLAMA_FTYPE_UNKNOWN if none. */
llama_ftype llama_ftype_of_dtype(kiln_dtype d);

/* The type of GGUF tensor gguf_name ("blk.3.ffn_down.weight", a 2-d
 * weight of cols columns, ggml's ne[0]; norms stay F32) in mix f for a model of
 * config c (tied: no output.weight, the embedding is the head).
 * KILN_DTYPE_COUNT for an unknown f. */
kiln_dtype llama_mix_dtype(llama_ftype f, const llama_config *c, bool tied, const char *gguf_name, int64_t cols);

/* llama_new_inference_typed's chooser for a mix (user: a llama_mix_choice):
 * each 2-d weight in the type llama_mix_dtype gives it (an untied model),
 * a float type as F32 (drawn or converted in f32 and written as the mix's). */
typedef struct llama_mix_choice {
    llama_ftype mix;
    const llama_config *c;
} llama_mix_choice;
kiln_dtype llama_mix_param_dtype(void *user, const char *param, int64_t rows, int64_t cols);

/* A models/llama.h parameter name ("layers.3.feed_forward.w2.weight") as
 * GGUF names it ("blk.3.ffn_down.weight") into out; false if it has none. */
bool llama_param_gguf_name(const char *param, char *out, size_t size);

#endif
