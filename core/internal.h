/* internal.h — what core/, ops/ and backends/ share; not installed.
 *
 * A kiln_tensor is both a value and a graph node: `op` and `src` say how it
 * is computed (KILN_OP_NONE for a leaf that owns storage). Op constructors
 * (ops/) check shapes and record nodes through kiln__node_new(); the op
 * table (kiln__op_table) holds each op's name, kind and backward rule; each
 * backend holds its own kernel table indexed by the same kiln_op enum.
 */
#ifndef KILN_INTERNAL_H
#define KILN_INTERNAL_H

#include "kiln.h"
#include "alloc.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#define KILN_MAX_SRC 8
#define KILN_MAX_IP 16
#define KILN_MAX_FP 4
#define KILN_ALIGN 64

/* Every op. Views share their source's storage; INPLACE ops write into
 * src[0]'s storage; the rest get a fresh contiguous output. */
typedef enum kiln_op {
    KILN_OP_NONE = 0, /* leaf */
    /* views (no kernel) */
    KILN_OP_VIEW,    /* reshape/view of a contiguous source; ip: none */
    KILN_OP_PERMUTE, /* ip[0..ndim-1]: axes */
    KILN_OP_SLICE,   /* ip[0]=axis ip[1]=start ip[2]=step */
    KILN_OP_EXPAND,  /* broadcast_to: stride 0 on stretched dims */
    KILN_OP_DETACH,  /* same view, no gradient */
    /* copies */
    KILN_OP_CONTIGUOUS,
    KILN_OP_CAST,
    /* unary element-wise; fp[0] = scalar parameter where one exists */
    KILN_OP_NEG,
    KILN_OP_SCALE,
    KILN_OP_ADD_SCALAR,
    KILN_OP_EXP,
    KILN_OP_LOG,
    KILN_OP_SQRT,
    KILN_OP_RSQRT,
    KILN_OP_ABS,
    KILN_OP_SIGN,
    KILN_OP_POW,
    KILN_OP_TANH,
    KILN_OP_SIGMOID,
    KILN_OP_RELU,
    KILN_OP_LEAKY_RELU,
    KILN_OP_GELU,
    KILN_OP_GELU_TANH,
    KILN_OP_SILU,
    KILN_OP_SOFTPLUS,
    KILN_OP_GELU_GRAD,      /* d gelu/dx at x (used by gelu's backward) */
    KILN_OP_GELU_TANH_GRAD, /* d gelu_tanh/dx at x */
    /* binary element-wise with broadcasting */
    KILN_OP_ADD,
    KILN_OP_SUB,
    KILN_OP_MUL,
    KILN_OP_DIV,
    KILN_OP_CMP,   /* ip[0] = kiln_cmp_op */
    KILN_OP_WHERE, /* src: cond, a, b */
    /* reductions over one axis: ip[0]=axis ip[1]=keepdim */
    KILN_OP_SUM,
    KILN_OP_MAX,
    KILN_OP_MIN,
    KILN_OP_ARGMAX,
    /* matmul: ip[0]=trans_a ip[1]=trans_b */
    KILN_OP_MATMUL,
    /* movement with copies */
    KILN_OP_CONCAT,        /* ip[0]=axis; src: the parts */
    KILN_OP_PAD,           /* ip[2i], ip[2i+1]: before/after for axis i; fp[0]=value */
    KILN_OP_SLICE_SCATTER, /* backward of slice: zeros of the source shape with src[0] placed at ip[0]=axis ip[1]=start ip[2]=step */
    KILN_OP_SLICE_ASSIGN,  /* in place: src[1] written into src[0] (a view of a leaf) at ip[0]=axis ip[1]=start; the node is src[0] after */
    /* rows and indices */
    KILN_OP_GET_ROWS,         /* src: table, idx */
    KILN_OP_SCATTER_ADD_ROWS, /* src: rows [N..., D], idx; ip[0] = V rows of the result */
    KILN_OP_ONE_HOT,          /* src: labels; ip[0] = n */
    /* fused layers (each has a CPU kernel; backward rules are written in other ops) */
    KILN_OP_SOFTMAX,     /* ip[0]=causal */
    KILN_OP_LOG_SOFTMAX, /* ip[0]=causal */
    KILN_OP_CROSS_ENTROPY, /* src: logits, labels; ip[0]=ignore_index */
    KILN_OP_LAYER_NORM,  /* src: x [, w [, b]]; ip[0]=has_w ip[1]=has_b; fp[0]=eps */
    KILN_OP_RMS_NORM,    /* src: x [, w]; ip[0]=has_w; fp[0]=eps */
    KILN_OP_ROPE,        /* src: x [, pos]; ip[0]=mode ip[1]=inverse ip[2]=has_pos; fp[0]=theta */
    KILN_OP_ATTENTION,   /* src: q, k, v; ip[0]=causal; fp[0]=scale; out: 1-D [O | L (row logsumexp)], O viewed */
    KILN_OP_ATTENTION_CACHED, /* src: q, k, v, k cache, v cache, seq, pos; ip[0]=window; fp[0]=scale fp[1]=softcap;
                                 writes src 3, 4 in place (ops/nn_attention.c) */
    KILN_OP_IM2COL,      /* see ops/conv.c for the layout and ip[] */
    KILN_OP_COL2IM,
    /* the host's whole convolution (ops/conv_tiled.c); ip[0..9] as IM2COL */
    KILN_OP_CONV2D,        /* src: x [N, C, H, W], w [O, C*kh*kw] -> [O, N, OH, OW] */
    KILN_OP_CONV2D_GRAD_X, /* src: w [O, K], gy [O, N, OH, OW] -> gx [N, C, H, W] */
    KILN_OP_CONV2D_GRAD_W, /* src: x [N, C, H, W], gy [O, N, OH, OW] -> gw [O, C*kh*kw] */
    KILN_OP_DROPOUT,     /* fp[0]=p; ip[0]=seed */
    KILN_OP_BATCH_NORM,  /* training: src x [, running mean, var] [, w] [, b]; ip[0]=has_w ip[1]=has_b
                            ip[2]=has_running ip[3]=x stored [C, N, *]; fp[0]=eps fp[1]=momentum (ops/nn_norm_chan.c) */
    /* fused backward kernels of the layers above (layouts in ops/nn*.c) */
    KILN_OP_SOFTMAX_GRAD,       /* src: y, gy; ip[0]=causal ip[1]=log (y is a log_softmax) */
    KILN_OP_LAYER_NORM_GRAD,    /* src: x [, w], gy; ip[0]=has_w ip[1]=has_b; fp[0]=eps; packed dx|dw|db */
    KILN_OP_RMS_NORM_GRAD,      /* src: x [, w], gy; ip[0]=has_w; fp[0]=eps; packed dx|dw */
    KILN_OP_BATCH_NORM_GRAD,    /* src: x [, w], gy; ip[0]=has_w ip[1]=has_b ip[3] as BATCH_NORM; fp[0]=eps; packed dx|dw|db */
    KILN_OP_CROSS_ENTROPY_GRAD, /* src: logits, labels, gy [1]; ip[0]=ignore_index */
    KILN_OP_ATTENTION_GRAD, /* src: q, k, v, the ATTENTION node, dO; ip, fp as ATTENTION; out: 1-D [dq | dk | dv] */
    /* in place: write into src[0]'s storage */
    KILN_OP_ACC_GRAD, /* src[0] += src[1] */
    KILN_OP_SGD_STEP, /* see optim/sgd.c */
    KILN_OP_ADAM_STEP, /* Adam and AdamW, see optim/adam.c: src p, grad, exp_avg, exp_avg_sq,
                          [max_exp_avg_sq], hyper; ip[0]=amsgrad ip[1]=decoupled ip[2]=t (1 first) */
    KILN_OP_LION_STEP, /* Lion, see optim/lion.c: src p, grad, exp_avg, hyper; no ip/fp */
    /* 8-bit steps */
    /* see optim/opt8bit.c; codes are bytes packed four to an I32 element
       (ceil(n / 4) elements), absmax f32 [ceil(n / 256)] */
    KILN_OP_ADAM8_STEP, /* src p, grad, m codes, m absmax, v codes, v absmax, maps, hyper; ip[1]=decoupled ip[2]=t */
    KILN_OP_LION8_STEP, /* src p, grad, m codes, m absmax, maps, hyper */
    KILN_OP_SGD8_STEP,  /* src p, grad, buf codes, buf absmax, maps, hyper; ip[0]=nesterov ip[2]=steps before */

    /* GaLore */
    KILN_OP_GALORE_STEP, /* GaLore AdamW on a 2-D f32 parameter, see optim/galore.c: src p, grad, projector,
                            exp_avg, exp_avg_sq (low-rank), hyper; ip[0]=t (1 first) ip[1]=refresh; fp[0]=scale */

    /* APOLLO */
    KILN_OP_APOLLO_STEP, /* APOLLO, see optim/apollo.c: src p, grad, exp_avg, exp_avg_sq, prev_norm, hyper;
                            ip[0]=rank ip[1]=update_gap ip[2]=t (1 first) ip[3]=mini ip[4]=seed; fp[0]=scale */
    KILN_OP_GALORE8_STEP, /* 8-bit GaLore, see optim/galore.c: src p, grad, projector, then ip[2]=1: m codes, v codes,
                             absmax [2, blocks], maps, hyper; ip[2]=0: exp_avg, exp_avg_sq, hyper (f32); ip[0]=t
                             ip[1]=refresh; fp[0]=scale */

    /* quantized types (ops/quant.c) */
    KILN_OP_DEQUANTIZE, /* src: a quantized tensor or a view of one; out f32 */
    KILN_OP_QMATMUL,    /* y [m, n] = x [m, k] . W^T: src x f32 contiguous 2-D, W quantized contiguous [n, k] */
    KILN_OP_DFP_MATMUL, /* ops/dfp.c: op(A) op(B) in INT16 dynamic fixed point; f32 contiguous 2-D src;
                           ip[0]=trans_a ip[1]=trans_b; ip[2]=1: B is im2col_cn of src[1] [N, C, H, W],
                           geometry g in ip[3..10], grid OH x OW in ip[11], ip[12] */

    KILN_OP_COUNT
} kiln_op;

