/* llama_files.h — a models/llama.h llama from the files people download,
 * of any architecture models/llama_arch.h lists (llama and Mistral, qwen2,
 * phi3, gemma2: their tensors' names below, Llama's; the others' biases,
 * fused attn_qkv / ffn_up (qkv_proj / gate_up_proj), post-norms and
 * rope_freqs as llama.cpp's converter and Hugging Face name them):
 *
 *  - GGUF of the llama architecture (llama.cpp's convert_hf_to_gguf):
 *    hyperparameters from the llama.* keys (block_count, embedding_length,
 *    feed_forward_length, attention.head_count(_kv), rope.freq_base,
 *    attention.layer_norm_rms_epsilon, context_length, vocab_size or the
 *    embedding's rows) and tensors token_embd, blk.N.attn_norm / attn_q /
 *    attn_k / attn_v / attn_output / ffn_norm / ffn_gate / ffn_down /
 *    ffn_up, output_norm, output (absent: tied to token_embd). llama.cpp's
 *    converter un-permutes Hugging Face's q/k rows back to Meta's
 *    interleaved rotary layout (ggml's "normal" rope on adjacent pairs),
 *    which is the layout of models/llama.c: loaded as they are.
 *  - A Hugging Face directory: config.json (LlamaForCausalLM),
 *    model.safetensors or model.safetensors.index.json with its shards,
 *    tensors model.embed_tokens, model.layers.N.{input_layernorm,
 *    self_attn.{q,k,v,o}_proj, post_attention_layernorm,
 *    mlp.{gate,up,down}_proj}, model.norm, lm_head (absent or
 *    tie_word_embeddings: the embedding). Hugging Face's q/k rows are
 *    permuted for the rotate-half (NEOX) rope: row h*hd + p*hd/2 + i holds
 *    Meta's row h*hd + 2i + p, so they are permuted back on load.
 *
 *  - A Hugging Face GPTQ directory (AutoGPTQ / GPTQModel: quantize_config.json
 *    or config.json's quantization_config; each linear's qweight, qzeros,
 *    scales, g_idx, models/hf_gptq.h): llama_from_hf dequantizes the
 *    linears; llama_infer_from_hf with LLAMA_AS_STORED keeps their codes
 *    (GQ<bits>_<G>, Q8_0 for 8 bits; act order as a permutation per
 *    weight, model.h's model_linear) and the embedding and head in F32; a
 *    linear stored in float there is quantized to that dtype (RTN). Any
 *    architecture above: Qwen2's biases stay float beside their linears,
 *    Phi-3's fused qkv_proj / gate_up_proj (one GPTQ linear, one g_idx)
 *    are split into their rows.
 *
 * F32, F16, BF16 and every quantized type kiln has a dtype for (ggml's
 * block types, include/kiln_core.h) load into the model's f32 parameters
 * (quantized ones dequantized) with llama_from_gguf / _hf, or
 * stay quantized with llama_infer_from_gguf / _hf (below).
 * Refused with a message: other architectures, rope scaling other than
 * Llama 3.1's (GGUF rope_freqs, config.json rope_type "llama3"), LongRoPE,
 * partial rotary dims, biases other than Qwen2's, and the types kiln has
 * no dtype for.
 *
 *     llama *m = llama_from_gguf(ctx, "tiny.gguf");
 *     llama *h = llama_from_hf(ctx, "TinyLlama-1.1B/");
 *     llama_save_gguf(m, "copy.gguf", KILN_F16);
 */
#ifndef LLAMA_FILES_H
#define LLAMA_FILES_H

#include "llama.h"
#include "llama_mix.h"

/* NULL on failure (kiln_last_error() says why). */
llama *llama_from_gguf(kiln_ctx *ctx, const char *path);
llama *llama_from_hf(kiln_ctx *ctx, const char *dir);

