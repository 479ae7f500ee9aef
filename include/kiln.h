/* kiln.h — the public API of kiln, a small tensor and autodiff library in C.
 *
 * You describe a computation as a graph of tensors. Op constructors such as
 * kiln_matmul() only record a node; nothing runs until kiln_graph_compute().
 * A graph can be built once and computed many times (set new inputs, compute,
 * step the optimizer, repeat). kiln_graph_backward() appends the reverse-mode
 * gradient of a scalar loss, derived from one backward rule per op; the
 * gradients accumulate into each parameter's grad tensor (PyTorch semantics:
 * zero them with kiln_zero_grad() or the optimizer between steps).
 *
 * Shapes follow PyTorch: shape[0] is the outermost dimension and the last
 * dimension is contiguous. Negative axes count from the end.
 *
 * Errors are values. A constructor that gets a bad shape or dtype returns
 * NULL and sets a message (kiln_last_error()) naming the op and the shapes.
 * Every constructor given a NULL source returns NULL and keeps the first
 * message, so a whole model can be built and checked once at the end.
 * Nothing in the library exits or aborts on a user error.
 *
 * Usage — one step of a linear regression:
 *
 *     kiln_ctx *ctx = kiln_ctx_new();
 *     kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 32, 8);      // inputs
 *     kiln_tensor *y = kiln_new_2d(ctx, KILN_F32, 32, 1);      // targets
 *     kiln_tensor *w = kiln_param(ctx, "w", KILN_F32, 2, (int64_t[]){8, 1});
 *     kiln_tensor_fill_randn(w, 42, 0.0, 0.1);
 *     kiln_tensor *loss = kiln_mse(ctx, kiln_matmul(ctx, x, w), y);
 *     kiln_graph *g = kiln_graph_new(ctx);
 *     if (!loss || kiln_graph_add(g, loss) || kiln_graph_backward(g, loss)) {
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *         return 1;
 *     }
 *     kiln_optim *opt = kiln_sgd_new(ctx, &(kiln_sgd_config){.lr = 0.1f});
 *     // ... fill x and y with kiln_tensor_set_f32(), then per step:
 *     kiln_graph_compute(g);
 *     kiln_optim_step(opt);          // updates w and zeroes its gradient
 *     printf("loss %f\n", kiln_tensor_item(loss));
 *     kiln_ctx_free(ctx);            // frees everything made in ctx
 */
#ifndef KILN_H
#define KILN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KILN_VERSION "0.1.0"
#define KILN_MAX_DIMS 6

/* ---- status and errors ------------------------------------------------ */

typedef enum kiln_status {
    KILN_OK = 0,
    KILN_ERR_SHAPE,       /* shapes do not fit the op */
    KILN_ERR_DTYPE,       /* dtype not supported by the op, or a mismatch */
    KILN_ERR_ARG,         /* a bad argument (NULL, out of range, ...) */
    KILN_ERR_OOM,         /* an allocation failed */
    KILN_ERR_IO,          /* a file could not be opened, read or written */
    KILN_ERR_FORMAT,      /* a file is corrupt, truncated or of another kind */
    KILN_ERR_STATE,       /* the call is not valid in this state */
    KILN_ERR_UNSUPPORTED, /* the op/backend/dtype combination does not exist */
    KILN_ERR_NUMERIC      /* NaN or Inf where a finite value was needed */
} kiln_status;

/* The message and status of the last error on this thread. */
const char *kiln_last_error(void);
kiln_status kiln_last_status(void);
void kiln_clear_error(void);
/* Set this thread's error (for code built on kiln, e.g. models that check
 * their configuration); returns s. */