typedef enum kiln_op_kind {
    KILN_KIND_KERNEL = 0, /* fresh contiguous output */
    KILN_KIND_VIEW,       /* shares src[0]'s storage, no kernel */
    KILN_KIND_INPLACE     /* writes into src[0]'s storage */
} kiln_op_kind;

/* tensor flags */
enum {
    KILN_FLAG_REQUIRES_GRAD = 1 << 0,
    KILN_FLAG_PARAM = 1 << 1,
    KILN_FLAG_OUTPUT = 1 << 2, /* keeps its own storage across computes */
    KILN_FLAG_GRAD = 1 << 3,   /* is some leaf's gradient */
    KILN_FLAG_COMPUTED = 1 << 4, /* a node with storage of its own that a compute has written */
    /* an owner whose value is zeros its host bytes do not hold yet
     * (kiln__tensor_zero): the first reader writes them, the first
     * product adding into it stores instead (core/graph_exec.c) */
    KILN_FLAG_ZEROS = 1 << 5
};

struct kiln_tensor {
    kiln_dtype dtype;
    int ndim;
    int64_t shape[KILN_MAX_DIMS];
    int64_t stride[KILN_MAX_DIMS]; /* in elements */
    kiln_op op;
    int nsrc;
    kiln_tensor *src[KILN_MAX_SRC];
    int64_t ip[KILN_MAX_IP];
    double fp[KILN_MAX_FP];
    uint32_t flags;
    kiln_tensor *grad;      /* leaves that require grad */
    kiln_tensor *view_src;  /* views/inplace: the tensor that owns the storage */
    size_t view_offs;       /* bytes from view_src's first byte */
    void *data;             /* resolved storage (leaves, outputs: own; nodes: set per compute) */
    size_t storage_bytes;   /* bytes owned when this tensor has storage of its own */
    kiln_ctx *ctx;
    /* device copies (core/backend.h): on a tensor that owns storage, the
     * backend holding a copy, that copy and which copies are current; on
     * every node, like data, where its bytes are on the device this compute */
    kiln_backend *dev_backend;
    struct kiln_devbuf *dev;
    uint8_t where;            /* KILN_AT_HOST | KILN_AT_DEV */
    struct kiln_devbuf *dbuf; /* per compute: device buffer and byte offset */
    size_t doff;
    /* scratch for graph walks and the backward driver */
    uint64_t visit; /* walk generation that last saw this tensor */
    int slot;       /* its index in that walk */
    int id;
    int segment; /* kiln_checkpoint_begin's segment that built it (0: none) */
    char name[48];
};

