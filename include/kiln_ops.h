/* kiln_ops.h — the op constructors (element-wise, reductions, matrix
 * products, shape and movement, embeddings, neural-network layers) and the
 * graphs that run them. A constructor records a node and checks shapes and
 * dtypes; nothing runs until kiln_graph_compute(). Part of kiln.h.
 *
 * Usage — a two-layer MLP's forward and backward:
 *
 *     kiln_tensor *h = kiln_relu(ctx, kiln_linear(ctx, x, w1, b1));
 *     kiln_tensor *loss = kiln_cross_entropy(ctx, kiln_linear(ctx, h, w2, b2), labels, -100);
 *     kiln_graph *g = kiln_graph_new(ctx);
 *     if (kiln_graph_add(g, loss) || kiln_graph_backward(g, loss) || kiln_graph_compute(g))
 *         fprintf(stderr, "%s\n", kiln_last_error());
 */
#ifndef KILN_OPS_H
#define KILN_OPS_H

#include "kiln_core.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- ops: element-wise ------------------------------------------------- */
/* Binary ops broadcast like NumPy: shapes are aligned at the last axis and
 * a dimension of 1 stretches. Inputs must share a float dtype. */

kiln_tensor *kiln_add(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_sub(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_mul(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);
kiln_tensor *kiln_div(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);

kiln_tensor *kiln_neg(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_scale(kiln_ctx *ctx, kiln_tensor *x, double s);      /* x*s */
kiln_tensor *kiln_add_scalar(kiln_ctx *ctx, kiln_tensor *x, double s); /* x+s */
kiln_tensor *kiln_exp(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_log(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_sqrt(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_rsqrt(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_abs(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_pow(kiln_ctx *ctx, kiln_tensor *x, double p);        /* x^p */
kiln_tensor *kiln_tanh(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_sigmoid(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_relu(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_leaky_relu(kiln_ctx *ctx, kiln_tensor *x, double slope);
kiln_tensor *kiln_gelu(kiln_ctx *ctx, kiln_tensor *x);      /* erf form, exact */
kiln_tensor *kiln_gelu_tanh(kiln_ctx *ctx, kiln_tensor *x); /* tanh approximation */
kiln_tensor *kiln_silu(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_softplus(kiln_ctx *ctx, kiln_tensor *x);  /* log(1+e^x) */

/* Comparisons give 1 or 0 in a's dtype; no gradient flows through them. */
typedef enum kiln_cmp_op { KILN_CMP_EQ, KILN_CMP_NE, KILN_CMP_LT, KILN_CMP_LE, KILN_CMP_GT, KILN_CMP_GE } kiln_cmp_op;
kiln_tensor *kiln_cmp(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b, kiln_cmp_op op);

/* where(cond, a, b): a where cond != 0 else b (all three broadcast). */
kiln_tensor *kiln_where(kiln_ctx *ctx, kiln_tensor *cond, kiln_tensor *a, kiln_tensor *b);
/* x where mask == 0, value where mask != 0 (torch.masked_fill). */
kiln_tensor *kiln_masked_fill(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *mask, double value);

/* Convert to another dtype (float<->float, float<->i32). */
kiln_tensor *kiln_cast(kiln_ctx *ctx, kiln_tensor *x, kiln_dtype dtype);

/* ---- ops: reductions --------------------------------------------------- */
/* Over an axis of size 0 (or all of an empty tensor) a sum is 0 and a mean
 * NaN, as torch's; max, min and argmax have no value there and are
 * refused (KILN_ERR_SHAPE), as torch.amax refuses. max and min pass the
 * gradient to the elements equal to the result, shared evenly among ties
 * (torch.amax / torch.amin's rule; torch.max(x, dim) gives it all to one
 * index); a NaN is the maximum and the minimum of its slice, and every
 * element of that slice then gets a NaN gradient, as in torch. */

kiln_tensor *kiln_sum(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim);
kiln_tensor *kiln_mean(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim);
kiln_tensor *kiln_max(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim);
kiln_tensor *kiln_min(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim);
/* Over all elements: a tensor of shape [1]. */
kiln_tensor *kiln_sum_all(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_mean_all(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_max_all(kiln_ctx *ctx, kiln_tensor *x);
kiln_tensor *kiln_min_all(kiln_ctx *ctx, kiln_tensor *x);
/* Index of the first maximum along axis, as i32; no gradient. */
kiln_tensor *kiln_argmax(kiln_ctx *ctx, kiln_tensor *x, int axis, bool keepdim);

/* ---- ops: matrix multiply ---------------------------------------------- */

/* a [..., M, K] @ b [..., K, N] -> [..., M, N]. Leading (batch) dims
 * broadcast; a 2-D operand is shared across the batch. K = 0 gives zeros
 * (an empty sum), as in torch. */
kiln_tensor *kiln_matmul(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);
/* The same with either operand transposed in its last two dims. */
kiln_tensor *kiln_matmul_t(kiln_ctx *ctx, kiln_tensor *a, bool trans_a, kiln_tensor *b, bool trans_b);
/* x [..., in] @ w^T + bias, with w [out, in] as torch.nn.Linear (bias may be NULL). */
kiln_tensor *kiln_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias);
/* INT16 dynamic fixed point (Das et al. 2018), for training with integer
 * GEMMs: op(a) op(b) of 2-D f32 tensors with each operand quantized inside
 * to 14-bit integers sharing one power-of-two exponent, multiplied in INT32
 * chunks that cannot overflow (AVX512-VNNI vpdpwssd where present) and
 * summed in f32; relative error about 2^-13 of the operands' largest
 * values. The backward pass (dA, dB) runs the same DFP op; bias add stays
 * f32. CPU and CUDA backends (another device runs it on the CPU).
 *
 *     kiln_tensor *y = kiln_dfp_linear(ctx, x, w, b);   // x [.., in], w [out, in]
 */
kiln_tensor *kiln_dfp_matmul_t(kiln_ctx *ctx, kiln_tensor *a, bool trans_a, kiln_tensor *b, bool trans_b);
kiln_tensor *kiln_dfp_linear(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias);
/* kiln_conv2d with its im2col product (and so both backward products) a
 * DFP matmul; f32 x, w, bias; groups 1. */
typedef struct kiln_conv2d_params kiln_conv2d_params;
kiln_tensor *kiln_dfp_conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias,
                             const kiln_conv2d_params *p);

/* ---- ops: shape and movement ------------------------------------------- */
/* Views share storage with their source; gradients flow through them. */

/* One target dim may be -1 (the rest of x's elements), but not beside a 0,
 * where any size would do (torch refuses that too). */
kiln_tensor *kiln_reshape(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape);
kiln_tensor *kiln_view(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape);    /* reshape that never copies; errors if x is not contiguous */
kiln_tensor *kiln_flatten(kiln_ctx *ctx, kiln_tensor *x, int start_axis);                 /* merge dims start..end */
kiln_tensor *kiln_permute(kiln_ctx *ctx, kiln_tensor *x, const int *axes);
kiln_tensor *kiln_transpose(kiln_ctx *ctx, kiln_tensor *x, int axis0, int axis1);
kiln_tensor *kiln_contiguous(kiln_ctx *ctx, kiln_tensor *x);
/* x[start:end:step] along axis (end may be negative as in Python; step >= 1);
 * an empty range gives a dim of 0. */
kiln_tensor *kiln_slice(kiln_ctx *ctx, kiln_tensor *x, int axis, int64_t start, int64_t end, int64_t step);
kiln_tensor *kiln_concat(kiln_ctx *ctx, kiln_tensor *const *xs, int n, int axis);
/* Constant padding: pads[2*i], pads[2*i+1] = before/after for axis i. */
kiln_tensor *kiln_pad(kiln_ctx *ctx, kiln_tensor *x, const int64_t *pads, double value);
/* Broadcast (stretch size-1 dims, add leading dims) as a view: torch.expand. */
kiln_tensor *kiln_broadcast_to(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape);
/* Tile: reps has x's ndim entries, each >= 0 (torch.Tensor.repeat). */
kiln_tensor *kiln_repeat(kiln_ctx *ctx, kiln_tensor *x, const int64_t *reps);
/* Write src into dst's positions start .. start + src.shape[axis] - 1
 * along axis, in place (torch: dst.narrow(axis, start, n).copy_(src)), as
 * a KV cache needs. dst is a leaf or a view of one that does not require
 * grad (a write into a parameter would corrupt its gradient); src has
 * dst's dtype and, off axis, its shape, any strides. Returns dst after the
 * write: a node of dst's shape sharing dst's storage; read through it (a
 * kiln_slice of it) so that the graph orders those reads after the write.
 * The gradient flows to src only. */
kiln_tensor *kiln_slice_assign(kiln_ctx *ctx, kiln_tensor *dst, kiln_tensor *src, int axis, int64_t start);
/* A node that stops gradients: same values, never requires grad. */
kiln_tensor *kiln_detach(kiln_ctx *ctx, kiln_tensor *x);

/* ---- ops: embeddings and indices --------------------------------------- */

/* table [V, D] (any float dtype), idx i32 of any shape -> [idx..., D] f32
 * (f64 for an f64 table). Backward scatter-adds into the table's gradient.
 * A quantized table (contiguous, D whole blocks) is read row by row and
 * only the rows asked for are dequantized: an embedding kept in Q8_0,
 * Q4_0 or NF4. */
kiln_tensor *kiln_get_rows(kiln_ctx *ctx, kiln_tensor *table, kiln_tensor *idx);
/* labels i32 [...] -> [..., n] of 0/1 in dtype; out-of-range labels give a zero row. */
kiln_tensor *kiln_one_hot(kiln_ctx *ctx, kiln_tensor *labels, int64_t n, kiln_dtype dtype);

/* ---- ops: neural-network layers ---------------------------------------- */

/* Over the last axis; causal masks column j > row i + (cols - rows) of the
 * last two dims, as a decoder's attention scores need. A row with every
 * column masked gives 0 (softmax) or -inf (log_softmax), not NaN. The
 * gradient is torch's for the op applied to x.masked_fill(mask, -inf),
 * taken with respect to that input: a masked entry gets 0 from softmax,
 * and the upstream gradient itself from log_softmax (which also counts it
 * in its row's sum), as a non-causal log_softmax does at an input of -inf. */
kiln_tensor *kiln_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal);
kiln_tensor *kiln_log_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal);

/* logits [N, C] (or [..., C]), labels i32 [N] (or [...]): mean over the
 * labels that are not ignore_index; a tensor of shape [1]. All labels
 * ignored (or none: an empty batch) gives 0 (torch: NaN). A label outside
 * [0, C) fails the compute. */
kiln_tensor *kiln_cross_entropy(kiln_ctx *ctx, kiln_tensor *logits, kiln_tensor *labels, int32_t ignore_index);
/* mean((a - b)^2) over equal shapes (no broadcasting), shape [1]. */
kiln_tensor *kiln_mse(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);

/* Normalize over the last axis; weight and bias [C] may be NULL. */
kiln_tensor *kiln_layer_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, double eps);
kiln_tensor *kiln_rms_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, double eps);

/* Batch normalization over x [N, C] or [N, C, *] (torch.nn.functional.
 * batch_norm, so nn.BatchNorm1d/2d/3d): per channel, over the batch and
 * every dim after C. running_mean, running_var [C] (both or neither) and
 * weight, bias [C] (each may be NULL) have x's dtype. training true
 * normalizes by the batch's mean and biased variance and, with running
 * statistics, updates them in place each time the graph computes:
 * running = (1 - momentum) * running + momentum * batch, the variance
 * unbiased (momentum 0.1 and eps 1e-5 are torch's defaults); they must
 * then be leaves that require no grad (kiln_buffer makes them and
 * checkpoints save them), and x needs 2 or more values per channel.
 * training false normalizes by the running statistics (required) and
 * updates nothing. The mode is fixed when the op is built, as
 * F.batch_norm's training argument: build a training graph and an eval
 * graph (kiln_graph_set_training switches dropout only).
 *
 *     kiln_tensor *rm = kiln_buffer(ctx, "bn1.running_mean", KILN_F32, 1, (int64_t[]){64});
 *     kiln_tensor *rv = kiln_buffer(ctx, "bn1.running_var", KILN_F32, 1, (int64_t[]){64});
 *     kiln_tensor_fill(rv, 1.0);
 *     kiln_tensor *y = kiln_batch_norm(ctx, x, rm, rv, w, b, true, 0.1, 1e-5);
 */
kiln_tensor *kiln_batch_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *running_mean, kiln_tensor *running_var,
                             kiln_tensor *weight, kiln_tensor *bias, bool training, double momentum, double eps);
/* Group normalization (torch.nn.functional.group_norm, nn.GroupNorm):
 * x [N, C, *] with C a multiple of num_groups; each sample's num_groups
 * groups of C / num_groups channels are normalized over their channels
 * and every dim after C (biased variance), then weight, bias [C] (each
 * may be NULL) scale and shift each channel. No running statistics: the
 * same in training and eval. */
kiln_tensor *kiln_group_norm(kiln_ctx *ctx, kiln_tensor *x, int num_groups, kiln_tensor *weight, kiln_tensor *bias,
                             double eps);

/* Rotary position embedding on x [..., T, D] (D even). pos: i32 [T] of
 * positions, or NULL for 0..T-1. NEOX rotates the halves (x[i], x[i+D/2]),
 * as Hugging Face Llama does; INTERLEAVED rotates pairs (x[2i], x[2i+1]). */
typedef enum kiln_rope_mode { KILN_ROPE_NEOX = 0, KILN_ROPE_INTERLEAVED = 1 } kiln_rope_mode;
kiln_tensor *kiln_rope(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *pos, double theta, kiln_rope_mode mode);

/* Scaled dot-product attention. q [B, Hq, T, D], k [B, Hkv, S, D],
 * v [B, Hkv, S, Dv] with Hq a multiple of Hkv (grouped-query heads share a
 * k/v head). scale <= 0 means 1/sqrt(D). Causal aligns the last query with
 * the last key (as with a KV cache); a query that sees no key gives 0.
 * Result [B, Hq, T, Dv]. */
kiln_tensor *kiln_attention(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, bool causal, double scale);
/* Attention of N rows, each in its own sequence of a KV cache, as
 * batched decoding runs several sequences in one step: row i's new key
 * k[i] and value v[i] ([N, Hkv, D], [N, Hkv, Dv]) are first written in
 * place at position pos[i] of sequence seq[i] of k_cache [B, Hkv, S, D]
 * and v_cache [B, Hkv, S, Dv] (contiguous leaves without gradients), then
 * query q[i] ([N, Hq, D], grouped heads as kiln_attention's) attends over
 * positions 0 .. pos[i] of that sequence (window > 0: only the last window
 * of them). Rows of one sequence at consecutive positions are a causal
 * chunk: each sees the ones before it. seq, pos: i32 [N]; a value outside
 * the cache fails the compute with a message that names it. Result
 * [N, Hq, Dv]. No gradient flows through it. CUDA and Vulkan (f32 and
 * f64, head sizes up to 256; Vulkan's f64 up to 128, where the device has
 * shaderFloat64) read seq and pos in device memory, so a replayed graph serves
 * new positions; there a row outside the cache writes nothing and gives
 * NaN, the other rows are written, and the compute fails after its end
 * with the CPU's message. They attend in tiles (a kv head's query heads
 * and a prompt's rows against shared K/V tiles, a long cache split over
 * blocks for decoding); KILN_ATTN_CACHED=rows forces their per-row
 * kernels (for tests). A backend without it runs it on the CPU. */
kiln_tensor *kiln_attention_cached(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v, kiln_tensor *k_cache,
                                   kiln_tensor *v_cache, kiln_tensor *seq, kiln_tensor *pos, int64_t window,
                                   double scale);
/* kiln_attention_cached with soft-capped scores (Gemma 2's
 * attn_logit_softcapping, flash-attn's softcap): each score s = scale q.k
 * becomes softcap * tanh(s / softcap) before the window and the softmax;
 * softcap 0 means none (kiln_attention_cached is this with 0). */
kiln_tensor *kiln_attention_cached_softcap(kiln_ctx *ctx, kiln_tensor *q, kiln_tensor *k, kiln_tensor *v,
                                           kiln_tensor *k_cache, kiln_tensor *v_cache, kiln_tensor *seq,
                                           kiln_tensor *pos, int64_t window, double scale, double softcap);

/* 2-D convolution, NCHW. x [N, C, H, W], w [O, C/groups, kh, kw], bias [O]
 * or NULL. On the CPU (groups 1, f32/f64) forward and backward form the
 * im2col columns a tile of output pixels at a time, so training keeps x,
 * not its columns; $KILN_CONV_TILED=0 and device contexts build the
 * whole-batch im2col + matmul instead. */
typedef struct kiln_conv2d_params {
    int stride[2];   /* 0 means 1 */
    int padding[2];
    int dilation[2]; /* 0 means 1 */
    int groups;      /* 0 means 1 */
    int output_padding[2]; /* conv_transpose2d only */
} kiln_conv2d_params;
kiln_tensor *kiln_conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p);
/* 1-D convolution (torch.nn.functional.conv1d): x [N, C, L], w [O,
 * C/groups, k], bias [O] or NULL -> [N, O, L_out]. causal pads
 * dilation * (k - 1) zeros on the left only (padding must then be 0), so
 * with stride 1 output t sees inputs up to t and L_out = L: torch's
 * conv1d of F.pad(x, (dilation * (k - 1), 0)). Runs as kiln_conv2d over
 * rows one pixel high. */
typedef struct kiln_conv1d_params {
    int stride;   /* 0 means 1 */
    int padding;  /* zeros on both ends */
    int dilation; /* 0 means 1 */
    int groups;   /* 0 means 1 */
    bool causal;
} kiln_conv1d_params;
kiln_tensor *kiln_conv1d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv1d_params *p);
/* Transposed convolution: x [N, C, H, W], w [C, O/groups, kh, kw]. */
kiln_tensor *kiln_conv_transpose2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p);

/* Pooling over NCHW; stride 0 means the kernel size. avg counts padding
 * (torch's count_include_pad=True); max pads with -inf. max_pool2d's
 * gradient goes to the taps equal to their window's maximum, shared evenly
 * among ties as kiln_max's is. torch's max_pool2d gives it all to the
 * window's first maximum instead: the two differ only where a window
 * holds its maximum twice (a window of zeros after a relu, say). */
kiln_tensor *kiln_max_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding);
kiln_tensor *kiln_avg_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding);

/* Adaptive average pooling (torch's F.adaptive_avg_pool2d): x [N, C, H,
 * W] -> [N, C, oh, ow], output (i, j) the mean of rows floor(i*H/oh) ..
 * ceil((i+1)*H/oh) - 1 and the same columns (windows may overlap; oh > H
 * repeats rows). oh = ow = 1 is the global pool before a classifier. */
kiln_tensor *kiln_adaptive_avg_pool2d(kiln_ctx *ctx, kiln_tensor *x, int64_t oh, int64_t ow);

/* Upsampling (torch's F.interpolate for 4-D x [N, C, H, W], modes nearest
 * and bilinear) to size [oh, ow] or by scale factors (exactly one of the
 * two; out = floor(in * scale), and the scale maps coordinates as torch's
 * does when recompute_scale_factor is unset). nearest takes input
 * floor(out_index * in / out); bilinear follows align_corners as torch
 * (false: half-pixel centres, edges clamped; true: corner pixels
 * aligned). Also shrinks (oh < H), without antialiasing, as torch. */
typedef enum kiln_upsample_mode { KILN_UPSAMPLE_NEAREST = 0, KILN_UPSAMPLE_BILINEAR = 1 } kiln_upsample_mode;
typedef struct kiln_upsample_params {
    int64_t size[2]; /* [oh, ow], or 0 0 to use scale */
    double scale[2]; /* [h, w] factors, or 0 0 to use size */
    kiln_upsample_mode mode;
    bool align_corners; /* bilinear only */
} kiln_upsample_params;
kiln_tensor *kiln_upsample(kiln_ctx *ctx, kiln_tensor *x, const kiln_upsample_params *p);

/* Inverted dropout with probability p. The mask comes from (seed, the
 * graph's run counter, element index), so it changes every compute and is
 * the same in forward and backward. Identity when the graph is in eval mode. */
kiln_tensor *kiln_dropout(kiln_ctx *ctx, kiln_tensor *x, double p, uint64_t seed);

/* ---- graphs -------------------------------------------------------------- */

kiln_graph *kiln_graph_new(kiln_ctx *ctx);
/* Add out and everything it depends on. out keeps its own storage and can
 * be read after each compute. */
kiln_status kiln_graph_add(kiln_graph *g, kiln_tensor *out);
/* Append the backward pass of a one-element loss already in the graph:
 * afterwards every leaf that requires grad and feeds the loss has its
 * gradient *added* into kiln_tensor_grad(leaf) by each compute (call
 * kiln_zero_grad, or let kiln_optim_step zero them, between steps). Call
 * it once per loss: a second call with the same loss is KILN_ERR_STATE
 * and changes nothing (as torch's second loss.backward()); the backward
 * passes of different losses in one graph add up. */
kiln_status kiln_graph_backward(kiln_graph *g, kiln_tensor *loss);
/* Run the graph (planning memory on the first call or after changes). */
kiln_status kiln_graph_compute(kiln_graph *g);
/* Dropout acts only in training mode (the default). Batch norm's mode is
 * fixed when it is built (kiln_batch_norm's training argument). */
void kiln_graph_set_training(kiln_graph *g, bool training);
int kiln_graph_n_nodes(const kiln_graph *g);
kiln_tensor *kiln_graph_node(const kiln_graph *g, int i);
/* Peak bytes of intermediate buffers placed by the liveness planner, and
 * what they would take with one buffer each (plans if not planned yet). */
size_t kiln_graph_planned_bytes(kiln_graph *g);
size_t kiln_graph_unplanned_bytes(kiln_graph *g);
/* A hook called during kiln_graph_compute as soon as a gradient is final
 * for this compute: after the last node that adds into it (the weight
 * gradient's matmul for a linear layer, else its accumulate node), with
 * grad = kiln_tensor_grad(leaf), once per gradient per compute, in the
 * order the backward pass finishes them (as torch's
 * register_post_accumulate_grad_hook; data-parallel training starts each
 * gradient's all-reduce from it). On a device backend every hook runs
 * after the whole compute. fn NULL removes it. */
typedef void (*kiln_grad_hook_fn)(void *user, kiln_tensor *grad);
kiln_status kiln_graph_set_grad_hook(kiln_graph *g, kiln_grad_hook_fn fn, void *user);
/* Release the graph's intermediate buffer (the graph stays usable). */
void kiln_graph_free_buffers(kiln_graph *g);
/* Name of node i's op, for printing. */
const char *kiln_op_name_of(const kiln_tensor *t);

/* ---- gradient checkpointing ---------------------------------------------- */
/* As torch.utils.checkpoint.checkpoint(block, x): the nodes built between
 * kiln_checkpoint_begin and kiln_checkpoint_end form a segment whose
 * activations the backward pass does not keep but recomputes. The segment
 * keeps what its nodes read from outside it (its input, the parameters)
 * and what is read outside it (its output); kiln_graph_backward rewrites
 * the backward pass to read copies of the rest, each recomputed just
 * before the backward first needs it, so the planner (kiln_graph_planned_bytes)
 * holds one segment's activations at a time during the backward pass. The
 * gradients are bit for bit those without checkpointing; dropout inside a
 * segment recomputes the forward's mask (it depends on the seed and the
 * compute only). Segments do not nest (KILN_ERR_STATE); a segment must be
 * closed before kiln_graph_backward (KILN_ERR_STATE); an op that writes in
 * place (kiln_slice_assign, batch norm updating running statistics) cannot
 * be recomputed: kiln_graph_backward refuses it (KILN_ERR_UNSUPPORTED) and
 * leaves the graph as it was. The rewrite is only graph structure, so it
 * works on every backend. (Not to be confused with kiln_checkpoint_save,
 * which writes parameters to a file.)
 *
 *     for (int l = 0; l < n_layers; l++) {
 *         kiln_checkpoint_begin(ctx);
 *         x = block_forward(ctx, &blocks[l], x);
 *         kiln_checkpoint_end(ctx);
 *     }
 *     loss = ...;  kiln_graph_add(g, loss);  kiln_graph_backward(g, loss);
 */
kiln_status kiln_checkpoint_begin(kiln_ctx *ctx);
kiln_status kiln_checkpoint_end(kiln_ctx *ctx);

#ifdef __cplusplus
}
#endif
#endif /* KILN_OPS_H */
