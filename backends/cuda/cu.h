/* cu.h — what the CUDA backend's kernel families share with its runtime.
 *
 * Like the Vulkan backend (backends/vulkan/vk.h), each family
 * (cu_elementwise.c, cu_reduce.c, cu_matmul.c, ...) fills rows of a table
 * indexed by kiln_op: `supports` says whether the node runs here (false
 * sends it to the CPU), `record` queues its kernels on the backend's one
 * stream. The host files are C and see kiln's internals; the kernels live
 * in .cu files behind the plain launchers of cu_kernels.h.
 *
 *     // y = relu(x): any strides, f32/f16/bf16
 *     cu_walk w = kiln__cu_walk(y, 1);
 *     return kiln__cu_launched(cu, kiln__cu_unary(cu->stream, op - KILN_OP_NEG, 0, CU_F32,
 *                                                 kiln__cu_ptr(x), kiln__cu_ptr(y), n, &w), "relu");
 *
 * Work is ordered by the one stream, so device memory freed to the
 * caching allocator (cu_memory.c) may be handed out again at once: the
 * next user's work is queued after the last reader's.
 */
#ifndef KILN_CU_H
#define KILN_CU_H

#include "backend.h"
#include "cu_kernels.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

typedef struct kiln_cu kiln_cu;

typedef struct kiln_cu_kernel {
    bool (*supports)(const kiln_cu *cu, const kiln_tensor *node);
    kiln_status (*record)(kiln_cu *cu, kiln_tensor *node, const kiln_exec *ex);
} kiln_cu_kernel;

struct kiln_devbuf {
    void *ptr;    /* device memory (cudaMalloc) */
    size_t size;  /* bytes asked for */
    int cls;      /* size class in the caching allocator, -1: too big to cache */
    kiln_devbuf *next; /* free list */
};

/* Size classes: 256 B << c, up to 1 GiB; bigger blocks are freed at once. */
#define KILN_CU_CLASSES 23

struct kiln_cu {
    kiln_backend base; /* what kiln_backend_get("cuda") returns; first member */
    int device;
    struct cudaDeviceProp props;
    cudaStream_t stream;
    cublasHandle_t blas;
    kiln_devbuf *blas_ws; /* the handle's workspace, so a captured GEMM allocates nothing */
    bool tf32; /* $KILN_CUDA_TF32=1: f32 matmuls on TF32 tensor cores, as KILN_MATMUL_TF32 */
    kiln_devbuf *free_list[KILN_CU_CLASSES];
    size_t cached_bytes;
    kiln_cu_kernel kernels[KILN_OP_COUNT];
    /* $KILN_PROFILE: event pairs around each step (cu_profile.c) */
    cudaEvent_t *prof_ev;
    int *prof_row; /* per pair: the profile row */
    int prof_used; /* pairs recorded since the last collect */
    /* graph replay (cu_graph.c): a stream capture is open; scratch freed meanwhile */
    bool capturing;
    kiln_devbuf *held;
    /* the computing graph's run number, which dropout reads (vt->set_run) */
    kiln_devbuf *run_word;
    /* a row outside a KV cache, noted by attention_cached (vt->rows_error) */
    kiln_devbuf *rows_word;
};

/* Each family fills its rows. */
void kiln__cu_register_elementwise(kiln_cu_kernel *tab);
void kiln__cu_register_reduce(kiln_cu_kernel *tab);
void kiln__cu_register_matmul(kiln_cu_kernel *tab);
void kiln__cu_register_nn(kiln_cu_kernel *tab);
kiln_status kiln__cu_set_run(kiln_backend *b, uint64_t run); /* cu_nn.c: vt->set_run */
void kiln__cu_register_optim(kiln_cu_kernel *tab);
void kiln__cu_register_optim_lowrank(kiln_cu_kernel *tab); /* cu_optim_lowrank.c */
void kiln__cu_register_movement(kiln_cu_kernel *tab);
void kiln__cu_register_attention(kiln_cu_kernel *tab);
kiln_status kiln__cu_rows_error(kiln_backend *b); /* cu_attention.c: vt->rows_error */
void kiln__cu_register_quant(kiln_cu_kernel *tab);
void kiln__cu_register_conv(kiln_cu_kernel *tab); /* from kiln__cu_register_nn */
void kiln__cu_register_dfp(kiln_cu_kernel *tab);  /* from kiln__cu_register_matmul */
/* cu_quant.c: cu_kernels.h's code of a block dtype the kernels decode, -1
 * for the others; get_rows from such a table, for cu_nn.c's row. */
