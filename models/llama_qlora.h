/* llama_qlora.h — QLoRA (Dettmers et al. 2023): a llama whose frozen
 * linear weights are quantized to 4 bits as they are read from a 16-bit or
 * f32 checkpoint, fine-tuned through LoRA adapters (lora.h).
 *
 * llama_qlora_from_gguf / _hf read a GGUF or a Hugging Face directory
 * (llama_files.h: any architecture and tensor type those read) and
 * quantize each layer's linear weights (q, k, v, o, gate, up, down) to
 * base, KILN_NF4_DQ as the paper does (NF4 codes, their absmax scales
 * themselves 8-bit over super-blocks of 16384; a weight that is not whole
 * super-blocks falls back to NF4, one narrower than NF4's 64-element
 * block stays in f32, frozen) as it reads them: the model never
 * exists in f32. A GGUF converts a few MiB of rows at a time (its pages
 * dropped as it goes), so the peak is about the quantized model; a Hugging
 * Face directory one tensor at a time (that tensor in f32 beside its file
 * copy). TinyLlama-1.1B's F16 GGUF (2099 MiB) loads in a peak RSS of
 * 879 MiB (727 MiB of weights; bench/qlora.c --qlora-gguf). The embedding
 * and the output head stay unquantized, in compute (KILN_F32 or
 * KILN_BF16), as bitsandbytes leaves nn.Embedding and lm_head out of its
 * 4-bit layers and keeps them in the model's torch_dtype; the norms are
 * f32, as peft's prepare_model_for_kbit_training makes them. Every tensor
 * is a plain leaf, frozen: no gradient storage, no optimizer state.
 *
 * The model trains through lora_attach_llama's adapters (f32 parameters;
 * any optimizer, 8-bit AdamW as QLoRA's paged_adamw_8bit without the
 * paging); gradients reach the adapters below each layer through the
 * dequantized weights (the fused quantized product's backward, dx = dy W).
 * Its checkpoint flag is on (gradient checkpointing, as QLoRA runs): each
 * block keeps its input and recomputes its activations in the backward
 * pass, which is how activation memory stays bounded. For bf16 compute
 * in the products, as bnb_4bit_compute_dtype=bfloat16, set the matmul
 * precision (kiln_core.h); it is process-wide, so the loader leaves it.
 *
 *     kiln_set_matmul_precision(KILN_MATMUL_BF16);
 *     llama *m = llama_qlora_from_gguf(ctx, "tinyllama-f16.gguf", KILN_NF4_DQ, KILN_BF16);
 *     lora_config c = lora_defaults();
 *     c.targets = (const char *[]){"q_proj", "k_proj", "v_proj", "o_proj"}, c.n_targets = 4;
 *     lora *l = lora_attach_llama(m, &c, 42);
 *     model_graph g;
 *     llama_train_graph(m, 1, 512, &g);
 *     kiln_optim *opt = kiln_adamw8bit_new_for(ctx, l->params, l->n_params, NULL);
 *     ... fill g.input, g.labels; kiln_graph_compute(g.graph); kiln_optim_step(opt); ...
 *     lora_save_peft(l, "adapter");
 */
#ifndef LLAMA_QLORA_H
#define LLAMA_QLORA_H

#include "llama_files.h"

/* base: the layers' dtype, any quantized one (KILN_NF4_DQ, KILN_NF4,
 * KILN_Q4_0, ...) or KILN_F32; compute: KILN_F32 or KILN_BF16. NULL on
 * failure with kiln's error set (a bad dtype named, or the loader's). */
llama *llama_qlora_from_gguf(kiln_ctx *ctx, const char *path, kiln_dtype base, kiln_dtype compute);
llama *llama_qlora_from_hf(kiln_ctx *ctx, const char *dir, kiln_dtype base, kiln_dtype compute);
/* The same model made empty (norms 1, weights zero) for llama_init_random
 * or llama_put_rows to fill: benchmarks, tests. cfg NULL: llama_defaults(). */
llama *llama_qlora_new(kiln_ctx *ctx, const llama_config *cfg, kiln_dtype base, kiln_dtype compute);

#endif
