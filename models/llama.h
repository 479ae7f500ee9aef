/* llama.h — the Llama architecture (Touvron et al. 2023; as Meta's
 * reference model.py): token embedding, n_layers blocks of RMSNorm ->
 * grouped-query causal self-attention with rotary positions -> residual,
 * RMSNorm -> SwiGLU MLP (w2(silu(w1 x) * w3 x)) -> residual, a final
 * RMSNorm and an untied output head. No biases. RoPE rotates the pairs
 * (x[2i], x[2i+1]) as Meta's complex-number form does (KILN_ROPE_INTERLEAVED;
 * Hugging Face's checkpoints permute wq/wk for the NEOX halves instead).
 * Grouped-query attention: kv_heads (<= heads, dividing it) k/v heads,
 * each shared by heads / kv_heads query heads.
 *
 * The same decoder runs Mistral, Qwen2, Phi-3 and Gemma 2, told apart by
 * the config's traits (llama_traits: NEOX rope, q/k/v biases, post-norms,
 * GELU, embedding scale, sliding-window layers) and settings (head_dim,
 * soft-caps, window, query scale, Llama 3.1's rope_freqs); models/llama_arch.h
 * says what each file names them. The Llama defaults are all zero.
 *
 * Init as Hugging Face's LlamaPreTrainedModel: weights and the embedding
 * N(0, 0.02), norms 1.
 *
 * Parameters, named as Meta's checkpoints:
 *   tok_embeddings.weight [vocab, dim],
 *   layers.{i}.attention_norm.weight [dim],
 *   layers.{i}.attention.wq.weight [heads*hd, dim], .wk / .wv [kv_heads*hd, dim],
 *   layers.{i}.attention.wo.weight [dim, heads*hd],
 *   layers.{i}.ffn_norm.weight [dim],
 *   layers.{i}.feed_forward.w1 / .w3 [hidden, dim], .w2 [dim, hidden],
 *   norm.weight [dim], output.weight [vocab, dim]      (hd = dim / heads)
 *
 * Inference models (llama_new_inference below) keep their weights quantized.
 *
 * Generation with the KV cache: the prompt, then one token at a time; each
 * step writes its keys and values into the cache (kiln_slice_assign; a
 * batch-1 token through the cache's one decode graph, kiln_attention_cached)
 * and attends over every position so far, so its logits equal the last
 * position's logits of a forward pass over the whole sequence.
 *
 *     llama *m = llama_new(ctx, NULL, 1);
 *     llama_cache *c = llama_cache_new(m, 1, m->cfg.context);
 *     float logits[256];
 *     llama_cache_step(m, c, prompt, n_prompt, logits);   // the prompt at once
 *     for (...) {
 *         int32_t next = pick(logits);
 *         llama_cache_step(m, c, &next, 1, logits);          // one token
 *     }
 */
#ifndef LLAMA_H
#define LLAMA_H

#include "model.h"

/* What sets the architectures of the one decoder apart (models/llama_arch.c
 * holds each one's): all zero is Llama's (and Mistral's). */
typedef enum llama_act { LLAMA_ACT_SILU = 0, LLAMA_ACT_GELU_TANH } llama_act;
typedef struct llama_traits {
    const char *arch;   /* GGUF's general.architecture; NULL: "llama" */
    bool neox;          /* rope rotates the halves (x[i], x[i + hd/2]), not adjacent pairs (Qwen2, Phi-3, Gemma 2) */
    bool qkv_bias;      /* q, k and v have biases (Qwen2) */
    bool post_norms;    /* the attention's and the MLP's outputs RMS-normed before the residual (Gemma 2) */
    bool embed_scale;   /* the embedding times sqrt(dim) (Gemma) */
    llama_act act;      /* the MLP: act(w1 x) * w3 x */
    int swa_every;      /* > 0: layers l with l % swa_every == 0 attend over a sliding window (Gemma 2: 2) */
    bool fused_qkv;     /* the files hold wq|wk|wv as one matrix (Phi-3's attn_qkv) */
    bool fused_gate_up; /* and w1|w3 as one (Phi-3's ffn_up: the gate's rows first) */
    bool hf_norm_minus_one; /* Hugging Face stores the norms' weights less 1 (Gemma; GGUF holds them whole) */
} llama_traits;