kiln_status kiln_set_error(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *kiln_status_name(kiln_status s);

/* ---- dtypes ------------------------------------------------------------ */

/* The plain dtypes hold one value per element. The quantized (block)
 * dtypes hold a block of consecutive elements in a fixed number of bytes:
 * a scale and packed codes. A quantized tensor is made by kiln_quantize()
 * (or loaded), is contiguous with its last dimension a multiple of the
 * block, and is read through kiln_dequantize() (an op giving f32) or the
 * host accessors (kiln_tensor_get_f32 dequantizes). Views that keep whole
 * blocks are allowed (reshape, detach, slicing rows); slicing inside a
 * block is refused, and so is every other op ("op X does not take q4_0;
 * dequantize first"), but kiln_matmul and kiln_linear. kiln_linear(x, wq)
 * and kiln_matmul_t(x, false, wq, true) with x f32 and wq a contiguous 2-D
 * quantized [out, in] weight run a fused quantized matmul that never
 * materializes the f32 weight: with few rows of x (generation) Q8_0,
 * Q4_0 and the GQ types quantize each row of x to int8 per block of 32
 * (ggml's Q8_0 rule) and use integer dot products, so the result differs
 * from the exact product by up to about 0.025 |x| |w| per output
 * (typically 100x less); NF4 and NF4_DQ decode in registers and stay in
 * f32; with 8 rows or more (prompts) Q8_0 and Q4_0 run a block-scaled
 * int8 GEMM on AVX512-VNNI (x quantized the same way), and the other types
 * (or a CPU without it) dequantize W a panel at a time into a cache-sized
 * buffer for the f32 GEMM. The Vulkan backend has kernels for every
 * quantized type (f32 products with the dequantized W). Gradients flow to
 * x (through the dequantized W). Any other quantized operand is
 * dequantized first.
 * kiln_tensor_data() gives the raw blocks (kiln_tensor_nbytes() bytes);
 * kiln_tensor_set_*() and the fills refuse a quantized tensor, and it has
 * no gradient. kiln_tensor_new() of a quantized dtype gives zero blocks
 * (all values 0), for loaders to fill.
 *
 *   dtype      block  bytes  bits/weight  layout of one block
 *   Q8_0          32     34     8.5       f16 d; int8 q[32]            x = d*q
 *   Q4_0          32     18     4.5       f16 d; u8 qs[16]             x = d*(q-8)
 *   NF4           64     36     4.5       f32 absmax; u8 codes[32]     x = absmax*NF4[code]
 *   NF4_DQ     16384   8456     4.129     f32 offset; f32 absmax2; u8 qabsmax[256]; u8 codes[8192]
 *   DFP16         64    130    16.25      i16 e; i16 q[64]                 x = q*2^e
 *
 * Q8_0 and Q4_0 are ggml's block_q8_0 / block_q4_0 byte for byte (GGUF):
 * Q8_0 d = absmax/127, q = round(x/d); Q4_0 d = m/-8 with m the value of
 * largest magnitude, q = min(15, (int)(x/d + 8.5)), element j in the low
 * nibble of byte j and element j+16 in the high nibble. NF4 is QLoRA's /
 * bitsandbytes' 4-bit NormalFloat with blocks of 64: x * (1/absmax) goes to
 * the nearest of 16 table values by the midpoints of the table (a value on
 * a midpoint takes the lower code), two codes per byte, the first element
 * in the high nibble. NF4_DQ is NF4 with double quantization: 256
 * consecutive blocks of 64 form a super-block whose 256 absmax values,
 * minus their mean (offset), are quantized with bitsandbytes' signed 8-bit
 * dynamic map in one block of 256 (absmax2 their largest magnitude).
 * bitsandbytes takes one mean per tensor; here it is one per super-block,
 * so that the dtype stays a plain sequence of self-contained blocks. An
 * NF4_DQ tensor needs its last dimension a multiple of 64 and its element
 * count a multiple of 16384; it can be reshaped but not sliced unless the
 * rows are whole super-blocks.
 *
 *     kiln_tensor *wq = kiln_quantize(ctx, w, KILN_NF4);   // w: f32 [out, in]
 *     kiln_tensor *y = kiln_linear(ctx, x, wq, NULL);       // fused quantized matmul
 *     kiln_tensor *wf = kiln_dequantize(ctx, wq);           // f32 [out, in] node
 *
 * GQ<b>_<G> hold the GPTQ layout (kiln_gptq_result below): b-bit codes
 * (b = 4, 3, 2), one block per group of G = 32, 64 or 128 consecutive
 * elements of a row, x = scale * (q - zero) with q in [0, 2^b - 1]:
 *
 *   dtype      block  bytes  bits/weight  layout of one block
 *   GQ4_32        32     19     4.75      f16 scale; u8 zero; codes[16]
 *   GQ4_64        64     35     4.375     f16 scale; u8 zero; codes[32]
 *   GQ4_128      128     67     4.1875    f16 scale; u8 zero; codes[64]
 *   GQ3_32        32     15     3.75      f16 scale; u8 zero; codes[12]
 *   GQ3_64        64     27     3.375     f16 scale; u8 zero; codes[24]
 *   GQ3_128      128     51     3.1875    f16 scale; u8 zero; codes[48]
 *   GQ2_32        32     11     2.75      f16 scale; u8 zero; codes[8]
 *   GQ2_64        64     19     2.375     f16 scale; u8 zero; codes[16]
 *   GQ2_128      128     35     2.1875    f16 scale; u8 zero; codes[32]
 *
 * The codes come in chunks of 32 elements (4b bytes each, in order), so
 * that a chunk decodes to 32 bytes with a few SIMD instructions: 4-bit:
 * element j in the low nibble of byte j and j+16 in the high nibble (as
 * Q4_0); 2-bit: element j (j < 8) in bits 0-1 of byte j, j+8 in bits 2-3,
 * j+16 in bits 4-5, j+24 in bits 6-7; 3-bit: the low two bits as the
 * 2-bit chunk (8 bytes), then bit 2 of element j in bit j%8 of byte 8+j/8
 * (as ggml's q3_K splits its codes into a 2-bit and a 1-bit plane). The
 * scale is stored little-endian; the zero point is at most 2^b - 1 (the
 * fused matmul relies on it). kiln_quantize to a GQ dtype is RTN with
 * GPTQ's reference Quantizer (asymmetric; the rules are at kiln_gptq_config
 * below) on each block, the zero point from the f32 scale and the codes
 * from the scale rounded to f16 as stored (kept finite and nonzero).
 * kiln_gptq_pack stores a GPTQ or RTN result (groups a multiple of the
 * dtype's, per channel, symmetric or not, act order) in a GQ dtype. The
 * fused matmul quantizes x to int8 per 32 as for Q4_0 and takes integer
 * dot products of (q - zero) with it. Views, get_rows and the refusals
 * follow the rules above with the group as the block. */
typedef enum kiln_dtype {
    KILN_F32 = 0,
    KILN_F64,
    KILN_F16,
    KILN_BF16,
    KILN_I32,
    /* quantized block types */
    KILN_Q8_0,
    KILN_Q4_0,
    KILN_NF4,
    KILN_NF4_DQ,
    KILN_GQ4_32, /* the GPTQ layout: bits, group */
    KILN_GQ4_64,
    KILN_GQ4_128,
    KILN_GQ3_32,
    KILN_GQ3_64,
    KILN_GQ3_128,
    KILN_GQ2_32,
    KILN_GQ2_64,
    KILN_GQ2_128,
    KILN_DFP16, /* dynamic fixed point: 64 int16 + a shared exponent (quant/dfp.h) */
    KILN_DTYPE_COUNT
} kiln_dtype;

const char *kiln_dtype_name(kiln_dtype t);
/* Bytes per block: per element for the plain dtypes (block 1). */
size_t kiln_dtype_size(kiln_dtype t);
/* Elements per block: 1 for the plain dtypes. */
int64_t kiln_dtype_block(kiln_dtype t);
bool kiln_dtype_is_quantized(kiln_dtype t);

/* ---- context ----------------------------------------------------------- */

typedef struct kiln_ctx kiln_ctx;
typedef struct kiln_tensor kiln_tensor;
typedef struct kiln_graph kiln_graph;

/* A context owns the metadata of every tensor and graph made in it and the
 * storage of its leaf tensors (inputs, parameters, gradients, state).
 * Returns NULL only when out of memory. */
kiln_ctx *kiln_ctx_new(void);
void kiln_ctx_free(kiln_ctx *ctx);

/* With gradients disabled, new nodes never require grad (torch.no_grad). */
void kiln_ctx_set_grad_enabled(kiln_ctx *ctx, bool enabled);
bool kiln_ctx_grad_enabled(const kiln_ctx *ctx);

/* Bytes of leaf storage currently held by the context. */
size_t kiln_ctx_storage_bytes(const kiln_ctx *ctx);

/* Scratch work in a long-lived context: a mark of what ctx holds now, and
 * a rewind that frees every tensor and graph made after it (metadata,
 * storage, graph buffers), so that a loop building a small graph per step
 * (generation with a KV cache) does not grow the context. What was made
 * before the mark stays, with the values ops wrote into it since. After
 * the rewind nothing made after the mark may be used. Between the two,
 * make no parameters and compute no graph made before the mark (its
 * buffers would be newer than the mark); a context that got parameters or
 * device memory since the mark is refused (KILN_ERR_STATE, nothing freed).
 *
 *     kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
 *     ... build a graph, compute it, read its outputs ...
 *     kiln_ctx_rewind(ctx, mark);
 */
typedef struct kiln_ctx_mark { /* private */
    void *chunk;
    size_t used, storage;
    uint64_t owned;
    int tensors, params, devbufs;
} kiln_ctx_mark;
kiln_ctx_mark kiln_ctx_get_mark(const kiln_ctx *ctx);
kiln_status kiln_ctx_rewind(kiln_ctx *ctx, kiln_ctx_mark mark);

/* Parameters made by kiln_param() in this context, in creation order.
 * Fills up to max entries of out (out may be NULL) and returns the count. */
int kiln_ctx_params(kiln_ctx *ctx, kiln_tensor **out, int max);

/* Zero the gradient of every parameter in the context. */
void kiln_zero_grad(kiln_ctx *ctx);

/* Worker threads for kernels; default: $KILN_THREADS, else all cores. */
void kiln_set_threads(int n);
int kiln_get_threads(void);
/* The SIMD level and extensions the CPU kernels use, e.g.
 * "avx512 avx512_vnni avx512_bf16 amx_bf16 amx_int8"; $KILN_SIMD=scalar|avx2|
 * avx512|neon caps the level. */
const char *kiln_cpu_describe(void);

/* How f32 matmuls (forward and backward) compute, like PyTorch's
 * torch.set_float32_matmul_precision(): KILN_MATMUL_BF16 rounds both
 * operands to bf16 and accumulates in f32 (AMX tiles or AVX512-BF16 where
 * the CPU has them). Tensors, gradients and optimizer state stay f32, so
 * this is bf16 mixed-precision training with f32 master weights. */
typedef enum kiln_matmul_precision { KILN_MATMUL_F32 = 0, KILN_MATMUL_BF16 } kiln_matmul_precision;
kiln_status kiln_set_matmul_precision(kiln_matmul_precision p);
kiln_matmul_precision kiln_get_matmul_precision(void);

/* ---- backends ------------------------------------------------------------ */
/* Graphs run on the CPU unless told otherwise. A device backend keeps a copy
 * of each tensor it touches in device memory and copies it back only when
 * the host reads it (kiln_tensor_get_f32, kiln_tensor_item, ...); an op the
 * backend does not implement runs on the CPU with the copies it needs, and
 * kiln_graph_stats() counts them.
 *
 *     kiln_backend *vk = kiln_backend_get("vulkan");   // NULL: not built or no device
 *     if (vk) kiln_ctx_set_backend(ctx, vk);            // its graphs and optimizers run there
 */
typedef struct kiln_backend kiln_backend;

/* "cpu", "vulkan" (or "cuda"): the backend, started on first use. NULL with
 * KILN_ERR_UNSUPPORTED when it was not built in or finds no device. */
kiln_backend *kiln_backend_get(const char *name);
const char *kiln_backend_name(const kiln_backend *b);
/* The device it runs on, e.g. "NVIDIA H100 (discrete GPU, Vulkan 1.3)". */
const char *kiln_backend_device(const kiln_backend *b);
/* Messages from the driver's validation layer so far (Vulkan, with
 * $KILN_VULKAN_VALIDATE=1); 0 elsewhere. */
int64_t kiln_backend_validation_messages(const kiln_backend *b);

/* Graphs made in ctx from now on (optimizers' step graphs included) run on
 * b; b NULL means the CPU. A graph can also be moved on its own. */
kiln_status kiln_ctx_set_backend(kiln_ctx *ctx, kiln_backend *b);
kiln_backend *kiln_ctx_backend(const kiln_ctx *ctx);
kiln_status kiln_graph_set_backend(kiln_graph *g, kiln_backend *b);
kiln_backend *kiln_graph_backend(const kiln_graph *g);

/* What a graph's computes did, summed over its computes. A node its backend
 * does not claim runs on the CPU: set $KILN_BACKEND_DEBUG=1 to have each
 * such op named once on stderr. */
typedef struct kiln_graph_stats {
    int64_t computes;
    int64_t nodes_on_backend;  /* kernels run by the graph's backend */
    int64_t nodes_fallback;    /* kernels run on the CPU instead */
    int64_t uploads, upload_bytes;     /* host -> device copies */
    int64_t downloads, download_bytes; /* device -> host copies */
} kiln_graph_stats;
kiln_graph_stats kiln_graph_get_stats(const kiln_graph *g);

/* ---- tensors ----------------------------------------------------------- */

/* A leaf tensor with its own zero-filled storage. */
kiln_tensor *kiln_tensor_new(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape);
kiln_tensor *kiln_new_1d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0);
kiln_tensor *kiln_new_2d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1);
kiln_tensor *kiln_new_3d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2);
kiln_tensor *kiln_new_4d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
/* A 0-d-like scalar (shape [1]) holding v. */
kiln_tensor *kiln_scalar(kiln_ctx *ctx, kiln_dtype dtype, double v);

