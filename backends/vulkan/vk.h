/* vk.h — what the Vulkan backend's kernel families share with its runtime.
 *
 * Each family (vk_elementwise.c, vk_matmul.c, ...) fills rows of a table
 * indexed by kiln_op, like the CPU backend: `supports` says whether the
 * node can run here (dtypes, sizes, parameters; false sends it to the CPU),
 * `record` records its dispatches. A dispatch names a compute shader
 * (backends/vulkan/shaders/<name>.comp, compiled and embedded at build
 * time), binds tensors as storage buffers 0..n-1 and passes up to 128 bytes
 * of push constants.
 *
 *     // y = relu(x), both f32 and contiguous
 *     struct { uint32_t n, x0, y0; } pc = {(uint32_t)n, kiln__vk_base(vk, x), kiln__vk_base(vk, y)};
 *     kiln_vk_dispatch d = {.shader = "relu", .n = 2, .bind = {x, y}, .push = &pc, .push_size = sizeof pc};
 *     kiln__vk_groups_1d(vk, n, 256, d.groups);
 *     return kiln__vk_dispatch(vk, &d);
 *
 * A tensor is bound from an aligned offset at or below its first byte, so
 * the shader must index it from element kiln__vk_base(vk, t) (in units of
 * t's dtype) and use t's strides. The runtime puts a barrier between
 * dispatches, so every dispatch sees the writes of those before it.
 */
#ifndef KILN_VK_H
#define KILN_VK_H

#include "backend.h"

#define KILN_VK_MAX_BIND 8
#define KILN_VK_MAX_PUSH 128

typedef struct kiln_vk kiln_vk;

typedef struct kiln_vk_kernel {
    bool (*supports)(const kiln_vk *vk, const kiln_tensor *node);
    kiln_status (*record)(kiln_vk *vk, kiln_tensor *node, const kiln_exec *ex);
} kiln_vk_kernel;

/* Each family fills its rows. */
void kiln__vk_register_elementwise(kiln_vk_kernel *tab);
void kiln__vk_register_reduce(kiln_vk_kernel *tab);
void kiln__vk_register_matmul(kiln_vk_kernel *tab);
void kiln__vk_register_movement(kiln_vk_kernel *tab);
void kiln__vk_register_rows(kiln_vk_kernel *tab);
void kiln__vk_register_nn(kiln_vk_kernel *tab);
void kiln__vk_register_attention(kiln_vk_kernel *tab);
void kiln__vk_register_conv(kiln_vk_kernel *tab);
void kiln__vk_register_optim(kiln_vk_kernel *tab);
void kiln__vk_register_optim_8bit(kiln_vk_kernel *tab);
void kiln__vk_register_optim_apollo(kiln_vk_kernel *tab);
void kiln__vk_register_optim_galore(kiln_vk_kernel *tab);
void kiln__vk_register_quant(kiln_vk_kernel *tab);

/* Has the backend kernels for dtype t? The plain dtypes yes (each kernel
 * still says which it takes); a quantized (block) dtype only when
 * vk_quant.c has its shaders. vk_supports() sends any node with an operand
 * of a dtype this refuses to the CPU, so a new block dtype needs nothing
 * here to fall back. */
bool kiln__vk_dtype_ok(kiln_dtype t);
/* vk_matmul.c, for a MATMUL node another family builds (vk_quant.c's
 * many-row products): does it run here, and record it without splitting K
 * across workgroups (which takes scratch, and would replace the caller's). */
bool kiln__vk_matmul_ok(const kiln_vk *vk, const kiln_tensor *t);
kiln_status kiln__vk_matmul_unsplit(kiln_vk *vk, kiln_tensor *t);
/* get_rows from a quantized table (vk_quant.c), for vk_rows.c's row. */
bool kiln__vk_quant_rows_supports(const kiln_vk *vk, const kiln_tensor *node);
kiln_status kiln__vk_quant_rows_record(kiln_vk *vk, kiln_tensor *node, const kiln_exec *ex);

/* What the device offers that kernels may depend on. */
typedef struct kiln_vk_caps {
    uint32_t subgroup_size;       /* never assume 32 or 64 */
    uint32_t max_invocations;     /* per workgroup */
    uint32_t max_shared_bytes;    /* shared memory per workgroup */
    uint32_t max_groups[3];       /* maxComputeWorkGroupCount */
    uint64_t max_range;           /* bytes one storage-buffer binding may cover */
    bool f16;                     /* shaderFloat16 + 16-bit storage enabled */
    bool int64;                   /* shaderInt64 enabled */
    bool f64;                     /* shaderFloat64 enabled */
    /* Loop iterations one invocation may run, all its loops together (0:
     * no bound). llvmpipe (lavapipe) ends every loop of an invocation once
     * 65535 iterations have run (LP_MAX_TGSI_LOOP_ITERATIONS): kernels with
     * rolled loops inside long ones split their work below it. */
    uint32_t loop_budget;
    /* GLSL's fma() rounds once. Vulkan lets it be a multiply and an add,
     * as lavapipe's is; every other driver is taken to fuse it (kernels
     * that must round once check this: backend_ops_qmatmul_int would show
     * a driver that does not) */
    bool fma_fused;
    bool int_dot; /* shaderIntegerDotProduct enabled (VK_KHR_shader_integer_dot_product) */
} kiln_vk_caps;
const kiln_vk_caps *kiln__vk_caps(const kiln_vk *vk);