typedef struct llama_config {
    int64_t vocab;       /* 256: bytes */
    int64_t context;     /* longest sequence (Meta's max_seq_len) */
    int64_t layers, heads;
    int64_t kv_heads;    /* 0: heads (Meta's n_kv_heads None) */
    int64_t dim;
    int64_t hidden;      /* 0: Meta's rule, 2/3 of 4 dim rounded up to multiple_of */
    int64_t multiple_of; /* 256 as Meta's default */
    double norm_eps;     /* 1e-5 */
    double rope_theta;   /* 10000 (Llama 2) */
    llama_traits traits; /* zero: Llama */
    int64_t head_dim;    /* 0: dim / heads (Gemma's may differ) */
    double query_scale;  /* the attention's score scale; 0: 1 / sqrt(head_dim) */
    double attn_softcap; /* > 0: scores become cap * tanh(scores / cap) before the softmax (Gemma 2) */
    double final_softcap;   /* > 0: the same on the logits (Gemma 2) */
    int64_t sliding_window; /* the sliding layers' window: a query sees keys fewer than this many positions back */
    bool rope_freqs;     /* rope's frequencies divided by per-frequency factors (Llama 3.1's rope_freqs.weight),
                          * the model's rope_freqs [head_dim / 2] */
} llama_config;

/* vocab 256, context 128, 4 layers, 4 heads (kv_heads = heads), dim 256,
 * hidden by Meta's rule (768), norm_eps 1e-5, rope_theta 10000 */
llama_config llama_defaults(void);

/* What each setting is called where it came from, for messages: the
 * fields' own names (llama_config_fields), config.json's keys or GGUF's
 * (models/llama_files.c). */
typedef struct llama_config_names {
    const char *vocab, *context, *layers, *heads, *kv_heads, *dim, *hidden, *norm_eps, *rope_theta, *head_dim;
} llama_config_names;
extern const llama_config_names llama_config_fields;
/* KILN_OK, or `bad` with a message naming the first setting no llama can
 * have, its value and where it came from: "who: source: rms_norm_eps = -1
 * must be > 0 and finite" (source NULL: none). Sizes >= 1 (kv_heads 0
 * means heads), an even head size (head_dim, or heads dividing dim),
 * kv_heads dividing heads, norm_eps and rope_theta positive and finite,
 * the soft-caps, window and query scale not negative. */
kiln_status llama_config_check(const llama_config *c, const llama_config_names *names, const char *who,
                               const char *source, kiln_status bad);

typedef struct llama_layer {
    kiln_tensor *attention_norm, *wq, *wk, *wv, *wo;
    kiln_tensor *ffn_norm, *w1, *w2, *w3;
    kiln_tensor *bq, *bk, *bv;             /* traits.qkv_bias; else NULL */
    kiln_tensor *attn_post_norm, *ffn_post_norm; /* traits.post_norms; else NULL */
    /* NULL, or the i32 column permutation of a GPTQ act-order packed
     * weight (model.h's model_linear); not parameters */
    kiln_tensor *wq_perm, *wk_perm, *wv_perm, *wo_perm, *w1_perm, *w2_perm, *w3_perm;
    /* Leaves [Q + 2 KV, dim] and [2 hidden, dim] holding the rows of wq,
     * wk, wv and of w1, w3, so one matrix-vector product serves each group
     * (llama.fuse): an inference model's weights are row views of them
     * from the start; llama_stack_weights stacks weights put in later.
     * stacked_of / stacked_perm: wq, wk, wv, w1, w3 and their permutations
     * as stacked; a group runs fused only while they are still those (its
     * stack then reads x permuted by the first one's). NULL where not
     * stacked. Not parameters. */
    kiln_tensor *wqkv, *w13, *stacked_of[5], *stacked_perm[5];
    kiln_tensor *bqkv; /* bq|bk|bv as one leaf beside wqkv (bq, bk, bv its views); NULL without */
} llama_layer;