/* A trainable parameter: a named leaf that requires grad and owns a
 * zero-filled gradient tensor of the same shape (kiln_tensor_grad). */
kiln_tensor *kiln_param(kiln_ctx *ctx, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape);

kiln_dtype kiln_tensor_dtype(const kiln_tensor *t);
int kiln_tensor_ndim(const kiln_tensor *t);
int64_t kiln_tensor_dim(const kiln_tensor *t, int axis); /* negative axes allowed */
const int64_t *kiln_tensor_shape(const kiln_tensor *t);
int64_t kiln_tensor_numel(const kiln_tensor *t);
size_t kiln_tensor_nbytes(const kiln_tensor *t);
bool kiln_tensor_is_contiguous(const kiln_tensor *t);
const char *kiln_tensor_name(const kiln_tensor *t);
kiln_tensor *kiln_tensor_set_name(kiln_tensor *t, const char *name);

/* Gradient of a leaf that requires grad (NULL otherwise). */
kiln_tensor *kiln_tensor_grad(const kiln_tensor *t);
/* Make a leaf require grad (allocates its gradient). */
kiln_status kiln_tensor_set_requires_grad(kiln_tensor *t, bool requires);
bool kiln_tensor_requires_grad(const kiln_tensor *t);

/* Host pointer to the first element, or NULL while a graph node has not
 * been computed (or its buffer was reused by a later node; read outputs
 * passed to kiln_graph_add, which keep their own storage). On a device
 * backend this copies newer device bytes back and makes the host copy the
 * current one, so ask again after each compute before reading or writing
 * through the pointer (kiln_tensor_set_f32 and friends do this for you). */
void *kiln_tensor_data(const kiln_tensor *t);

/* Copy n elements between the tensor (in logical row-major order, any
 * strides) and a host array of f32/f64, converting dtypes. */
kiln_status kiln_tensor_set_f32(kiln_tensor *t, const float *src, int64_t n);
kiln_status kiln_tensor_get_f32(const kiln_tensor *t, float *dst, int64_t n);
kiln_status kiln_tensor_set_f64(kiln_tensor *t, const double *src, int64_t n);
kiln_status kiln_tensor_get_f64(const kiln_tensor *t, double *dst, int64_t n);
kiln_status kiln_tensor_set_i32(kiln_tensor *t, const int32_t *src, int64_t n);
kiln_status kiln_tensor_get_i32(const kiln_tensor *t, int32_t *dst, int64_t n);
/* The first element as a double (NaN if unavailable; see kiln_last_error). */
double kiln_tensor_item(const kiln_tensor *t);

/* Fill a leaf. Random fills are seeded and reproducible on every platform. */
kiln_status kiln_tensor_fill(kiln_tensor *t, double value);
kiln_status kiln_tensor_fill_uniform(kiln_tensor *t, uint64_t seed, double lo, double hi);
kiln_status kiln_tensor_fill_randn(kiln_tensor *t, uint64_t seed, double mean, double std);
/* Kaiming-uniform as torch.nn.Linear/Conv2d do: U(-1/sqrt(fan_in), +). */
kiln_status kiln_tensor_init_linear(kiln_tensor *t, uint64_t seed, int64_t fan_in);

/* Quantize a contiguous f32 tensor (already computed: a leaf or a graph
 * output) into a new leaf of a quantized dtype and the same shape, with
 * the scalar reference of the format (see the dtypes above). Its last
 * dimension must be a multiple of the block (64 for NF4_DQ, with the
 * element count a multiple of 16384). */
kiln_tensor *kiln_quantize(kiln_ctx *ctx, kiln_tensor *src_f32, kiln_dtype dtype);
/* A node giving the f32 values of a quantized tensor (or view of one).
 * No gradient flows through it: a quantized tensor is a constant. */
kiln_tensor *kiln_dequantize(kiln_ctx *ctx, kiln_tensor *q);

/* Print shape, dtype and (up to 'max' of) the values. */
void kiln_tensor_print(const kiln_tensor *t, FILE *f, int max);

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
 * broadcast; a 2-D operand is shared across the batch. */
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

kiln_tensor *kiln_reshape(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape); /* one dim may be -1 */
kiln_tensor *kiln_view(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape);    /* reshape that never copies; errors if x is not contiguous */
kiln_tensor *kiln_flatten(kiln_ctx *ctx, kiln_tensor *x, int start_axis);                 /* merge dims start..end */
kiln_tensor *kiln_permute(kiln_ctx *ctx, kiln_tensor *x, const int *axes);
kiln_tensor *kiln_transpose(kiln_ctx *ctx, kiln_tensor *x, int axis0, int axis1);
kiln_tensor *kiln_contiguous(kiln_ctx *ctx, kiln_tensor *x);
/* x[start:end:step] along axis (end may be negative as in Python; step >= 1). */
kiln_tensor *kiln_slice(kiln_ctx *ctx, kiln_tensor *x, int axis, int64_t start, int64_t end, int64_t step);
kiln_tensor *kiln_concat(kiln_ctx *ctx, kiln_tensor *const *xs, int n, int axis);
/* Constant padding: pads[2*i], pads[2*i+1] = before/after for axis i. */
kiln_tensor *kiln_pad(kiln_ctx *ctx, kiln_tensor *x, const int64_t *pads, double value);
/* Broadcast (stretch size-1 dims, add leading dims) as a view: torch.expand. */
kiln_tensor *kiln_broadcast_to(kiln_ctx *ctx, kiln_tensor *x, int ndim, const int64_t *shape);
/* Tile: reps has x's ndim entries (torch.Tensor.repeat). */
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
 * column masked gives 0 (softmax) or -inf (log_softmax), not NaN. */
kiln_tensor *kiln_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal);
kiln_tensor *kiln_log_softmax(kiln_ctx *ctx, kiln_tensor *x, bool causal);

/* logits [N, C] (or [..., C]), labels i32 [N] (or [...]): mean over the
 * labels that are not ignore_index; a tensor of shape [1]. All labels
 * ignored gives 0 (torch: NaN). A label outside [0, C) fails the compute. */
kiln_tensor *kiln_cross_entropy(kiln_ctx *ctx, kiln_tensor *logits, kiln_tensor *labels, int32_t ignore_index);
/* mean((a - b)^2) over equal shapes (no broadcasting), shape [1]. */
kiln_tensor *kiln_mse(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *b);

/* Normalize over the last axis; weight and bias [C] may be NULL. */
kiln_tensor *kiln_layer_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, kiln_tensor *bias, double eps);
kiln_tensor *kiln_rms_norm(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *weight, double eps);

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

/* 2-D convolution, NCHW. x [N, C, H, W], w [O, C/groups, kh, kw], bias [O]
 * or NULL. */
typedef struct kiln_conv2d_params {
    int stride[2];   /* 0 means 1 */
    int padding[2];
    int dilation[2]; /* 0 means 1 */
    int groups;      /* 0 means 1 */
    int output_padding[2]; /* conv_transpose2d only */
} kiln_conv2d_params;
kiln_tensor *kiln_conv2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p);
/* Transposed convolution: x [N, C, H, W], w [C, O/groups, kh, kw]. */
kiln_tensor *kiln_conv_transpose2d(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w, kiln_tensor *bias, const kiln_conv2d_params *p);

/* Pooling over NCHW; stride 0 means the kernel size. avg counts padding
 * (torch's count_include_pad=True); max pads with -inf. */
kiln_tensor *kiln_max_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding);
kiln_tensor *kiln_avg_pool2d(kiln_ctx *ctx, kiln_tensor *x, int kh, int kw, int stride, int padding);

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
 * gradient *added* into kiln_tensor_grad(leaf) by each compute. */
