/* llama_arch.h — the architectures models/llama.h's one decoder runs, as
 * their files describe them: each one's traits (llama_traits), and a
 * llama_config read from a GGUF's general.architecture and <arch>.* keys
 * or from a Hugging Face config.json (model_type). Used by the loaders of
 * models/llama_files.c.
 *
 *   GGUF          config.json              what differs from Llama
 *   llama         llama, mistral           (Llama 3.1's rope_freqs / rope_scaling "llama3": rope_freqs)
 *   qwen2         qwen2                    q/k/v biases, NEOX rope
 *   phi3          phi3                     wq|wk|wv and gate|up stored fused, NEOX rope, a sliding window
 *   gemma2        gemma2                   embedding * sqrt(dim), GELU(tanh), post-attention and post-MLP
 *                                          norms, attention and logit soft-caps, every other layer sliding,
 *                                          head_dim of its own, NEOX rope
 *
 * An unknown architecture, a key out of range or a feature kiln does not
 * run (LongRoPE, other rope scaling, partial rotary dims) is an error
 * naming it, its value and the file.
 *
 *     llama_config c;
 *     if (llama_arch_gguf_config(g, "llama_infer_from_gguf", path, &c)) ...
 */
#ifndef LLAMA_ARCH_H
#define LLAMA_ARCH_H

#include "llama.h"

/* The architecture GGUF calls name (NULL if kiln has none). */
const llama_traits *llama_arch_gguf(const char *name);

/* The config of a GGUF file (its tensors' shapes checked against it, so a
 * header claiming a huge model is refused before anything is allocated). */
kiln_status llama_arch_gguf_config(const kiln_gguf *g, const char *who, const char *path, llama_config *c);

/* Llama 3.1's rope_scaling (rope_type "llama3") of a config.json. */
typedef struct llama3_scaling {
    double factor, low_freq_factor, high_freq_factor, original_context; /* factor 0: none */
} llama3_scaling;

/* The config of dir/config.json: tied (tie_word_embeddings), and Llama
 * 3.1's rope scaling where it has one (c->rope_freqs then set). */
kiln_status llama_arch_hf_config(const char *who, const char *dir, llama_config *c, bool *tied,
                                 llama3_scaling *scaling);

/* The rope_freqs [head_dim / 2] of a llama3 rope scaling, as llama.cpp's
 * converter writes them (1, factor, or between by the wavelength). */
void llama3_rope_factors(const llama3_scaling *s, double theta, int64_t head_dim, float *out);

#endif