typedef struct llama {
    kiln_ctx *ctx;
    llama_config cfg; /* with kv_heads and hidden resolved */
    kiln_tensor *tok_embeddings, *norm, *output;
    kiln_tensor *rope_freqs; /* cfg.rope_freqs: f32 [head_dim / 2], not trained; else NULL */
    llama_layer *layers;
    kiln_tensor **params; /* every parameter, in state_dict order */
    int n_params;
    /* NULL, or 4 x layers slots that llama_forward fills with the inputs of
     * each layer's linear weights, in order: wq/wk/wv's, wo's, w1/w3's,
     * w2's ([B, T, in]): what GPTQ calibrates on (llama_quant.h) */
    kiln_tensor **taps;
    bool inference;       /* made by llama_new_inference: leaves without gradients */
    kiln_dtype weights;   /* the 2-d weights' dtype (KILN_F32 for llama_new) */
    bool tied;            /* output is tok_embeddings (llama_new_inference only) */
    bool fuse;            /* run wqkv / w13 where a layer has them (true for
                           * llama_new_inference; false: the same weights,
                           * one product per weight, the same logits) */
    /* llama_new_inference_typed's chooser, set while the model is made */
    kiln_dtype (*dtype_of)(void *user, const char *name, int64_t rows, int64_t cols);
    kiln_tensor *(*leaf_of)(void *user, const char *const *names, int n, kiln_dtype dtype, int ndim,
                            const int64_t *shape); /* llama_new_inference_leaves' */
    void *dtype_user;
    bool checkpoint;      /* true: where gradients are on (llama_train_graph),
                           * each layer is a kiln_checkpoint_begin/end segment:
                           * recomputed in the backward pass, not kept */
} llama;

/* cfg NULL: llama_defaults(). NULL on failure (kiln_last_error() says why). */
llama *llama_new(kiln_ctx *ctx, const llama_config *cfg, uint64_t seed);
void llama_free(llama *m);

/* ---- inference ----
 * A llama for generation only: plain leaves (no gradients, nothing
 * random-initialized: norms 1, weights zero) for a loader to fill
 * (llama_files.h's llama_infer_from_gguf / _from_hf do), with its 2-d
 * weights in weights: KILN_F32 or any quantized dtype. The linear weights
 * then go through kiln_linear's fused quantized matmul (never an f32 copy
 * of W), the embedding through kiln_get_rows of the quantized table, so
 * the model takes about its quantized size in memory. The embedding takes
 * llama_embedding_dtype(weights) (NF4 for NF4_DQ: get_rows reads rows,
 * which NF4_DQ's 16384-element super-blocks are not), and NF4_DQ falls back
 * to NF4 for a weight whose size is not whole super-blocks. tied_output:
 * the head is the embedding tensor itself (output == tok_embeddings).
 *
 *     llama *m = llama_new_inference(ctx, &cfg, KILN_Q4_0, false);
 *     llama_init_random(m, 42);       // or fill m->params[i] with llama_put_rows
 *     llama_cache *c = llama_cache_new(m, 1, 256);
 *     llama_cache_step(m, c, prompt, n_prompt, logits);
 */
llama *llama_new_inference(kiln_ctx *ctx, const llama_config *cfg, kiln_dtype weights, bool tied_output);
/* The same with each 2-d weight's dtype chosen by dtype_of(user, its
 * parameter name ("layers.0.attention.wv.weight"), rows, cols): a file's
 * own type per tensor, as a Q4_K_M GGUF mixes them. A group whose parts
 * differ (wq, wk in Q4_K, wv in Q6_K) runs one product per weight. The
 * model's weights field is the first layer's wq's dtype. */
typedef kiln_dtype (*llama_dtype_fn)(void *user, const char *name, int64_t rows, int64_t cols);
llama *llama_new_inference_typed(kiln_ctx *ctx, const llama_config *cfg, llama_dtype_fn dtype_of, void *user,
                                 bool tied_output);
/* The same with leaves the caller already has: leaf_of(user, names, n,
 * dtype, ndim, shape) returns a leaf of exactly that dtype and shape to
 * use for parameter names[0] (n 1), or for the stack of parameters names
 * [n] (wq|wk|wv, w1|w3: those become row views of it), or NULL (no error)
 * for the model to make one. A GGUF's tensors mapped from the file
 * (llama_files.h) come in this way; the model never writes to them. */