kiln_status kiln_graph_backward(kiln_graph *g, kiln_tensor *loss);
/* Run the graph (planning memory on the first call or after changes). */
kiln_status kiln_graph_compute(kiln_graph *g);
/* Dropout and similar ops act only in training mode (the default). */
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

/* ---- optimizers ---------------------------------------------------------- */
/* An optimizer updates every parameter of its context (or the list given)
 * through fused step ops. kiln_optim_step() applies one step, then zeroes
 * the gradients. */

typedef struct kiln_optim kiln_optim;

typedef struct kiln_sgd_config {
    float lr;
    float momentum;     /* 0: plain SGD */
    float dampening;
    float weight_decay; /* L2, added to the gradient as torch.optim.SGD */
    bool nesterov;
} kiln_sgd_config;

/* params NULL: all parameters of ctx at the time of the call. */
kiln_optim *kiln_sgd_new(kiln_ctx *ctx, const kiln_sgd_config *cfg);
kiln_optim *kiln_sgd_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg);

/* Adam (torch.optim.Adam: weight_decay is L2 added to the gradient) and
 * AdamW (torch.optim.AdamW: decoupled, p *= 1 - lr * weight_decay), with
 * bias correction and optional AMSGrad. cfg NULL means torch's defaults:
 * kiln_adam_defaults() (lr 1e-3, betas 0.9/0.999, eps 1e-8, weight_decay 0)
 * and kiln_adamw_defaults() (the same with weight_decay 0.01). */
typedef struct kiln_adam_config {
    float lr;
    float beta1, beta2; /* torch's betas */
    float eps;
    float weight_decay;
    bool amsgrad;
} kiln_adam_config;

kiln_adam_config kiln_adam_defaults(void);
kiln_adam_config kiln_adamw_defaults(void);
kiln_optim *kiln_adam_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adam_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);

/* Lion (Chen et al. 2023, as lucidrains' lion-pytorch): one f32/f64
 * momentum per parameter; each step p *= 1 - lr * weight_decay, then
 * p -= lr * sign(beta1 * m + (1 - beta1) * g), then
 * m = beta2 * m + (1 - beta2) * g. cfg NULL means kiln_lion_defaults()
 * (lr 1e-4, betas 0.9/0.99, weight_decay 0). */
typedef struct kiln_lion_config {
    float lr;
    float beta1, beta2; /* lion-pytorch's betas, each in [0, 1] */
    float weight_decay; /* decoupled, as AdamW's */
} kiln_lion_config;

kiln_lion_config kiln_lion_defaults(void);
kiln_optim *kiln_lion_new(kiln_ctx *ctx, const kiln_lion_config *cfg);
kiln_optim *kiln_lion_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg);

/* ---- 8-bit optimizers ---- */
/* Block-wise 8-bit Adam, AdamW, Lion and SGD with momentum, as bitsandbytes'
 * 8-bit optimizers (Dettmers et al., "8-bit Optimizers via Block-wise
 * Quantization"): each state is one byte per element (a code into
 * bitsandbytes' dynamic map: signed for first moments and momentum,
 * unsigned for Adam's second moment) plus one f32 absmax per block of 256
 * elements. Each step dequantizes a block, updates it in f32 with the same
 * formulas as the 32-bit optimizer above (torch's: Adam's weight decay is L2,
 * AdamW's and Lion's decoupled and applied first), takes a fresh absmax and
 * requantizes to the nearest code. Gradient elements that are NaN or
 * infinite leave their parameter element and its state value untouched
 * (the state is still requantized with its block). Parameters with fewer
 * than 4096 elements, and f64 parameters, keep 32-bit state and take the
 * plain step of the 32-bit optimizer. amsgrad is refused (not in 8 bits);
 * 8-bit SGD needs momentum > 0 (dampening and nesterov as kiln_sgd_new).
 * kiln_optim_state_bytes counts the bytes held: per 8-bit state
 * 4 * ceil(n / 4) bytes of codes and 4 per block of absmax. On Vulkan the
 * 8-bit Adam/AdamW, Lion and SGD steps run on the device (the CPU's
 * parameters, codes and absmax, bit for bit). */
kiln_optim *kiln_adam8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adam8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw8bit_new(kiln_ctx *ctx, const kiln_adam_config *cfg);
kiln_optim *kiln_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_adam_config *cfg);
kiln_optim *kiln_lion8bit_new(kiln_ctx *ctx, const kiln_lion_config *cfg);
kiln_optim *kiln_lion8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_lion_config *cfg);
kiln_optim *kiln_sgd8bit_new(kiln_ctx *ctx, const kiln_sgd_config *cfg);
kiln_optim *kiln_sgd8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_sgd_config *cfg);


/* ---- GaLore ---- */
/* GaLore (Zhao et al. 2024, as galore_torch's GaLoreAdamW, projection type
 * 'std'): each 2-D parameter p [m, n] keeps Adam's moments in a rank-r
 * subspace of its gradient G. On step 1 and every update_gap steps after
 * (steps 1, T+1, 2T+1, ...) the projector P is refreshed from an f32 SVD
 * G = U S Vh: P = Vh[:r] [r, n] when m >= n, else P = U[:, :r] [m, r].
 * Each step, with R = G P^T (m >= n) or P^T G, t the step number:
 *   m = beta1 m + (1 - beta1) R;  v = beta2 v + (1 - beta2) R^2
 *   N = m / (sqrt(v) + eps)
 *   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * scale * (N P or P N)
 *   p *= 1 - lr * weight_decay                 (decoupled, after the update)
 * as galore_torch does (eps outside the bias correction, decay last). The
 * moments are kept when P changes. Parameters that are not matrices use
 * kiln_adamw exactly (torch.optim.AdamW). r is min(rank, m, n). 2-D
 * parameters must be f32. Needs LAPACK (sgesdd): a BLAS=0 build has none
 * and the constructors fail with KILN_ERR_UNSUPPORTED. kiln_optim_state_bytes
 * counts the projectors and the low-rank moments.
 *
 * 8-bit GaLore (kiln_galore_adamw8bit_*, as galore_torch's GaLoreAdamW8bit):
 * the same projection, with bitsandbytes' block-wise 8-bit Adam on R (the
 * moments stored as kiln_adam8bit stores them, about 2 bytes per element of
 * R plus one f32 absmax per 256) in bitsandbytes' form, no weight decay
 * inside:
 *   N = m / (sqrt(v) + eps * sqrt(1 - beta2^t))
 *   p -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * scale * (N P or P N)
 *   p *= 1 - lr * weight_decay
 * (m / sqrt(v) with torch's eps placement, unlike the 32-bit GaLore's). An
 * element of R whose value is NaN or infinite is skipped (its moments kept,
 * no update from it), as bitsandbytes does. An R of fewer than 4096
 * elements keeps f32 moments (bitsandbytes' min_8bit_size), same formula.
 * In both, a NaN or Inf in G on a refresh step fails the step with
 * KILN_ERR_NUMERIC before p changes (LAPACK's SVD is undefined on it).
 * Parameters that are not matrices use kiln_adamw8bit's step.
 * On Vulkan both GaLore steps run on the device but for the SVD, which
 * stays on the CPU (LAPACK): a refresh step copies G down and P up. */
typedef struct kiln_galore_config {
    kiln_adam_config adamw; /* lr, betas, eps, weight_decay; amsgrad must be false */
    int rank;               /* r >= 1 */
    int update_gap;         /* T >= 1: steps between projector refreshes */
    float scale;            /* alpha, finite */
} kiln_galore_config;

/* galore_torch's defaults: lr 1e-3, betas 0.9/0.999, eps 1e-6,
 * weight_decay 0, rank 128, update_gap 200, scale 0.25. */
kiln_galore_config kiln_galore_defaults(void);
/* cfg NULL means kiln_galore_defaults(). */
kiln_optim *kiln_galore_adamw_new(kiln_ctx *ctx, const kiln_galore_config *cfg);
kiln_optim *kiln_galore_adamw_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                      const kiln_galore_config *cfg);
/* GaLoreAdamW8bit's defaults: kiln_galore_defaults() with eps 1e-8. */
kiln_galore_config kiln_galore8bit_defaults(void);
/* cfg NULL means kiln_galore8bit_defaults(). */
kiln_optim *kiln_galore_adamw8bit_new(kiln_ctx *ctx, const kiln_galore_config *cfg);
kiln_optim *kiln_galore_adamw8bit_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n,
                                          const kiln_galore_config *cfg);


