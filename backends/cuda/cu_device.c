/* cu_device.c — starting the CUDA backend: the device ($KILN_CUDA_DEVICE,
 * default 0), one stream, one cuBLAS handle with its workspace, the kernel
 * table, the backend vtable (core/backend.h) and its entry in core's table
 * of backends. No device (no driver, or cudaGetDeviceCount finding none) is
 * KILN_ERR_UNSUPPORTED saying "no CUDA device", which the tests take as
 * absent hardware. Every CUDA and cuBLAS error becomes a kiln status;
 * nothing here exits. */
#include "cu.h"

#include <stdio.h>

kiln_status kiln__cu_check(int err, const char *what) {
    if (err == cudaSuccess) return KILN_OK;
    cudaError_t e = (cudaError_t)err;
    kiln_status s = e == cudaErrorMemoryAllocation ? KILN_ERR_OOM : KILN_ERR_UNSUPPORTED;
    return kiln__errs(s, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

kiln_status kiln__cu_blas_check(cublasStatus_t st, const char *what) {
    if (st == CUBLAS_STATUS_SUCCESS) return KILN_OK;
    kiln_status s = st == CUBLAS_STATUS_ALLOC_FAILED ? KILN_ERR_OOM : KILN_ERR_UNSUPPORTED;
    return kiln__errs(s, "cuda: %s: cuBLAS status %d", what, (int)st);
}

/* ---- the vtable ---- */

/* Every operand of a dtype the kernels take (f32, f64, f16, bf16, i32,
 * and the block dtypes of cu_quant.c), and something to compute: the rest
 * (the other block dtypes, empty tensors) goes to the CPU. Each family
 * checks the dtypes of its own ops. */
static bool dtype_taken(kiln_dtype t) { return kiln__cu_dtype(t) >= 0; }

static bool cu_supports(kiln_backend *b, const kiln_tensor *node) {
    kiln_cu *cu = (kiln_cu *)b;
    const kiln_cu_kernel *k = &cu->kernels[node->op];
    if (!k->supports || !k->record || !dtype_taken(node->dtype) || kiln_tensor_numel(node) == 0) return false;
    for (int i = 0; i < node->nsrc; i++)
        if (node->src[i] && ((!dtype_taken(node->src[i]->dtype) && kiln__cu_quant(node->src[i]->dtype) < 0) ||
                             kiln_tensor_numel(node->src[i]) == 0))
            return false;
    return k->supports(cu, node);
}

static kiln_status cu_compute(kiln_backend *b, kiln_tensor *node, const kiln_exec *ex) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = ex->profile ? kiln__cu_profile_begin(cu, ex->profile - 1) : KILN_OK;
    if (!s) s = cu->kernels[node->op].record(cu, node, ex);
    kiln_status e = ex->profile && !s ? kiln__cu_profile_end(cu) : KILN_OK;
    return s ? s : e;
}

static kiln_status cu_compute_chain(kiln_backend *b, kiln_tensor *const *nodes, int n, const kiln_exec *ex) {
    kiln_cu *cu = (kiln_cu *)b;
    kiln_status s = ex->profile ? kiln__cu_profile_begin(cu, ex->profile - 1) : KILN_OK;
    if (!s) s = kiln__cu_chain_record(cu, nodes, n);
    kiln_status e = ex->profile && !s ? kiln__cu_profile_end(cu) : KILN_OK;
    return s ? s : e;
}

static kiln_devbuf *cu_alloc(kiln_backend *b, size_t bytes) { return kiln__cu_buffer_new((kiln_cu *)b, bytes, true); }

static void cu_free(kiln_backend *b, kiln_devbuf *d) { kiln__cu_buffer_free((kiln_cu *)b, d); }

static const kiln_backend_vt cu_vt = {
    .supports = cu_supports,
    .alloc = cu_alloc,
    .free = cu_free,
    .upload = kiln__cu_upload,
    .download = kiln__cu_download,
    .zero = kiln__cu_zero,
    .compute = cu_compute,
    .flush = kiln__cu_flush,
    .fuses = KILN_FUSE_CHAIN | KILN_FUSE_ACC,
    .compute_chain = cu_compute_chain,
    .record_begin = kiln__cu_record_begin,
    .record_end = kiln__cu_record_end,
    .replay = kiln__cu_replay,
    .record_free = kiln__cu_record_free,
    .recordable = kiln__cu_recordable,
    .buffer_id = kiln__cu_buffer_id,
    .set_run = kiln__cu_set_run,
    .rows_error = kiln__cu_rows_error,
};

/* ---- start and teardown ---- */

static kiln_cu *the_cu;

static void destroy(kiln_cu *cu) {
    if (cu->stream) cudaStreamSynchronize(cu->stream);
    kiln__cu_profile_free(cu);
    if (cu->run_word) kiln__cu_buffer_free(cu, cu->run_word);
    if (cu->rows_word) kiln__cu_buffer_free(cu, cu->rows_word);
    if (cu->blas) cublasDestroy(cu->blas);
    if (cu->blas_ws) kiln__cu_buffer_free(cu, cu->blas_ws);
    kiln__cu_cache_release(cu);
    if (cu->stream) cudaStreamDestroy(cu->stream);
    free(cu);
}

static void teardown(void) {
    if (the_cu) destroy(the_cu);
    the_cu = NULL;
}

static kiln_status pick_device(kiln_cu *cu) {
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess || count <= 0) {
        cudaGetLastError(); /* clear the sticky error of a missing driver */
        return kiln__errs(KILN_ERR_UNSUPPORTED, "cuda: no CUDA device (%s)",
                          e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    }
    const char *env = getenv("KILN_CUDA_DEVICE");
    int dev = 0;
    if (env && *env) {
        char *end;
        long v = strtol(env, &end, 10);
        if (*end || v < 0 || v >= count)
            return kiln__errs(KILN_ERR_UNSUPPORTED, "cuda: KILN_CUDA_DEVICE=%s names none of the %d devices", env, count);
        dev = (int)v;
    }
    cu->device = dev;
    kiln_status s = kiln__cu_check(cudaSetDevice(dev), "cudaSetDevice");
    if (!s) s = kiln__cu_check(cudaGetDeviceProperties(&cu->props, dev), "cudaGetDeviceProperties");
    return s;
}

/* cuBLAS's documentation on graph capture: give the handle a workspace of
 * its own, or a captured call may take one from cuBLAS's pool inside the
 * graph. Its recommended size is 32 MiB on Hopper and later, 4 MiB before.
 * Set after cublasSetStream, which takes the handle back to the pool. */
static kiln_status blas_workspace(kiln_cu *cu) {
    size_t bytes = (size_t)(cu->props.major >= 9 ? 32 : 4) << 20;
    cu->blas_ws = kiln__cu_buffer_new(cu, bytes, false);
    if (!cu->blas_ws) return kiln_last_status();
    return kiln__cu_blas_check(cublasSetWorkspace(cu->blas, cu->blas_ws->ptr, bytes), "cublasSetWorkspace");
}

static kiln_backend *cu_open(void) {
    kiln_cu *cu = kiln__calloc(1, sizeof *cu);
    if (!cu) return kiln__err(KILN_ERR_OOM, "cuda: out of memory");
    cu->base.name = "cuda";
    cu->base.vt = &cu_vt;
    cu->base.impl = cu;
    kiln_status s = pick_device(cu);
    if (!s) s = kiln__cu_check(cudaStreamCreateWithFlags(&cu->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (!s) s = kiln__cu_blas_check(cublasCreate(&cu->blas), "cublasCreate");
    if (!s) s = kiln__cu_blas_check(cublasSetStream(cu->blas, cu->stream), "cublasSetStream");
    if (!s) s = blas_workspace(cu);
    const char *tf32 = getenv("KILN_CUDA_TF32");
    cu->tf32 = tf32 && !strcmp(tf32, "1");
    if (!s) kiln__cu_profile_init(cu);
    if (s) {
        destroy(cu);
        return NULL;
    }
    snprintf(cu->base.device, sizeof cu->base.device, "%s (CUDA, compute capability %d.%d, %.1f GiB)", cu->props.name,
             cu->props.major, cu->props.minor, (double)cu->props.totalGlobalMem / (1024.0 * 1024.0 * 1024.0));
    kiln__cu_register_elementwise(cu->kernels);
    kiln__cu_register_reduce(cu->kernels);
    kiln__cu_register_matmul(cu->kernels);
    kiln__cu_register_nn(cu->kernels);
    kiln__cu_register_optim(cu->kernels);
    kiln__cu_register_optim_lowrank(cu->kernels);
    kiln__cu_register_movement(cu->kernels);
    kiln__cu_register_attention(cu->kernels);
    kiln__cu_register_quant(cu->kernels);
    the_cu = cu;
    atexit(teardown);
    return &cu->base;
}

/* started by the first kiln_backend_get("cuda") */
__attribute__((constructor)) static void cu_register(void) { kiln__backend_register("cuda", cu_open, false); }