typedef kiln_tensor *(*llama_leaf_fn)(void *user, const char *const *names, int n, kiln_dtype dtype, int ndim,
                                      const int64_t *shape);
llama *llama_new_inference_leaves(kiln_ctx *ctx, const llama_config *cfg, llama_dtype_fn dtype_of,
                                  llama_leaf_fn leaf_of, void *user, bool tied_output);
kiln_dtype llama_embedding_dtype(kiln_dtype weights);

/* Rows [row0, row0 + rows) of a contiguous leaf t (1-d: one row) from the
 * f32 values src [rows, cols], converted to t's dtype (quantized by
 * kiln_quantize; row0 * cols and rows * cols must be whole blocks of it,
 * which llama_row_chunk gives). */
kiln_status llama_put_rows(kiln_tensor *t, int64_t row0, int64_t rows, const float *src);
/* How many rows of t to convert at a time: about elems elements, a
 * multiple of what keeps the chunks whole blocks (>= 1). */
int64_t llama_row_chunk(const kiln_tensor *t, int64_t elems);
/* Random weights for benchmarks: N(0, 0.02) weights and embedding (not the
 * values llama_new draws), norms 1, drawn and quantized a few MiB at a time
 * into the tensors' own dtypes, so a 4-bit model never exists in f32. */
kiln_status llama_init_random(llama *m, uint64_t seed);
/* Stack each layer's wq|wk|wv and w1|w3 by rows into a new leaf where
 * they are not stacked now (weights replaced after the model was made,
 * e.g. GPTQ's packed ones) and can be: the same dtype, contiguous, no
 * gradient, no permutation or equal ones (act order), rows of whole
 * blocks. The copies take those weights' bytes again (the old tensors stay
 * in the context). Sets m->fuse. A group that cannot be stacked runs one
 * product per weight, as before. */
kiln_status llama_stack_weights(llama *m);
/* Bytes of the weights (each tensor once, a tied head counted once). */
int64_t llama_weight_bytes(const llama *m);

/* A graph of n token rows, each in its own sequence of a cache (the
 * layout of llama_hidden_rows), of which k go through the head: made once
 * in the model's context and computed again at every step of n rows and
 * k logits rows. Its tokens, sequences and positions, the wanted rows'
 * index (gathered from the hidden states before the head, so one graph
 * serves any k of the n) and a model's rope tables are leaves written
 * before each compute, and the attention reads the cache up to each row's
 * position (kiln_attention_cached), so no shape or parameter changes from
 * step to step and a device replays one recording (core/graph_replay.c).
 * Batch-1 decoding and prompt chunks (llama_cache) and llama_slots' steps
 * compute one. g is NULL until the first compute. */
typedef struct llama_rows_graph {
    kiln_graph *g;
    int64_t n, k;
    kiln_tensor *tok, *seq, *pos, *pick, *cos, *sin, *logits; /* pick: NULL when k is 0 or n */
    bool fused; /* llama's fuse when it was built (stacked weights) */
} llama_rows_graph;

/* Rows of a batch-1 prompt step on a device (llama_cache.chunk's default) */
enum { LLAMA_PROMPT_CHUNK = 128 };

/* Keys and values of every layer so far: leaves [batch, kv_heads, len, hd]
 * of the model's context, and the next position to write. decode: batch-1
 * decoding's rows graph (llama_cache_step of one token); prompt: on a
 * device, a batch-1 prompt's chunks of chunk rows (LLAMA_PROMPT_CHUNK,
 * which a caller may change before the first step), [0] wanting no
 * logits, [1] its last row's. */
typedef struct llama_cache {
    int64_t batch, len, pos;
    kiln_tensor **k, **v; /* one per layer */
    llama_rows_graph decode, prompt[2];
    int64_t chunk;
} llama_cache;

llama_cache *llama_cache_new(llama *m, int64_t batch, int64_t len);
void llama_cache_free(llama_cache *c); /* the struct; the tensors live in the context */