/* ---- APOLLO ---- */
/* APOLLO and APOLLO-Mini (Zhu et al. 2024, "APOLLO: SGD-like Memory,
 * AdamW-level Performance"), as the reference apollo_torch computes them.
 * Each 2-D parameter G [m, n] keeps Adam moments of a random projection R
 * of its gradient (GaLore's side: m >= n gives R = G P^T [m, rank] with P
 * [rank, n], else R = P^T G [rank, n] with P [m, rank]; P ~ N(0, 1/rank),
 * regenerated every update_gap steps from a seed that advances each time).
 * With Rt = exp_avg / (sqrt(exp_avg_sq) + eps), the update is the raw
 * gradient scaled by s = |Rt| / (|R| + 1e-8): one factor per row of G
 * (m >= n) or per column (m < n), or one for the whole tensor (mini).
 * u = sqrt(scale) * s * G, its norm limited to 1.01 times the previous
 * step's (Fira's norm-growth limiter); then, as AdamW,
 * p *= 1 - lr * weight_decay and p -= lr * sqrt(bc2) / bc1 * u.
 * Every other parameter (not 2-D) steps as kiln_adamw exactly, with
 * adamw's settings (amsgrad unsupported). State: two moments of R's shape
 * and one norm per matrix; P is regenerated from the seed, never stored.
 * f32 matrices only. On Vulkan (a device with shaderFloat64) the step
 * runs on the device, P regenerated there with the CPU's bits. cfg NULL
 * means kiln_apollo_defaults(). */
typedef struct kiln_apollo_config {
    kiln_adam_config adamw; /* lr, betas, eps, weight_decay (decoupled) */
    int rank;               /* rows/columns of the projection, >= 1 */
    int update_gap;         /* steps between projector refreshes, >= 1 */
    float scale;            /* the update is multiplied by sqrt(scale) */
    bool mini;              /* one scaling factor per tensor (APOLLO-Mini) */
    uint64_t seed;          /* projector seeds derive from it */
    int first_index;        /* params[0]'s index in the whole model's list (0): parameter i's
                             * projector seed derives from seed and first_index + i, so that a
                             * ZeRO shard (kiln_dist) draws the projectors the whole list would */
} kiln_apollo_config;

/* apollo_torch's: lr 1e-3, betas 0.9/0.999, eps 1e-6, weight_decay 0,
 * rank 256, update_gap 200, scale 1, channel-wise factors. */
kiln_apollo_config kiln_apollo_defaults(void);
/* APOLLO-Mini: as kiln_apollo_defaults() with rank 1, scale 128, mini. */
kiln_apollo_config kiln_apollo_mini_defaults(void);
kiln_optim *kiln_apollo_new(kiln_ctx *ctx, const kiln_apollo_config *cfg);
kiln_optim *kiln_apollo_new_for(kiln_ctx *ctx, kiln_tensor *const *params, int n, const kiln_apollo_config *cfg);


/* ---- schedules, clipping, parameter groups ---- */
/* Learning-rate schedules, as transformers' get_*_schedule_with_warmup
 * (LambdaLR stepped after each optimizer step): step s (0 on the first
 * kiln_optim_step) uses lr = base lr (kiln_optim_lr) * f(s), with
 * W = warmup_steps, T = total_steps, r = min_lr_ratio:
 *   s < W:     f = s / max(1, W)                        (every kind)
 *   CONSTANT:  f = 1
 *   COSINE:    q = min(1, (s - W) / max(1, T - W)),
 *              f = r + (1 - r) * 0.5 * (1 + cos(pi * q))
 *   LINEAR:    q as COSINE, f = r + (1 - r) * (1 - q)
 * With r = 0 these are get_constant_schedule_with_warmup,
 * get_cosine_schedule_with_warmup (num_cycles 0.5) and
 * get_linear_schedule_with_warmup for s <= T; COSINE with r > 0 is
 * get_cosine_with_min_lr_schedule_with_warmup(min_lr_rate = r). Past T the
 * lr stays at r * base (transformers' cosine would rise again). Skipped
 * steps (clipping, below) do not advance s. */
typedef enum kiln_schedule_kind {
    KILN_SCHEDULE_CONSTANT = 0,
    KILN_SCHEDULE_COSINE,
    KILN_SCHEDULE_LINEAR
} kiln_schedule_kind;
typedef struct kiln_schedule {
    kiln_schedule_kind kind;
    int64_t warmup_steps, total_steps; /* total_steps >= warmup_steps for COSINE and LINEAR */
    float min_lr_ratio;                /* in [0, 1] */
} kiln_schedule;
/* NULL: back to the constant lr. The graph is not rebuilt: each step
 * writes its lr into the optimizer's hyperparameters. */
kiln_status kiln_optim_set_schedule(kiln_optim *opt, const kiln_schedule *s);
/* The lr step s uses (base lr times the schedule's factor). */
float kiln_optim_lr_at(const kiln_optim *opt, int64_t step);
/* Global-norm gradient clipping, as torch.nn.utils.clip_grad_norm_: before
 * each step the L2 norm of all the optimizer's gradients together; above
 * max_norm every gradient is multiplied by max_norm / (norm + 1e-6).
 * max_norm 0 turns it off (the default). A non-finite norm skips the step:
 * parameters and state untouched, gradients zeroed, the skip counted, and
 * kiln_optim_step returns KILN_ERR_NUMERIC naming the first parameter whose
 * gradient is not finite. */
kiln_status kiln_optim_set_clip_grad_norm(kiln_optim *opt, float max_norm);
/* The norm the last step measured (before clipping); -1 if none yet. */
float kiln_optim_last_grad_norm(const kiln_optim *opt);
/* Steps skipped for a non-finite norm, gradient or loss (clipping above,
 * the guard below); saved and loaded with the optimizer's state. */
int64_t kiln_optim_skipped_steps(const kiln_optim *opt);
/* The non-finite guard, torch.cuda.amp.GradScaler's skip without the
 * scaling (off by default): with it on, each kiln_optim_step first checks
 * the loss (when given: every element) and every gradient for NaN and
 * infinities (a reduction that runs where the optimizer runs, so the
 * gradients stay on a device). A bad one skips the step entirely: no
 * parameter, state or step count changes (the schedule does not advance),
 * gradients are zeroed as after a step, kiln_optim_skipped_steps counts it,
 * and kiln_optim_step returns KILN_ERR_NUMERIC with a message naming the
 * first bad parameter ("gradient of 'fc1.weight' is not finite") or the
 * loss. A step with finite values is bit for bit the unguarded one.
 *
 *     kiln_optim_set_skip_nonfinite(opt, true, loss);
 *     kiln_status s = kiln_optim_step(opt);
 *     if (s == KILN_ERR_NUMERIC) fprintf(stderr, "%s\n", kiln_last_error());  // skipped: go on
 *     else if (s) ...                                                            // a real error
 *
 * loss NULL checks the gradients only; it must be a float tensor of opt's
 * context, computed before each step (its value is read then). */
kiln_status kiln_optim_set_skip_nonfinite(kiln_optim *opt, bool on, kiln_tensor *loss);
/* Parameter groups: these parameters (all of the optimizer's) step with
 * lr * lr_scale and this weight decay (its meaning the optimizer's: L2 for
 * SGD and Adam, decoupled for AdamW and Lion), e.g. weight_decay 0 for
 * norms and biases. A parameter in an earlier group moves to this one.
 * The graph is not rebuilt: the group has its own hyperparameters. */
kiln_status kiln_optim_set_group(kiln_optim *opt, kiln_tensor *const *params, int n, float lr_scale,
                                 float weight_decay);


kiln_status kiln_optim_step(kiln_optim *opt);
/* A bad lr (negative, NaN, infinite) is an error and keeps the old one. */
kiln_status kiln_optim_set_lr(kiln_optim *opt, float lr);
float kiln_optim_lr(const kiln_optim *opt);
int64_t kiln_optim_steps(const kiln_optim *opt);
/* Bytes of optimizer state (momentum buffers, moments, ...). */
size_t kiln_optim_state_bytes(const kiln_optim *opt);

/* ---- data files -------------------------------------------------------- */

/* Read an IDX file (MNIST's format), gzipped or plain, into a new leaf:
 * u8 data become f32 scaled by 'scale' (e.g. 1/255), or i32 when as_labels
 * is true. Every header field and length is bounds-checked. */
kiln_tensor *kiln_idx_load(kiln_ctx *ctx, const char *path, bool as_labels, float scale);