int kiln__cu_quant(kiln_dtype t);
bool kiln__cu_quant_rows_supports(const kiln_tensor *t);
kiln_status kiln__cu_quant_rows_record(kiln_cu *cu, kiln_tensor *t);

/* cu_qgemm.c: QMATMUL from CU_QGEMM_MIN_M rows of x (a prompt) as W
 * dequantized to f16 tiles and cublasGemmEx; below, the GEMV kernels
 * (k_qmv*.cu, k_quant.cu). The crossover is llama.cpp's (its GEMV kernels
 * stop at 8 rows; ours at 7), not measured on a GPU. */
enum { CU_QGEMM_MIN_M = 8 };
bool kiln__cu_qgemm_ok(const kiln_tensor *t);
kiln_status kiln__cu_qgemm(kiln_cu *cu, kiln_tensor *t);

/* cu_chain.c: KILN_FUSE_CHAIN, an f32 or f64 chain's nodes (each one the
 * backend takes) as chain kernels. */
kiln_status kiln__cu_chain_record(kiln_cu *cu, kiln_tensor *const *nodes, int n);

/* cu_device.c: a CUDA runtime error as a kiln status naming what failed. */
kiln_status kiln__cu_check(int err, const char *what);
/* The same for a kernel launcher's result. */
static inline kiln_status kiln__cu_launched(int err, const char *what) { return err ? kiln__cu_check(err, what) : KILN_OK; }
kiln_status kiln__cu_blas_check(cublasStatus_t st, const char *what);

/* cu_memory.c */
kiln_devbuf *kiln__cu_buffer_new(kiln_cu *cu, size_t bytes, bool zero);
void kiln__cu_buffer_free(kiln_cu *cu, kiln_devbuf *d);
void kiln__cu_cache_release(kiln_cu *cu);
kiln_status kiln__cu_upload(kiln_backend *b, kiln_devbuf *d, size_t off, const void *src, size_t n);
kiln_status kiln__cu_download(kiln_backend *b, kiln_devbuf *d, size_t off, void *dst, size_t n);
kiln_status kiln__cu_zero(kiln_backend *b, kiln_devbuf *d, size_t off, size_t n);
kiln_status kiln__cu_flush(kiln_backend *b);

/* cu_graph.c: the vtable's graph replay entries (the stream captured into a CUDA graph) */
kiln_status kiln__cu_record_begin(kiln_backend *b);
kiln_record *kiln__cu_record_end(kiln_backend *b);
kiln_status kiln__cu_replay(kiln_backend *b, kiln_record *r);
void kiln__cu_record_free(kiln_backend *b, kiln_record *r);
bool kiln__cu_recordable(kiln_backend *b, const kiln_tensor *node);
uint64_t kiln__cu_buffer_id(const kiln_devbuf *d);

/* cu_profile.c: device time per step for $KILN_PROFILE (nothing unless it is set) */
void kiln__cu_profile_init(kiln_cu *cu);
void kiln__cu_profile_free(kiln_cu *cu);
kiln_status kiln__cu_profile_begin(kiln_cu *cu, int row); /* before a step's kernels */
kiln_status kiln__cu_profile_end(kiln_cu *cu);            /* after them */
void kiln__cu_profile_collect(kiln_cu *cu);               /* after a synchronize: the times to core */
/* graph replay (cu_graph.c): before a capture opens; when it closes, the
 * captured pairs' rows (malloc'd, *n of them; NULL when none); before a
 * launch of the captured graph, its pairs' rows back */
kiln_status kiln__cu_profile_record_begin(kiln_cu *cu);
int *kiln__cu_profile_record_end(kiln_cu *cu, int *n);
kiln_status kiln__cu_profile_replay(kiln_cu *cu, const int *rows, int n);

/* ---- helpers for the families (cu_util.c) ---- */

/* The device address of t's first element (its dbuf + doff). */
static inline void *kiln__cu_ptr(const kiln_tensor *t) { return (char *)t->dbuf->ptr + t->doff; }
/* cu_kernels.h's code for dtype t, -1 when the kernels do not take it. */
int kiln__cu_dtype(kiln_dtype t);
/* The walk of t's (contiguous) output over its first nsrc (<= 3) sources,
 * broadcast and coalesced as the CPU's (core/bcast.h). */
cu_walk kiln__cu_walk(const kiln_tensor *t, int nsrc);
/* The walk of t's own elements in row-major order, through its strides. */
cu_walk kiln__cu_walk_self(const kiln_tensor *t);

#endif