/* logits [B, T, vocab] of token ids idx i32 [B, T] at positions pos ..
 * pos + T - 1. cache NULL: attention over these T tokens only (pos 0 for
 * training). With a cache: their keys and values are written into it at
 * pos and the attention sees positions 0 .. pos + T - 1 (the caller keeps
 * cache->pos; llama_cache_step does). */
kiln_tensor *llama_forward(llama *m, kiln_tensor *idx, llama_cache *cache, int64_t pos);

/* The last block's output [n, dim] of n tokens, each in its own sequence
 * of the cache: token i (tokens[i]) is at position pos[i] of the cache's
 * sequence seq[i] (a batch row), its keys and values are written there and
 * it attends over positions 0 .. pos[i] of that sequence
 * (kiln_attention_cached); the tokens of one sequence come in order at
 * consecutive positions. The linear layers see all n rows at once. What
 * llama_slots (llama_slots.h) runs; llama_head gives the logits. Gemma 2's
 * soft-cap and sliding layers are kiln_attention_cached_softcap's. */
kiln_tensor *llama_hidden_rows(llama *m, llama_cache *cache, int64_t n, const int32_t *tokens, const int32_t *seq,
                               const int32_t *pos);
/* r's logits [k, vocab] of k of n rows as llama_hidden_rows takes them,
 * into logits: rows pick[0 .. k) (k = n: all, pick unused; k = 0: none,
 * the rows only write the cache). r is made at its first compute (and
 * again when n, k or the model's stacking changed), outside any mark the
 * caller rewinds to, then its leaves are written and it is computed.
 * Rewinding the context to a mark made before r was made frees it: r must
 * not be computed again then. */
kiln_status llama_rows_compute(llama *m, llama_cache *cache, llama_rows_graph *r, int64_t n, const int32_t *tokens,
                               const int32_t *seq, const int32_t *pos, int64_t k, const int32_t *pick,
                               float *logits);
/* The same through a rows graph made for this step alone, between
 * kiln_ctx_get_mark and kiln_ctx_rewind: the context does not grow. */
kiln_status llama_rows_compute_once(llama *m, llama_cache *cache, int64_t n, const int32_t *tokens,
                                    const int32_t *seq, const int32_t *pos, int64_t k, const int32_t *pick,
                                    float *logits);
/* Whether m's graphs run on a device backend, where a stored graph replays */
bool llama_on_device(const llama *m);
/* r's device buffers (the graph lives in the context) */
void llama_rows_free(llama_rows_graph *r);
/* logits [..., vocab] of hidden states h [..., dim]: the final norm and the head */
kiln_tensor *llama_head(llama *m, kiln_tensor *h);

/* Run n tokens per sequence (tokens [batch, n], row-major) at cache->pos,
 * advance cache->pos by n, and write the last position's logits
 * [batch, vocab] into logits (only that position goes through the head).
 * Builds and computes a small graph in the model's context each call,
 * between kiln_ctx_get_mark and kiln_ctx_rewind: the context does not grow
 * from step to step (on a device backend, whose memory the rewind does
 * not free, it keeps each step's metadata). One token of a batch-1 cache
 * computes the cache's decode rows graph instead (llama_rows_compute; not
 * with taps), and on a device a batch-1 prompt
 * goes in chunks of c->chunk rows through the cache's prompt rows graphs
 * (a shorter last chunk through its own, made for that step), so a device
 * replays a recording per chunk: rewinding the context to a mark made
 * before the first such step frees them, and the cache must not step
 * again. */
kiln_status llama_cache_step(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits);
/* The same with every position's logits: [batch, n, vocab] into logits
 * (what generate --dump-logits writes, to compare with llama.cpp's). */
kiln_status llama_cache_step_all(llama *m, llama_cache *c, const int32_t *tokens, int64_t n, float *logits);

/* input: tokens i32 [batch, seq]; labels: the next tokens i32 [batch, seq] */
kiln_status llama_train_graph(llama *m, int64_t batch, int64_t seq, model_graph *out);
kiln_status llama_eval_graph(llama *m, int64_t batch, int64_t seq, model_graph *out);
/* 2 vocab dim + dim + layers (2 dim + 2 dim^2 + 2 dim kv_heads hd + 3 dim hidden), for Llama */
int64_t llama_param_count(const llama *m);

#endif