/* ---- files: safetensors, checkpoints ---------------------------------- */
/* safetensors (Hugging Face's format, read by safetensors.torch.load_file):
 * 8 bytes little-endian header length N, N bytes of JSON header
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {string: string}} padded with spaces, then the tensors' bytes,
 * contiguous and little-endian. Opening a file checks everything (header
 * length, JSON, dtypes, shapes against byte counts, offsets covering the
 * data without holes or overlaps, duplicate names) before any tensor is
 * read; a bad file is KILN_ERR_FORMAT naming the file and what is wrong.
 * safetensors has no block dtypes: a quantized tensor is written as U8
 * [bytes] of its raw blocks, with the metadata entry "kiln.quantized.<name>"
 * = {"dtype": "nf4", "shape": [out, in]} (as bitsandbytes stores its 4-bit
 * weights as uint8 plus their quantization state); opening restores the
 * dtype and shape, checked against the block bytes, and the info, load and
 * read_into see the quantized tensor (info's dtype stays "U8"). */
typedef struct kiln_safetensors kiln_safetensors;

/* One tensor of an open file. dtype is the file's name for it ("F32",
 * "BF16", "I64", ...); kiln_dtype is the kiln dtype or -1 when kiln has
 * none (loading it is KILN_ERR_DTYPE). Pointers live until close. */
typedef struct kiln_safetensors_info {
    const char *name;
    const char *dtype;
    int kiln_dtype;
    int ndim;
    const int64_t *shape;
    size_t nbytes;
} kiln_safetensors_info;

/* Open and validate a file (mapped read-only). NULL with the error set. */
kiln_safetensors *kiln_safetensors_open(const char *path);
void kiln_safetensors_close(kiln_safetensors *st);
/* Tensors in the file, in the order of their data. */
int kiln_safetensors_count(const kiln_safetensors *st);
kiln_status kiln_safetensors_info_at(const kiln_safetensors *st, int i, kiln_safetensors_info *out);
/* The index of the tensor called name, or -1. */
int kiln_safetensors_find(const kiln_safetensors *st, const char *name);
/* The "__metadata__" value of key, or NULL. */
const char *kiln_safetensors_metadata(const kiln_safetensors *st, const char *key);
/* The tensor called name as a new leaf of ctx (named name). */
kiln_tensor *kiln_safetensors_load(kiln_safetensors *st, kiln_ctx *ctx, const char *name);
/* Into an existing leaf of the same dtype and shape (on a device backend
 * the device copy is replaced too). */
kiln_status kiln_safetensors_read_into(kiln_safetensors *st, const char *name, kiln_tensor *dst);

/* Write n tensors (leaves or computed outputs; names[i], or each tensor's
 * own name when names is NULL; unique and non-empty) and n_meta metadata
 * pairs (meta[2k] = key, meta[2k + 1] = value; meta may be NULL) to path,
 * atomically: a temporary file in the same directory is written, flushed,
 * synced and renamed over path, then the directory is synced. On any error
 * the temporary file is removed and an existing file at path is left as it
 * was (KILN_ERR_IO names the cause: a full disk, a read-only directory; if
 * only the directory sync fails, path is the new file and the error says
 * it may not survive a crash). A process killed mid-save leaves the old
 * file intact and may leave its path.tmp.XXXXXX beside it, never read as
 * path. Tensors on a device are copied back first. */
kiln_status kiln_safetensors_save(const char *path, kiln_tensor *const *tensors, const char *const *names, int n,
                                  const char *const *meta, int n_meta);

/* A small JSON reader for configuration files (config.json): the file is
 * read whole and parsed strictly (RFC 8259, bounded depth and size); a
 * value is looked up by key in the top-level object (obj NULL) or in the
 * object that is the top-level member obj. Numbers are doubles; true and
 * false read as 1 and 0.
 *
 *     kiln_json_file *j = kiln_json_file_open("config.json");
 *     double layers;
 *     if (kiln_json_file_number(j, NULL, "num_hidden_layers", &layers)) ...
 *     const char *file = kiln_json_file_string(j, "weight_map", "lm_head.weight");
 *     kiln_json_file_close(j);
 */
typedef struct kiln_json_file kiln_json_file;
kiln_json_file *kiln_json_file_open(const char *path);
void kiln_json_file_close(kiln_json_file *j);
/* Present and not null. */
bool kiln_json_file_has(const kiln_json_file *j, const char *obj, const char *key);
/* KILN_ERR_FORMAT when missing or not a number/bool. */
kiln_status kiln_json_file_number(const kiln_json_file *j, const char *obj, const char *key, double *out);
/* NULL when missing or not a string. */
const char *kiln_json_file_string(const kiln_json_file *j, const char *obj, const char *key);

/* GGUF (ggml's model format, as llama.cpp reads it; versions 2 and 3,
 * little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata
 * count, the metadata (string key, u32 value type, value; strings are u64
 * length + bytes, arrays u32 element type + u64 count + elements), the
 * tensor infos (name, u32 dims, u64 ne[dims] innermost first, u32 ggml
 * type, u64 offset into the data) and, at the next multiple of
 * general.alignment (u32, default 32), the data. Opening maps the file and
 * checks every count, size and offset against the file before anything is
 * allocated from it: a bad file is KILN_ERR_FORMAT naming what is wrong.
 * kiln shapes are ggml's ne reversed: ne [dim, vocab] is kiln [vocab, dim].
 *
 *     kiln_gguf *g = kiln_gguf_open("model.gguf");
 *     int64_t layers;
 *     kiln_gguf_get_int(g, "llama.block_count", &layers);
 *     kiln_tensor *w = kiln_gguf_load(g, ctx, "blk.0.attn_q.weight");
 *     kiln_gguf_close(g);
 *
 *     kiln_gguf_writer *w = kiln_gguf_writer_new();
 *     kiln_gguf_set_string(w, "general.architecture", "llama");
 *     kiln_gguf_add_tensor(w, "token_embd.weight", emb);
 *     kiln_gguf_writer_save(w, "model.gguf");   // atomic, as safetensors
 *     kiln_gguf_writer_free(w);
 */
typedef enum kiln_gguf_type {
    KILN_GGUF_UINT8 = 0, KILN_GGUF_INT8, KILN_GGUF_UINT16, KILN_GGUF_INT16, KILN_GGUF_UINT32, KILN_GGUF_INT32,
    KILN_GGUF_FLOAT32, KILN_GGUF_BOOL, KILN_GGUF_STRING, KILN_GGUF_ARRAY, KILN_GGUF_UINT64, KILN_GGUF_INT64,
    KILN_GGUF_FLOAT64, KILN_GGUF_TYPE_COUNT
} kiln_gguf_type;

/* ggml tensor types kiln names (the file may hold any of ggml's). */
enum { KILN_GGML_F32 = 0, KILN_GGML_F16 = 1, KILN_GGML_Q4_0 = 2, KILN_GGML_Q8_0 = 8, KILN_GGML_BF16 = 30 };

typedef struct kiln_gguf kiln_gguf;

typedef struct kiln_gguf_tensor_info {
    const char *name;
    int ndim;              /* 1..4 */
    int64_t ne[4];         /* ggml order, innermost first; 1 past ndim */
    int64_t shape[4];      /* kiln order: ne reversed */
    uint32_t ggml_type;
    const char *type_name; /* "F32", "Q4_0", ... */
    int kiln_dtype;        /* kiln's dtype for it, -1 if none (kiln_gguf_dtype) */
    uint64_t offset;       /* into the data section */
    size_t nbytes;
    const void *data;      /* in the mapped file, valid until close */
} kiln_gguf_tensor_info;

kiln_gguf *kiln_gguf_open(const char *path);
void kiln_gguf_close(kiln_gguf *g);
uint32_t kiln_gguf_version(const kiln_gguf *g);
uint32_t kiln_gguf_alignment(const kiln_gguf *g);
/* ggml type -> kiln dtype, -1 where kiln has none. */
int kiln_gguf_dtype(uint32_t ggml_type);
const char *kiln_gguf_type_name(uint32_t ggml_type); /* NULL if unknown */

/* Metadata: keys are indexed 0..count-1 in file order. */
int kiln_gguf_kv_count(const kiln_gguf *g);
const char *kiln_gguf_kv_key(const kiln_gguf *g, int i);
int kiln_gguf_find_key(const kiln_gguf *g, const char *key); /* index or -1 */
kiln_gguf_type kiln_gguf_kv_type(const kiln_gguf *g, int i);
/* The value of key: any integer type or bool (get_int), any number
 * (get_float), a string (get_string: NUL-terminated, *len its bytes when
 * len is not NULL; NULL if absent or not a string). A missing key or another
 * type is KILN_ERR_FORMAT. */