/* For generation: a llama_new_inference model (no gradients; weights
 * never all in f32) with its 2-d weights in weights: a kiln_dtype (KILN_F32,
 * KILN_Q8_0, KILN_Q4_0, KILN_NF4, KILN_NF4_DQ; converted on load a few MiB
 * at a time, quantized by kiln_quantize) or LLAMA_AS_STORED: each of a
 * GGUF's quantized tensors in its own type (files mix types:
 * llama_new_inference_leaves), F16 / BF16 as F32. Stored that way, a
 * tensor kept in the file's type is the file's bytes, mapped (kiln_gguf_map,
 * unmapped when ctx is freed; q|k|v and gate|up each one mapped stack
 * where they follow each other in the file, as kiln writes them), so
 * loading reads nothing but the header and the memory is the file's pages,
 * which the kernel shares and may drop; the F16 / BF16 ones and fused
 * tensors of other types are converted. LLAMA_AS_STORED_COPY: the same
 * types, every tensor copied into ctx (the file's pages dropped as each is
 * copied). A Hugging Face directory is read one
 * tensor at a time (that tensor in f32 while it converts). A model without
 * an output head (tied) uses the embedding tensor for it.
 *
 *     llama *m = llama_infer_from_gguf(ctx, "tinyllama-q4_0.gguf", LLAMA_AS_STORED);
 *     llama *h = llama_infer_from_hf(ctx, "TinyLlama-1.1B/", KILN_NF4);
 */
#define LLAMA_AS_STORED (-1)
#define LLAMA_AS_STORED_COPY (-2)
llama *llama_infer_from_gguf(kiln_ctx *ctx, const char *path, int weights);
llama *llama_infer_from_hf(kiln_ctx *ctx, const char *dir, int weights);
/* The same with each 2-d weight's dtype chosen by dtype_of (llama.h's
 * llama_new_inference_typed: its kiln parameter name, rows, cols), e.g.
 * QLoRA's NF4_DQ layers with the embedding and head in 16 bits
 * (llama_qlora.h). A GPTQ directory's linears are dequantized first. */
llama *llama_infer_from_gguf_typed(kiln_ctx *ctx, const char *path, llama_dtype_fn dtype_of, void *user);
llama *llama_infer_from_hf_typed(kiln_ctx *ctx, const char *dir, llama_dtype_fn dtype_of, void *user);

/* The tokenizer that goes with the model: the GGUF's tokenizer.ggml.*
 * metadata, or dir/tokenizer.json with bos_token_id / eos_token_id from
 * dir/config.json (an eos list is left unset). NULL on failure. */
kiln_tokenizer *llama_gguf_tokenizer(const char *path);
kiln_tokenizer *llama_hf_tokenizer(const char *dir);

/* Write m as a llama GGUF (the names and keys above), atomically; an
 * output head equal to the embedding is left out (tied, as llama.cpp
 * writes such models); norms stay F32 as llama.cpp writes them. The 2-d
 * weights: llama_save_gguf / _tok every one in dtype (any type llama.cpp
 * stores weights in: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q2_K,
 * Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS; llama-quantize --pure);
 * llama_save_gguf_mix each in the type llama-quantize's mix gives it
 * (models/llama_mix.h: Q4_K_M's output in Q6_K ...) and general.file_type
 * the mix's number, or with LLAMA_FTYPE_AS_STORED each in the dtype it has
 * (a model loaded with LLAMA_AS_STORED written back as it was). A weight
 * already in its type is written as it is; others are dequantized and
 * quantized by kiln_quantize. The file carries a tokenizer, as llama.cpp
 * needs to load it: tok's (its tokens padded with unused ids to the
 * model's vocabulary), or kiln_tokenizer_bytes'. Architectures other than
 * llama, and a weight whose width is not whole blocks of its type, are
 * refused before anything is written.
 *
 *     llama_save_gguf_mix(m, tok, "model-Q4_K_M.gguf", llama_ftype_parse("Q4_K_M"));
 */
kiln_status llama_save_gguf(const llama *m, const char *path, kiln_dtype dtype);
kiln_status llama_save_gguf_tok(const llama *m, const kiln_tokenizer *tok, const char *path, kiln_dtype dtype);
kiln_status llama_save_gguf_mix(const llama *m, const kiln_tokenizer *tok, const char *path, llama_ftype mix);

#endif
