/* kiln_core.h — errors, dtypes, the context, backends and tensors: what
 * every other part of kiln's API is built on. Include kiln.h, which
 * includes this and the other parts (kiln_ops.h, kiln_optim.h,
 * kiln_files.h, kiln_tokenizer.h, kiln_gptq.h).
 *
 * A context (kiln_ctx) owns every tensor made in it; a tensor is a leaf
 * with storage of its own (kiln_tensor_new, kiln_param) or a node an op
 * made. Calls that can fail return a kiln_status or NULL and leave a
 * message naming the call in kiln_last_error().
 *
 * Usage — a tensor filled and read back:
 *
 *     kiln_ctx *ctx = kiln_ctx_new();
 *     kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 2, 3);
 *     float in[6] = {1, 2, 3, 4, 5, 6}, out[6];
 *     if (kiln_tensor_set_f32(x, in, 6) || kiln_tensor_get_f32(x, out, 6))
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *     kiln_ctx_free(ctx);
 */
#ifndef KILN_CORE_H
#define KILN_CORE_H

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
 * int8 GEMM on AVX512-VNNI (x quantized the same way), ggml's other block
 * types an integer GEMM equal to their batch-1 products on x86 from AVX2
 * (IQ4_NL from AVX-VNNI), and the other types (or another CPU)
 * dequantize W a panel at a time into a cache-sized buffer for the f32
 * GEMM. The Vulkan backend has kernels for every
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
 * follow the rules above with the group as the block.
 *
 * ggml's other block types are kiln dtypes byte for byte (GGUF files load
 * and save them as they are), named as llama.cpp prints them; their
 * values are ggml's and gguf-py's dequantization bit for bit, and
 * kiln_quantize follows ggml's reference quantizers (llama-quantize's
 * choice without an importance matrix):
 *
 *   dtype      block  bytes  bits/weight  layout of one block
 *   Q4_1          32     20     5.0       f16 d, m; u8 qs[16]            x = d*q + m
 *   Q5_0          32     22     5.5       f16 d; u32 qh; u8 qs[16]       x = d*(q-16)
 *   Q5_1          32     24     6.0       f16 d, m; u32 qh; u8 qs[16]    x = d*q + m
 *   Q8_1          32     36     9.0       f16 d, s; int8 q[32]           x = d*q, s = d*sum(q)
 *   Q2_K         256     84     2.625     16 x 16: u4 sc, m; 2-bit q     x = d*sc*q - dmin*m
 *   Q3_K         256    110     3.4375    16 x 16: 6-bit sc; 3-bit q     x = d*(sc-32)*(q-4)
 *   Q4_K         256    144     4.5       8 x 32: 6-bit sc, m; 4-bit q   x = d*sc*q - dmin*m
 *   Q5_K         256    176     5.5       8 x 32: 6-bit sc, m; 5-bit q   x = d*sc*q - dmin*m
 *   Q6_K         256    210     6.5625    16 x 16: int8 sc; 6-bit q      x = d*sc*(q-32)
 *   Q8_K         256    292     9.125     f32 d; int8 q[256]; i16 sums   x = d*q
 *   IQ4_NL        32     18     4.5       f16 d; u8 qs[16]               x = d*V[q]
 *   IQ4_XS       256    136     4.25      8 x 32: 6-bit ls; 4-bit q      x = d*(ls-32)*V[q]
 *
 * (V: ggml's 16 non-linear values, -127 .. 113.)
 *
 * (4-bit codes as Q4_0's, the fifth bit of element j in bit j of qh; the
 * K types are super-blocks of sub-blocks with f16 d and dmin, in ggml's
 * bit layouts.) Q8_1 and Q8_K are activation types: the CPU's batch-1
 * products quantize x to kiln_dtype_dot_type(W) (ggml's vec_dot_type) and
 * take integer dot products, as llama.cpp does. The 256-blocks need the
 * last dimension a multiple of 256. */
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
    /* ggml's other block types (GGUF), named as llama.cpp prints them */
    KILN_Q4_1,
    KILN_Q5_0,
    KILN_Q5_1,
    KILN_Q8_1, /* the activations of Q4_1 / Q5_1 products */
    KILN_Q2_K,
    KILN_Q3_K,
    KILN_Q4_K,
    KILN_Q5_K,
    KILN_Q6_K,
    KILN_Q8_K, /* the activations of the K types' products */
    KILN_IQ4_NL,
    KILN_IQ4_XS,
    KILN_DTYPE_COUNT
} kiln_dtype;

const char *kiln_dtype_name(kiln_dtype t);
/* Bytes per block: per element for the plain dtypes (block 1). */
size_t kiln_dtype_size(kiln_dtype t);
/* Elements per block: 1 for the plain dtypes. */
int64_t kiln_dtype_block(kiln_dtype t);
bool kiln_dtype_is_quantized(kiln_dtype t);
/* The dtype kiln_linear quantizes the activations to for its batch-1
 * integer products with a weight of dtype t on the CPU (ggml's
 * vec_dot_type: Q8_0, Q8_1 or Q8_K), KILN_F32 where they stay f32. */
kiln_dtype kiln_dtype_dot_type(kiln_dtype t);

/* ---- context ----------------------------------------------------------- */

typedef struct kiln_ctx kiln_ctx;
typedef struct kiln_tensor kiln_tensor;
typedef struct kiln_graph kiln_graph;

/* A context owns the metadata of every tensor and graph made in it and the
 * storage of its leaf tensors (inputs, parameters, gradients, state).
 * Returns NULL when out of memory, or when $KILN_SIMD names no level (see
 * kiln_cpu_describe); kiln_last_error() says which. */
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
 * buffers would be newer than the mark); a context that got parameters,
 * buffers (kiln_buffer) or device memory since the mark is refused
 * (KILN_ERR_STATE, nothing freed).
 *
 *     kiln_ctx_mark mark = kiln_ctx_get_mark(ctx);
 *     ... build a graph, compute it, read its outputs ...
 *     kiln_ctx_rewind(ctx, mark);
 */