kiln_status kiln_gguf_get_int(const kiln_gguf *g, const char *key, int64_t *out);
kiln_status kiln_gguf_get_float(const kiln_gguf *g, const char *key, double *out);
const char *kiln_gguf_get_string(const kiln_gguf *g, const char *key, size_t *len);
/* An array's element type and length (KILN_ERR_FORMAT if not an array),
 * then its elements by index, converted as above. Arrays of arrays are
 * read and checked but their elements are not reachable. */
kiln_status kiln_gguf_get_array(const kiln_gguf *g, const char *key, kiln_gguf_type *elem, uint64_t *n);
kiln_status kiln_gguf_array_int(const kiln_gguf *g, const char *key, uint64_t i, int64_t *out);
kiln_status kiln_gguf_array_float(const kiln_gguf *g, const char *key, uint64_t i, double *out);
const char *kiln_gguf_array_string(const kiln_gguf *g, const char *key, uint64_t i, size_t *len);

/* Tensors, in file order. */
int kiln_gguf_tensor_count(const kiln_gguf *g);
int kiln_gguf_find_tensor(const kiln_gguf *g, const char *name); /* index or -1 */
kiln_status kiln_gguf_tensor_info_at(const kiln_gguf *g, int i, kiln_gguf_tensor_info *out);
/* The tensor called name as a new leaf of ctx, in its own dtype
 * (KILN_ERR_DTYPE where kiln has none). */
kiln_tensor *kiln_gguf_load(kiln_gguf *g, kiln_ctx *ctx, const char *name);
/* Into an existing contiguous leaf of the same shape: the same dtype is
 * copied; F32/F16/BF16/Q8_0/Q4_0 into a plain float dtype are converted
 * (quantized blocks dequantized). */
kiln_status kiln_gguf_read_into(kiln_gguf *g, const char *name, kiln_tensor *dst);

/* The writer: metadata in the order set (a key set twice is an error),
 * tensors in the order added, each at a multiple of the alignment
 * (general.alignment when set as a u32 power of two, else 32). Tensors and
 * raw data are read at save: keep them alive until then. Writes version 3. */
typedef struct kiln_gguf_writer kiln_gguf_writer;
kiln_gguf_writer *kiln_gguf_writer_new(void);
void kiln_gguf_writer_free(kiln_gguf_writer *w);
/* type: one of the integer types or BOOL / one of the float types. */
kiln_status kiln_gguf_set_int(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, int64_t v);
kiln_status kiln_gguf_set_float(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, double v);
kiln_status kiln_gguf_set_string(kiln_gguf_writer *w, const char *key, const char *v);
/* n elements of elem type: a packed little-endian array of that type, or
 * for KILN_GGUF_STRING a const char *const * of NUL-terminated strings. */
kiln_status kiln_gguf_set_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem, const void *elems,
                                uint64_t n);
/* A kiln tensor (F32, F16, BF16, Q8_0 or Q4_0; leaves or computed outputs). */
kiln_status kiln_gguf_add_tensor(kiln_gguf_writer *w, const char *name, kiln_tensor *t);
/* Raw bytes of any ggml type with kiln shape [ndim] (1..4): nbytes must be
 * what that type and shape take (for quantized blocks made elsewhere). */
kiln_status kiln_gguf_add_raw(kiln_gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                              const int64_t *shape, const void *data, size_t nbytes);
kiln_status kiln_gguf_writer_save(kiln_gguf_writer *w, const char *path);

/* ---- tokenizers ----------------------------------------------------- */
/* Byte-level BPE as GPT-2 and Llama 3 use it, from a Hugging Face
 * tokenizer.json (model "BPE": vocab, merges, added_tokens) or from GGUF's
 * tokenizer.ggml.* metadata (model "gpt2": tokens, merges, token_type,
 * bos/eos ids). Encoding splits the text as the pre-tokenizer's regex does
 * (GPT-2's, Llama 3's or Qwen 2's, written out by hand), maps each byte to
 * GPT-2's printable stand-in character and applies the merges by rank;
 * decoding maps back to bytes, so decode(encode(s)) == s for any bytes,
 * invalid UTF-8 included. Letters and numbers outside ASCII/Latin-1 are
 * classified by a table of common ranges (see tokenizer_split.c).
 * GGUF's "llama" model (SentencePiece BPE with scores, Llama 1/2) works
 * as llama.cpp's: '\u2581' for spaces, one in front of the text and after
 * each special token (add_space_prefix), merges by highest score, <0xXX>
 * byte fallback; decode drops the spaces encode put in, so the round trip
 * holds too, except that a U+2581 in the text comes back as a space.
 * tokenizer.json's SentencePiece form (Llama 2 on Hugging Face: BPE with
 * byte_fallback, Prepend/Replace normalizer or Metaspace pre-tokenizer) is
 * read too, its merges applied by rank over characters.
 * Not supported (an error that says so): other pre-tokenizer regexes and
 * normalizers, Metaspace with split, WordPiece/Unigram models.
 * No BOS is added: put kiln_tokenizer_bos() in front yourself when the
 * model wants one.
 *
 *     kiln_tokenizer *tok = kiln_tokenizer_from_json("tokenizer.json");
 *     int32_t ids[256];
 *     int64_t n;
 *     kiln_tokenizer_encode(tok, "Hello world", 11, false, ids, 256, &n);
 *     char text[1024];
 *     size_t len;
 *     kiln_tokenizer_decode(tok, ids, n, text, sizeof text, &len);
 *     kiln_tokenizer_free(tok);
 */
typedef struct kiln_tokenizer kiln_tokenizer;
kiln_tokenizer *kiln_tokenizer_from_json(const char *path);
kiln_tokenizer *kiln_tokenizer_from_gguf(const kiln_gguf *g);
void kiln_tokenizer_free(kiln_tokenizer *t);
int64_t kiln_tokenizer_vocab_size(const kiln_tokenizer *t); /* largest id + 1 */
/* -1 when the file does not say (tokenizer.json never does: set them). */
int32_t kiln_tokenizer_bos(const kiln_tokenizer *t);
int32_t kiln_tokenizer_eos(const kiln_tokenizer *t);
void kiln_tokenizer_set_bos_eos(kiln_tokenizer *t, int32_t bos, int32_t eos);
/* The token's text as the vocabulary writes it (NULL for an unused id). */
const char *kiln_tokenizer_token(const kiln_tokenizer *t, int32_t id);
int32_t kiln_tokenizer_find(const kiln_tokenizer *t, const char *token); /* id or -1 */
/* len bytes of text to ids. special: added/control tokens written in the
 * text ("<|endoftext|>") become their ids; otherwise they are plain text.
 * *n is the number of ids; at most cap are written and more than cap is
 * KILN_ERR_ARG (len + 1 ids always suffice). */
kiln_status kiln_tokenizer_encode(const kiln_tokenizer *t, const char *text, size_t len, bool special, int32_t *ids,
                                  int64_t cap, int64_t *n);
/* ids to bytes (not NUL-terminated); *len as for encode, KILN_ERR_ARG when
 * it exceeds cap. An id out of range is KILN_ERR_ARG. */
kiln_status kiln_tokenizer_decode(const kiln_tokenizer *t, const int32_t *ids, int64_t n, char *out, size_t cap,
                                  size_t *len);
/* Put the tokenizer in w as GGUF's tokenizer.ggml.* keys ("gpt2" or "llama"). */
kiln_status kiln_tokenizer_to_gguf(const kiln_tokenizer *t, kiln_gguf_writer *w);

/* Every parameter of ctx (kiln_param order) under its name, with the same
 * atomic write. Loading needs exactly ctx's parameters in the file (a name
 * missing or extra, a dtype or shape that differs is an error naming it)
 * and checks all before writing any: a failed load changes nothing. */
kiln_status kiln_save_params(kiln_ctx *ctx, const char *path);
kiln_status kiln_load_params(kiln_ctx *ctx, const char *path);