/* ---- context and arena --------------------------------------------------- */

typedef struct kiln_arena_chunk kiln_arena_chunk;
typedef struct kiln_owned kiln_owned;

struct kiln_ctx {
    kiln_arena_chunk *chunks;
    kiln_owned *owned;        /* storage and arrays freed with the context */
    uint64_t owned_seq;       /* owned blocks made so far (kiln_ctx_rewind) */
    size_t storage_bytes;
    bool grad_enabled;
    int segment_open, n_segments; /* kiln_checkpoint_begin/end */
    int n_tensors;
    uint64_t visit_gen;
    kiln_tensor **params;     /* kiln_param() order */
    int n_params, cap_params;
    kiln_tensor **buffers;    /* kiln_buffer() order: saved with the parameters, never trained */
    int n_buffers, cap_buffers;
    kiln_backend *backend;            /* graphs without one of their own run here (NULL: CPU) */
    struct kiln_devalloc *devbufs;    /* device memory held for this context, freed with it */
    int n_devbufs, cap_devbufs;
};

/* Zeroed, 16-byte aligned metadata memory living as long as ctx. */
void *kiln__arena_alloc(kiln_ctx *ctx, size_t bytes);
/* 64-byte aligned zeroed storage freed with ctx (or earlier by kiln__owned_free). */
void *kiln__owned_alloc(kiln_ctx *ctx, size_t bytes);
/* the same for a tensor's lasting storage: huge pages from 2 MiB (ctx.c) */
void *kiln__owned_alloc_lasting(kiln_ctx *ctx, size_t bytes);
void kiln__owned_free(kiln_ctx *ctx, void *p);
/* Call drop(arg) when ctx is freed (or rewound past this point): what
 * ctx's tensors borrow from (a mapped file) lives as long as they do. */