/* The element t starts at within its binding (units of t's dtype); for a
 * quantized dtype the byte, since its blocks (34, 18, 36, 8456 bytes) do
 * not line up with any word. */
uint32_t kiln__vk_base(const kiln_vk *vk, const kiln_tensor *t);
/* Can t (all the elements its shape and strides reach; whole blocks of a
 * quantized dtype) be bound at once?
 * supports() checks every operand with this. */
bool kiln__vk_fits(const kiln_vk *vk, const kiln_tensor *t);

typedef struct kiln_vk_dispatch {
    const char *shader;                      /* file name without .comp */
    int n;                                   /* bindings 0..n-1 */
    const kiln_tensor *bind[KILN_VK_MAX_BIND];
    const void *push;                        /* push constants, <= 128 bytes */
    uint32_t push_size;
    uint32_t groups[3];                      /* workgroups in x, y, z (0 counts as 1) */
} kiln_vk_dispatch;
kiln_status kiln__vk_dispatch(kiln_vk *vk, const kiln_vk_dispatch *d);

/* Temporary device memory for the node being recorded (partial sums,
 * split-K blocks): *out becomes a 1-D contiguous tensor of n elements of
 * dt that can be bound like any operand. Take all of a node's scratch
 * before its first dispatch; it lasts until the recorded work is
 * submitted, and its contents start undefined. */
kiln_status kiln__vk_scratch(kiln_vk *vk, int64_t n, kiln_dtype dt, kiln_tensor *out);
/* Write n bytes from the host at the start of t (a scratch piece: constant
 * tables a kernel reads), in order with the work recorded around it. */
kiln_status kiln__vk_write(kiln_vk *vk, const kiln_tensor *t, const void *src, size_t n);
/* k (<= 8) pieces at once, n[i] elements of dt[i] into out[i]: a node that
 * needs several must take them in one call, since a request that outgrows
 * the buffer replaces it (and the earlier pieces with it). */
kiln_status kiln__vk_scratch_n(kiln_vk *vk, int k, const int64_t *n, const kiln_dtype *dt, kiln_tensor *out);

/* The computing graph's run number (vt->set_run) as a bindable tensor:
 * two I32 words, low then high; an error before the first set_run. Read
 * by the shader, not pushed, so that a recorded dispatch reads each run's. */
kiln_status kiln__vk_run_word(const kiln_vk *vk, kiln_tensor *out);
/* attention_cached's word for a row outside the cache (vt->rows_error) as
 * a bindable tensor: six I32 (flag, row, seq, pos, B, S), made at the first
 * call, zero until a kernel notes a row. */
kiln_status kiln__vk_rows_word(kiln_vk *vk, kiln_tensor *out);

/* Workgroups for n invocations of a 1-D kernel with local size `local`,
 * spread over x and y when x alone would exceed the device's limit; the
 * shader takes its index from kiln_gid() (shaders/common.glsl) and returns
 * when it is >= n. */
void kiln__vk_groups_1d(const kiln_vk *vk, uint64_t n, uint32_t local, uint32_t groups[3]);
/* floor(i / d) = ew_udiv(i, m, l) (shaders/ew_fast.glsl) for every i < 2^31
 * (vk_elementwise.c). */
void kiln__vk_magic(uint32_t d, uint32_t *m, uint32_t *l);

/* KILN_FUSE_CHAIN: an f32 chain's nodes (each one vk_supports takes) as
 * ew_chain dispatches, one unless it has more than six inputs (vk_chain.c). */
kiln_status kiln__vk_chain_record(kiln_vk *vk, kiln_tensor *const *nodes, int n);

/* The embedded SPIR-V (generated at build time from shaders/). */
typedef struct kiln_vk_shader {
    const char *name;
    const uint32_t *words;
    size_t bytes;
} kiln_vk_shader;
extern const kiln_vk_shader kiln__vk_shaders[];
extern const int kiln__vk_n_shaders;

/* Float-controls execution modes (vk_spirv.c): *out becomes a copy of the
 * n SPIR-V words w with the modes in `modes` (KILN_VK_*_32 bits) declared
 * for every entry point, with their capabilities (and the extension before
 * SPIR-V 1.4); modes already there are left as they are. Free *out. */
#define KILN_VK_SZ_INF_NAN_PRESERVE_32 1u /* NaN, infinities and -0 kept */
#define KILN_VK_DENORM_PRESERVE_32 2u     /* subnormals kept */
kiln_status kiln__vk_spirv_float_modes(const uint32_t *w, size_t n, unsigned modes, uint32_t **out, size_t *out_n);

#endif