/* An optimizer's state: every state tensor as "state.<parameter index>.
 * <name>" ("state.0.exp_avg", ...) and in the metadata the optimizer's
 * kind, its parameters' names, the step count, base lr, skipped steps,
 * last gradient norm, schedule and clipping norm, so that a run stopped
 * after a save and resumed after a load steps bit for bit as if it had
 * never stopped. Load into an optimizer made the same way (same kind,
 * config and parameters, in order; parameter groups set again by the
 * caller): the kind, the parameter names and every state tensor's dtype
 * and shape are checked first, and a failed load changes nothing.
 * kiln_checkpoint_save/load put the parameters of opt's context (by name,
 * as kiln_save_params) and opt's state in one file. Saves are atomic as
 * kiln_safetensors_save: a run killed while saving resumes from the last
 * complete checkpoint. */
kiln_status kiln_optim_save(const kiln_optim *opt, const char *path);
kiln_status kiln_optim_load(kiln_optim *opt, const char *path);
kiln_status kiln_checkpoint_save(const kiln_optim *opt, const char *path);
kiln_status kiln_checkpoint_load(kiln_optim *opt, const char *path);

/* ---- quantization: GPTQ and RTN -------------------------------------- */
/* Weight-only integer quantization of one linear layer W [rows = out,
 * cols = in] (f32, row-major, as torch.nn.Linear) in the GPTQ layout:
 * b-bit codes q in [0, 2^b - 1] (b = 2, 3, 4 or 8), and per (row, group)
 * a scale and an integer zero point; a group is group_size consecutive
 * input columns (0, or >= cols: one group per row, "per channel"). The
 * parameters of a group are those of GPTQ's reference Quantizer
 * (IST-DASLab/gptq quant.py), maxq = 2^b - 1:
 *   xmin = min(min x, 0), xmax = max(max x, 0)
 *   symmetric: xmax = max(|xmin|, xmax); xmin = -xmax when xmin < 0
 *   xmin = xmax = 0: xmin = -1, xmax = +1
 *   scale = (xmax - xmin) / maxq
 *   zero  = (maxq + 1) / 2 symmetric, round(-xmin / scale) asymmetric
 *   q = clamp(round(x / scale) + zero, 0, maxq);  w^ = scale (q - zero)
 * round() is to nearest, ties to even (torch.round). As the reference, a
 * symmetric group with no negative value keeps xmin = 0 yet zero = 2^(b-1),
 * so its upper half saturates at (2^(b-1) - 1) scale.
 *
 * RTN rounds W to nearest in this format, each group's parameters fitted on
 * the original weights. GPTQ (Frantar et al. 2022, the reference's
 * fasterquant) quantizes column after column and spreads each column's
 * rounding error over the columns not yet quantized, weighted by the
 * inverse Hessian of the layer's calibration inputs, H = 2 X^T X / n:
 *   - kiln_gptq_add_batch accumulates H over batches X [n, cols] (the rows
 *     of all batches are the samples: H *= N / (N + n); H += 2/(N + n) X^T X)
 *   - dead columns (H_ii = 0) get H_ii = 1 and W[:, i] = 0
 *   - act_order: columns in order of descending H_ii (their groups then
 *     follow that order: g_idx maps each column to its group, perm holds it)
 *   - damping: percdamp * mean(diag H) added to the diagonal; then the
 *     upper Cholesky factor U of H^-1 (LAPACK dpotrf, dpotri, dpotrf, in
 *     double: with 1% damping H's condition number can reach 100 cols,
 *     which f32 (eps 6e-8) would turn into percent-level errors in U)
 *   - lazy blocks of block_size columns: inside a block each column's error
 *     (w - q) / U_ii updates the block's later columns at once; at the end
 *     of a block all its errors update the later columns in one product
 *   - a group's parameters are fitted when its first column comes, on the
 *     weights as updated by every earlier column (the reference's default,
 *     static_groups off; where a group starts inside a lazy block and
 *     reaches past it, the reference fits its later columns without that
 *     block's updates so far: kiln adds them, as the unblocked algorithm
 *     would. With group sizes dividing block_size the two agree.)
 *   - error: the reference's sum of (w - q)^2 / U_ii^2 / 2; it scales with H
 *     (the codes do not), and H here averages over rows of x where the
 *     reference averages over its batch dimension
 * GPTQ needs LAPACK: in a build with BLAS=0 kiln_gptq_quantize fails with
 * KILN_ERR_UNSUPPORTED (RTN, the Hessian and dequantize work everywhere).
 *
 *     kiln_gptq *h = kiln_gptq_new(cols);
 *     for (each calibration batch) kiln_gptq_add_batch(h, x, n);  // x [n, cols]
 *     kiln_gptq_config c = kiln_gptq_defaults();   // 4 bits, group 128
 *     kiln_gptq_result *r = kiln_gptq_quantize(h, w, rows, &c);
 *     kiln_gptq_dequantize(r, w_hat);              // f32 [rows, cols]
 *     kiln_gptq_result_free(r);
 *     kiln_gptq_free(h);
 */
typedef struct kiln_gptq_config {
    int bits;          /* 2, 3, 4 or 8 */
    int64_t group_size; /* columns per group; 0 (or >= cols): one per row */
    bool sym;          /* symmetric (zero fixed at 2^(bits-1)) */
    bool act_order;    /* GPTQ: columns by descending diag H */
    float percdamp;    /* GPTQ: damping, fraction of mean(diag H); >= 0 */
    int block_size;    /* GPTQ: lazy block columns, >= 1 */
} kiln_gptq_config;

/* 4 bits, group 128, asymmetric, no act order, percdamp 0.01, block 128 */
kiln_gptq_config kiln_gptq_defaults(void);

/* A quantized layer, malloc'd; free with kiln_gptq_result_free. */
typedef struct kiln_gptq_result {
    int64_t rows, cols, group_size, n_groups; /* group_size as used (cols when per row) */
    int bits;
    bool sym;
    uint8_t *codes;  /* [rows, cols], one code per byte, original column order */
    float *scales;   /* [rows, n_groups] */
    uint8_t *zeros;  /* [rows, n_groups] */
    int32_t *g_idx;  /* [cols]: the group of each column */
    int32_t *perm;   /* [cols]: column quantized k-th (identity without act order) */
    /* GPTQ: the reference's "error", sum (w - q)^2 / U_ii^2 / 2 over the
     * updated weights; RTN: sum (w - w^)^2 */
    double error;
} kiln_gptq_result;

void kiln_gptq_result_free(kiln_gptq_result *r);
/* w^ [rows, cols] = scale (q - zero) of each weight's group */
kiln_status kiln_gptq_dequantize(const kiln_gptq_result *r, float *out);
/* Round to nearest; act_order, percdamp and block_size are ignored. */
kiln_gptq_result *kiln_rtn_quantize(const float *w, int64_t rows, int64_t cols, const kiln_gptq_config *cfg);
/* r as a [rows, cols] leaf of a GQ dtype of r's bits (kiln_gptq_pack(ctx,
 * r, KILN_GQ4_128, &perm)) whose group divides r's group size and cols:
 * a per-channel result, or one of group 128 stored in GQ4_32, repeats its
 * scale and zero in every block. The scales are rounded to f16 (they must
 * be finite, > 0 and below 65520), codes and zeros kept (both <= 2^bits -
 * 1). With act order the columns are stored in r's quantization order, so
 * that each group is contiguous: *perm is then set to a new i32 [cols]
 * leaf (r->perm) and the layer computes y = x[:, perm] . W^T, x[:, perm]
 * being kiln_transpose(ctx, kiln_get_rows(ctx, kiln_transpose(ctx, x, 0,
 * 1), perm), 0, 1) for x [m, cols] (differentiable in x); without act
 * order *perm is NULL, and perm may be NULL. */
kiln_tensor *kiln_gptq_pack(kiln_ctx *ctx, const kiln_gptq_result *r, kiln_dtype dtype, kiln_tensor **perm);

/* The Hessian of one layer's inputs, [cols, cols] f32. */
typedef struct kiln_gptq kiln_gptq;
kiln_gptq *kiln_gptq_new(int64_t cols);
void kiln_gptq_free(kiln_gptq *h);
/* x [n, cols] f32: n more samples (finite; a NaN is KILN_ERR_NUMERIC). */
kiln_status kiln_gptq_add_batch(kiln_gptq *h, const float *x, int64_t n);
int64_t kiln_gptq_samples(const kiln_gptq *h);
/* Quantize w [rows, cols] (not modified) with h's inputs; h is kept, so a
 * layer can be quantized again in another format. */
kiln_gptq_result *kiln_gptq_quantize(const kiln_gptq *h, const float *w, int64_t rows, const kiln_gptq_config *cfg);

#ifdef __cplusplus
}
#endif
#endif /* KILN_H */