kiln_status kiln__ctx_hold(kiln_ctx *ctx, void (*drop)(void *), void *arg);
/* Grow an owned array (realloc semantics; *p may be NULL). */
kiln_status kiln__owned_grow(kiln_ctx *ctx, void **p, int *cap, int need, size_t elem);

/* ---- errors -------------------------------------------------------------- */

/* Set the thread's error and return NULL (for constructors). */
void *kiln__err(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Set the thread's error and return s (for status-returning calls). */
kiln_status kiln__errs(kiln_status s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Put "context: " before this thread's message, left by a call that has
 * just failed, so that it names the call the user made and what it was
 * doing ("kiln_load_params: m.safetensors: 'w': ..."); returns the status. */
kiln_status kiln__err_context(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "[2, 3, 4]" into a caller buffer of at least 96 bytes; returns buf. */
char *kiln__shape_str(const kiln_tensor *t, char *buf);
char *kiln__dims_str(int ndim, const int64_t *shape, char *buf);

/* What checkpoints hold: the parameters, then the buffers (i below
 * kiln__n_saved). */
static inline int kiln__n_saved(const kiln_ctx *ctx) { return ctx->n_params + ctx->n_buffers; }
static inline kiln_tensor *kiln__saved_at(const kiln_ctx *ctx, int i) {
    return i < ctx->n_params ? ctx->params[i] : ctx->buffers[i - ctx->n_params];
}

/* ---- dtypes ---------------------------------------------------------------- */

/* A dtype stores blocks of blck consecutive elements in size bytes each
 * (blck 1 for the plain types: size is then the element size). For the
 * quantized types (quant/quant.h) to_f32/from_f32 take n a multiple of
 * blck from a block boundary, get decodes one element (i counts elements
 * from base, which is a block boundary), set is NULL: their values are
 * written only by quantizing whole blocks. row_blck is what the last
 * dimension must be a multiple of (blck but for NF4_DQ, whose super-blocks
 * may span rows). */
typedef void kiln_to_f32_fn(const void *src, float *dst, int64_t n);
typedef void kiln_from_f32_fn(const float *src, void *dst, int64_t n);
typedef struct kiln_type_traits {
    const char *name;
    size_t size;
    bool is_float;
    double (*get)(const void *base, int64_t i);      /* element i as double */
    void (*set)(void *base, int64_t i, double v);    /* rounds to nearest even */
    kiln_to_f32_fn *to_f32;
    kiln_from_f32_fn *from_f32;
    int64_t blck;
    int64_t row_blck;
    /* the activations' dtype in the CPU's batch-1 integer products with
     * a weight of this dtype (ggml's vec_dot_type); KILN_F32: f32 ones */
    kiln_dtype dot_type;
} kiln_type_traits;

/* Every dtype's traits, indexed by kiln_dtype (core/dtype.c). The plain
 * types' are core's own; each quantized format registers its own from its
 * file in quant/ when the library loads (an ELF constructor: before main,
 * so before the first context or file), as the op families fill the op
 * table. A dtype that nothing registered has zero traits (blck 0: not
 * quantized). */
extern const kiln_type_traits *const kiln__types;
/* Register quantized dtype t's traits: a name, size > 0, blck > 1 a
 * multiple of row_blck, get, to_f32 and from_f32 set, set NULL. An error
 * naming what is wrong, and nothing changed, for t out of range, traits
 * short of that, or a dtype registered already (the plain ones too). */
kiln_status kiln__dtype_register(kiln_dtype t, const kiln_type_traits *tr);
/* Faster row coders for dtype t, equal to its own bit for bit (a backend's
 * SIMD variants, which the CPU backend registers when the library loads):
 * t's to_f32 / from_f32 are these (NULL: keeps that one), whether t
 * registers before or after. An error for t out of range. */
kiln_status kiln__dtype_prefer_coders(kiln_dtype t, kiln_to_f32_fn *to_f32, kiln_from_f32_fn *from_f32);
float kiln__f16_to_f32(uint16_t h);
uint16_t kiln__f32_to_f16(float f);
float kiln__bf16_to_f32(uint16_t h);
uint16_t kiln__f32_to_bf16(float f);

static inline bool kiln__is_quant(kiln_dtype t) { return kiln__types[t].blck > 1; }
/* Bytes of n elements starting on a block boundary (n a multiple of the block). */
static inline size_t kiln__elems_bytes(kiln_dtype t, int64_t n) {
    return (size_t)(n / kiln__types[t].blck) * kiln__types[t].size;
}
/* Can a tensor of this shape be of quantized dtype t? (sets the error, naming who) */
bool kiln__quant_shape_ok(const char *who, kiln_dtype t, int ndim, const int64_t *shape);
/* "kiln_X: does not take q4_0; dequantize first" when a source of op is quantized. */
bool kiln__quant_src_ok(kiln_op op, int nsrc, kiln_tensor *const *src);
/* The same for one tensor given to the call who (checked before an op's
 * own dtype check, so that the message says what to do). */
bool kiln__not_quant(const char *who, const kiln_tensor *t);

/* ---- tensors and nodes ----------------------------------------------------- */

static inline bool kiln__is_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64 || t == KILN_F16 || t == KILN_BF16; }
static inline bool kiln__is_compute_float(kiln_dtype t) { return t == KILN_F32 || t == KILN_F64; }

/* An optimizer's step number t (1 on the first step) rides in its hyper
 * leaf after the n_hyper hyperparameters, as two f32 halves t >> 16 and
 * t & 0xffff (each exact in f32; optim/optim.c writes them): a value in
 * device memory, not in the step nodes' ip[], so a recorded step graph
 * replays unchanged from step to step (core/graph_replay.c). */
#define KILN__HYPER_STEP_SLOTS 2
static inline double kiln__hyper_step(const float *hyper, int n_hyper) {
    return (double)hyper[n_hyper] * 65536.0 + (double)hyper[n_hyper + 1];
}
/* The step number of a step node `who`'s hyper leaf into *step, or an
 * error naming who when the leaf is too short or the step is below 1. */
static inline kiln_status kiln__hyper_step_of(const char *who, const kiln_tensor *hyper, int n_hyper, double *step) {
    const int64_t n = kiln_tensor_numel(hyper);
    if (n < n_hyper + KILN__HYPER_STEP_SLOTS)
        return kiln__errs(KILN_ERR_ARG, "%s: hyper leaf of %lld values (want %d)", who, (long long)n,
                          n_hyper + KILN__HYPER_STEP_SLOTS);
    *step = kiln__hyper_step(hyper->data, n_hyper);
    if (!(*step >= 1)) return kiln__errs(KILN_ERR_STATE, "%s: step number %.0f (must be >= 1)", who, *step);
    return KILN_OK;
}
int kiln__axis(int ndim, int axis); /* normalized axis or -1 */
void kiln__set_contiguous_strides(kiln_tensor *t);
bool kiln__same_shape(const kiln_tensor *a, const kiln_tensor *b);
bool kiln__shape_eq(int na, const int64_t *a, int nb, const int64_t *b);
int64_t kiln__numel(int ndim, const int64_t *shape);

/* Checked shape arithmetic. Dims and the numbers that make them (a reshape
 * target, pads, repeat counts, a kernel's stride) come from callers, so
 * sums and products of them are formed only through these: false when the
 * exact result does not fit int64, where plain arithmetic would be
 * undefined behaviour. */
static inline bool kiln__add_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_add_overflow(a, b, r); }
static inline bool kiln__mul_ok(int64_t a, int64_t b, int64_t *r) { return !__builtin_mul_overflow(a, b, r); }
/* Elements a tensor may have (and each dim's largest size), far above any
 * memory, so that every offset and stride of a valid shape fits int64. */
#define KILN_MAX_NUMEL ((int64_t)1 << 40)
/* Is shape a valid tensor shape: 1 to KILN_MAX_DIMS dims, each >= 0 (a
 * dim of 0 makes an empty tensor, as in torch), the product of the
 * nonzero ones at most KILN_MAX_NUMEL (so strides fit too)? Else sets the
 * error, naming who (the call the user made) and the shape. */
bool kiln__shape_check(const char *who, int ndim, const int64_t *shape);
/* Bytes a tensor with storage of its own holds for nbytes of data: an
 * empty one holds a few, so that storage_bytes > 0 always says "owns
 * storage" and its data pointer is a real one. */
static inline size_t kiln__storage_size(size_t nbytes) { return nbytes ? nbytes : 4; }
/* A leaf whose storage is data (nbytes > 0 of them, at least 32-byte
 * aligned), which the caller keeps alive as long as ctx (kiln__ctx_hold):
 * to everything else a leaf with storage of its own. */
kiln_tensor *kiln__tensor_borrowed(kiln_ctx *ctx, kiln_dtype dtype, int ndim, const int64_t *shape, void *data);

/* Record a node: copies srcs, sets ctx, requires-grad (if any src requires
 * grad, the op is differentiable and grad mode is on) and contiguous
 * strides. The caller fills ip/fp (and strides/view fields for views). Any
 * NULL src returns NULL without touching the existing error. */
kiln_tensor *kiln__node_new(kiln_ctx *ctx, kiln_op op, kiln_dtype dtype, int ndim, const int64_t *shape,
                            int nsrc, kiln_tensor *const *src);
/* A view node of x with the given shape/strides and byte offset from x's data. */
kiln_tensor *kiln__view_new(kiln_ctx *ctx, kiln_op op, kiln_tensor *x, int ndim, const int64_t *shape,
                            const int64_t *stride, size_t offs_bytes);
/* x itself if contiguous, else a CONTIGUOUS copy node. */
kiln_tensor *kiln__contig(kiln_ctx *ctx, kiln_tensor *x);
/* Broadcast shape of a and b, or -1 with an error naming op. */
int kiln__broadcast_shape(const char *op, const kiln_tensor *a, const kiln_tensor *b, int64_t *out);
/* A leaf constant filled with v, shaped like 'like' (ndim/shape). */
kiln_tensor *kiln__full_like(kiln_ctx *ctx, const kiln_tensor *like, double v);

/* im2col/col2im (ops/conv.c): g = kh, kw, sh, sw, ph, pw, dh, dw; the cols
 * grid is oh x ow, the image h x w; out-of-image taps read pad. */
kiln_tensor *kiln__im2col(kiln_ctx *ctx, kiln_tensor *x, const int64_t *g, int64_t oh, int64_t ow, double pad);
kiln_tensor *kiln__col2im(kiln_ctx *ctx, kiln_tensor *cols, const int64_t *g, int64_t h, int64_t w);
/* The same with cols laid out [C, kh, kw, N, OH, OW] (conv2d's one GEMM). */
kiln_tensor *kiln__im2col_cn(kiln_ctx *ctx, kiln_tensor *x, const int64_t *g, int64_t oh, int64_t ow, double pad);
kiln_tensor *kiln__col2im_cn(kiln_ctx *ctx, kiln_tensor *cols, const int64_t *g, int64_t h, int64_t w);
/* w2 [O, C*kh*kw] times im2col_cn(x, g, oh, ow) as one KILN_OP_CONV2D node
 * (ops/conv_tiled.c): [O, N, OH, OW], the columns never stored. */
kiln_tensor *kiln__conv2d_node(kiln_ctx *ctx, kiln_tensor *x, kiln_tensor *w2, const int64_t *g, int64_t oh, int64_t ow);
/* A (trans_a false) times B = im2col_cn(x, g, oh, ow, pad 0) (or B^T), a DFP
 * matmul whose kernel quantizes x once and gathers its columns from the
 * int16 codes (ops/dfp.c): kiln_dfp_conv2d's product. */
kiln_tensor *kiln__dfp_matmul_im2col(kiln_ctx *ctx, kiln_tensor *a, kiln_tensor *x, bool trans_b, const int64_t *g,
                                     int64_t oh, int64_t ow);

/* ---- op table and autodiff ---------------------------------------------- */

/* Backward rule: given the node and the gradient gy of its output, set
 * gsrc[i] for every src[i] that requires grad (leave the rest NULL), built
 * only from op constructors. Return KILN_OK or an error (message set). */
typedef kiln_status (*kiln_backward_fn)(kiln_ctx *ctx, kiln_tensor *node, kiln_tensor *gy, kiln_tensor **gsrc);

typedef struct kiln_op_info {
    const char *name;
    kiln_op_kind kind;
    kiln_backward_fn backward; /* NULL: not differentiable (argmax, cmp, ...) */
} kiln_op_info;

extern kiln_op_info kiln__op_table[KILN_OP_COUNT];
/* For a KERNEL op that also updates some of its sources in place (batch
 * norm's running statistics), filled by its family: bit k set when node
 * writes node->src[k], so the executor keeps their host and device copies
 * right. NULL (most ops): none. */
typedef uint32_t (*kiln_writes_src_fn)(const kiln_tensor *node);
extern kiln_writes_src_fn kiln__op_writes_src[KILN_OP_COUNT];
/* Does running node t write its source k (an INPLACE op writes them all)? */
static inline bool kiln__writes_src(const kiln_tensor *t, int k) {
    kiln_writes_src_fn f = kiln__op_writes_src[t->op];
    return kiln__op_table[t->op].kind == KILN_KIND_INPLACE || (f && (f(t) >> k & 1));
}
void kiln__ops_init(void); /* fills kiln__op_table once */
/* Each family fills its rows (ops/<family>.c). */
void kiln__ops_register_elementwise(kiln_op_info *tab);
void kiln__ops_register_reduce(kiln_op_info *tab);
void kiln__ops_register_movement(kiln_op_info *tab);
void kiln__ops_register_matmul(kiln_op_info *tab);
void kiln__ops_register_rows(kiln_op_info *tab);
void kiln__ops_register_nn(kiln_op_info *tab);
void kiln__ops_register_conv(kiln_op_info *tab);
void kiln__ops_register_conv_tiled(kiln_op_info *tab);
void kiln__ops_register_quant(kiln_op_info *tab);
void kiln__ops_register_dfp(kiln_op_info *tab);
/* x [..., k] f32 . W^T, W quantized contiguous [n, k] (ops/quant.c);
 * errors name who (kiln_matmul or kiln_linear) */
kiln_tensor *kiln__qmatmul(kiln_ctx *ctx, const char *who, kiln_tensor *x, kiln_tensor *w);

/* Walk the ancestors of roots depth-first and list them sources-first in
 * *list (malloc'd; the caller frees). Tensors whose visit == gen are
 * skipped (pre-mark them to exclude); stop(t) true keeps t but not what is
 * below it. Returns the count, or -1 when out of memory. */
int kiln__topo(kiln_tensor *const *roots, int nroots, uint64_t gen, bool (*stop)(const kiln_tensor *t, void *arg),
               void *arg, kiln_tensor ***list);

/* Sum g over the dims that were broadcast so it has like's shape. */
kiln_tensor *kiln__sum_to(kiln_ctx *ctx, kiln_tensor *g, const kiln_tensor *like);
/* Reverse-mode vector-Jacobian product over the subgraph between targets
 * and out: grads[i] = d<out, gy>/d targets[i] (NULL where no path). Used by
 * the graph's backward and by composite ops whose backward rule is the
 * gradient of their reference decomposition. */
kiln_status kiln__vjp(kiln_ctx *ctx, kiln_tensor *out, kiln_tensor *gy, int n, kiln_tensor *const *targets,
                      kiln_tensor **grads);

/* ---- execution ------------------------------------------------------------- */

typedef struct kiln_exec {
    uint64_t run;  /* graph's run counter (dropout masks) */
    uint64_t serial; /* unique to this compute process-wide (0: none); keys caches that live one compute */
    bool training;
    int n_threads;
    bool accumulate; /* add into the output instead of writing it (matmul, dfp_matmul, conv2d_grad_w: core/fuse.c) */
    int profile;     /* $KILN_PROFILE: 1 + the row a device charges this step's time to (kiln__profile_add); 0: none */
} kiln_exec;

/* A CPU kernel computes node->data from its sources' data (all resolved). */
typedef kiln_status (*kiln_cpu_kernel)(kiln_tensor *node, const kiln_exec *ex);
void kiln__cpu_register_elementwise(kiln_cpu_kernel *tab);
void kiln__cpu_register_reduce(kiln_cpu_kernel *tab);
void kiln__cpu_register_movement(kiln_cpu_kernel *tab);
void kiln__cpu_register_matmul(kiln_cpu_kernel *tab);
void kiln__cpu_register_rows(kiln_cpu_kernel *tab);
void kiln__cpu_register_nn(kiln_cpu_kernel *tab);
void kiln__cpu_register_conv(kiln_cpu_kernel *tab);
void kiln__cpu_register_conv_tiled(kiln_cpu_kernel *tab);
void kiln__cpu_register_optim(kiln_cpu_kernel *tab);
void kiln__cpu_register_optim_galore(kiln_cpu_kernel *tab);
void kiln__cpu_register_optim_apollo(kiln_cpu_kernel *tab);
void kiln__cpu_register_optim8bit(kiln_cpu_kernel *tab);
void kiln__cpu_register_quant(kiln_cpu_kernel *tab);
void kiln__cpu_register_qmatmul(kiln_cpu_kernel *tab);
void kiln__cpu_register_dfp(kiln_cpu_kernel *tab);

int kiln__threads(void);

/* ---- random numbers ------------------------------------------------------ */

/* Counter-based: the same (seed, counter) gives the same value everywhere. */
uint64_t kiln__hash64(uint64_t x);
double kiln__uniform01(uint64_t seed, uint64_t counter); /* [0, 1) */
double kiln__normal(uint64_t seed, uint64_t counter);

#endif /* KILN_INTERNAL_H */