typedef struct kiln_ctx_mark { /* private */
    void *chunk;
    size_t used, storage;
    uint64_t owned;
    int tensors, params, buffers, devbufs;
} kiln_ctx_mark;
kiln_ctx_mark kiln_ctx_get_mark(const kiln_ctx *ctx);
kiln_status kiln_ctx_rewind(kiln_ctx *ctx, kiln_ctx_mark mark);

/* Parameters made by kiln_param() in this context, in creation order.
 * Fills up to max entries of out (out may be NULL) and returns the count. */
int kiln_ctx_params(kiln_ctx *ctx, kiln_tensor **out, int max);
/* The same for the buffers made by kiln_buffer(). */
int kiln_ctx_buffers(kiln_ctx *ctx, kiln_tensor **out, int max);

/* Zero the gradient of every parameter in the context. */
void kiln_zero_grad(kiln_ctx *ctx);

/* Threads for kernels, 1 to 1024; 0: the default, $KILN_THREADS, else the
 * machine's cores (SMT siblings counted once, only the CPUs this process
 * may run on). Another count is KILN_ERR_ARG and changes nothing. The
 * threads are kiln's own pool (no OpenMP): idle ones sleep, and a loop
 * waits only for chunks a thread has started, never for a thread that has
 * not come. */
kiln_status kiln_set_threads(int n);
int kiln_get_threads(void);
/* The SIMD level and extensions the CPU kernels use, e.g.
 * "avx512 avx512_vnni avx512_bf16 amx_bf16 amx_int8". $KILN_SIMD caps
 * them at a level: on x86-64 scalar, avx2, avxvnni, avx512 (AVX-512
 * without VNNI), avx512vnni, vbmi (and VBMI, GFNI), avx512bf16 (and BF16,
 * as Zen 4: no AVX-VNNI, no AMX) or amx (all); on ARM64 scalar, neon or neondot. Unset or empty:
 * the best the CPU has; any other value makes kiln_ctx_new fail. */
const char *kiln_cpu_describe(void);

/* How f32 matmuls (forward and backward) compute, like PyTorch's
 * torch.set_float32_matmul_precision(): KILN_MATMUL_BF16 rounds both
 * operands to bf16 and accumulates in f32 (AMX tiles or AVX512-BF16 where
 * the CPU has them). Tensors, gradients and optimizer state stay f32, so
 * this is bf16 mixed-precision training with f32 master weights.
 * KILN_MATMUL_TF32 lets a device with TF32 units use them (CUDA: cuBLAS
 * on TF32 tensor cores, about 10 bits of mantissa, as torch's "high");
 * the CPU and Vulkan have none and compute exact f32. On CUDA both modes
 * also put attention's products on tensor cores (f32, head sizes
 * multiples of 16 up to 128). */
typedef enum kiln_matmul_precision { KILN_MATMUL_F32 = 0, KILN_MATMUL_BF16, KILN_MATMUL_TF32 } kiln_matmul_precision;
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
    /* On a device: computes that recorded the graph's kernels (a CUDA
     * graph, a Vulkan command buffer; the second compute under an
     * unchanged key of shapes, parameters and device buffers), and later
     * ones that ran that recording as one launch; $KILN_GRAPH_REPLAY=0: none */
    int64_t recordings, replays;
} kiln_graph_stats;
kiln_graph_stats kiln_graph_get_stats(const kiln_graph *g);

/* ---- tensors ----------------------------------------------------------- */

/* A leaf tensor with its own zero-filled storage. 1 to KILN_MAX_DIMS dims,
 * each >= 0, at most 2^40 elements. A dim of 0 makes an empty tensor, as
 * in torch: every op, gradient and file (safetensors, GGUF, checkpoints)
 * takes one; reading or writing it moves no values (a NULL buffer with
 * n = 0 will do), and kiln_tensor_item of it is an error. */
kiln_tensor *kiln_tensor_new(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape);
kiln_tensor *kiln_new_1d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0);
kiln_tensor *kiln_new_2d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1);
kiln_tensor *kiln_new_3d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2);
kiln_tensor *kiln_new_4d(kiln_ctx *ctx, kiln_dtype dtype, int64_t d0, int64_t d1, int64_t d2, int64_t d3);
/* A 0-d-like scalar (shape [1]) holding v. */
kiln_tensor *kiln_scalar(kiln_ctx *ctx, kiln_dtype dtype, double v);

/* A trainable parameter: a named leaf that requires grad and owns a
 * zero-filled gradient tensor of the same shape (kiln_tensor_grad). Files
 * find it by name, so a NULL or empty name, one over 47 bytes, or one
 * that another parameter of ctx has is KILN_ERR_ARG. */
kiln_tensor *kiln_param(kiln_ctx *ctx, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape);
/* A buffer: a named, zero-filled leaf that is a model's state but not
 * trained (torch's register_buffer, e.g. batch norm's running statistics):
 * it requires no grad and optimizers never see it, but kiln_save_params,
 * kiln_load_params and the checkpoints hold it beside the parameters, by
 * name. Names follow kiln_param's rules and share its namespace. */
kiln_tensor *kiln_buffer(kiln_ctx *ctx, const char *name, kiln_dtype dtype, int ndim, const int64_t *shape);

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

/* Host pointer to the first element. A graph node has values to read only
 * when it was passed to kiln_graph_add (or is a view of such an output)
 * and a compute has run: an intermediate's bytes belong to its graph,
 * which reuses them for later nodes. Otherwise NULL, and the accessors
 * below fail with KILN_ERR_STATE saying which. On a device
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
/* The first element as a double (NaN with kiln_last_error() set if
 * unavailable, as the accessors above, or if the tensor is empty). */
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

#ifdef __cplusplus
}
#endif
#endif /* KILN_CORE_H */
