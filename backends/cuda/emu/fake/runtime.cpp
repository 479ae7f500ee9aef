// runtime.cpp — the CUDA runtime and cuBLAS calls the backend makes,
// faked on the host (setup.sh builds it as libcudart.so and libcublas.so):
// device memory is host memory (fresh blocks hold garbage, as cudaMalloc's
// may), streams are no-ops (an emulated launch runs to completion), events
// read the host's clock, one "device" is found, and the GEMMs run on the
// host, summing in double and rounding as a f32-accumulating cuBLAS would
// (once to f32, then to the output dtype); CUBLAS_COMPUTE_64F in double.
// Stream capture: between cudaStreamBeginCapture and cudaStreamEndCapture
// launches (prelude.h's emu_capture), copies, memsets and GEMMs are kept in
// order instead of run, and a launched graph runs them again; a
// synchronize while capturing fails and invalidates the capture, as CUDA's.
// A GEMM captured on a handle with no user workspace (cublasSetWorkspace
// after the last cublasSetStream) invalidates the capture too: cuBLAS
// would take its workspace from its own pool inside the graph, which its
// documentation on graph capture warns against; the fake refuses it so
// that a handle without one shows in the tests.
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <cstdio>
#include <ctime>
#include <functional>
#include <vector>

struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};
static cudaGraph_t capture;     // the open capture's graph, or NULL
static bool capture_invalid;    // something unsupported was called while capturing
static long graph_launches, graph_ops_run; // what launched graphs ran (emu_graph_counts)

// Keep f for the open capture (true), or say there is none (false).
bool emu_capture(std::function<void()> f) {
    if (!capture) return false;
    capture->ops.push_back(std::move(f));
    return true;
}

extern "C" {
cudaError_t cudaGetDeviceCount(int *n) { *n = 1; return cudaSuccess; }
cudaError_t cudaSetDevice(int) { return cudaSuccess; }
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int) {
    memset(p, 0, sizeof *p);
    strcpy(p->name, "host emulation");
    p->major = 9, p->minor = 0, p->totalGlobalMem = (size_t)1 << 34;
    return cudaSuccess;
}
const char *cudaGetErrorString(cudaError_t e) { return e ? "emulated error" : "no error"; }
const char *cudaGetErrorName(cudaError_t e) { return e ? "cudaErrorEmulated" : "cudaSuccess"; }
cudaError_t cudaGetLastError(void) { return cudaSuccess; }
cudaError_t cudaMalloc(void **p, size_t n) {
    if (posix_memalign(p, 256, n ? n : 1)) *p = nullptr; /* cudaMalloc's alignment, which cuBLAS's workspace needs */
    if (*p) memset(*p, 0xA5, n); /* garbage, as a fresh cudaMalloc */
    return *p ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind, cudaStream_t) {
    if (!emu_capture([=] { memmove(d, s, n); })) memmove(d, s, n);
    return cudaSuccess;
}
// a __constant__ / __device__ symbol is a host object here
cudaError_t cudaMemcpyToSymbolAsync(const void *sym, const void *s, size_t n, size_t off, cudaMemcpyKind, cudaStream_t) {
    char *to = (char *)sym + off;
    if (!emu_capture([=] { memmove(to, s, n); })) memmove(to, s, n);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *d, int v, size_t n, cudaStream_t) {
    if (!emu_capture([=] { memset(d, v, n); })) memset(d, v, n);
    return cudaSuccess;
}
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned) { *s = (cudaStream_t)0x1; return cudaSuccess; }
cudaError_t cudaStreamCreate(cudaStream_t *s) { *s = (cudaStream_t)0x1; return cudaSuccess; }
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
static cudaError_t sync(void) {
    if (!capture) return cudaSuccess;
    capture_invalid = true;
    return cudaErrorStreamCaptureUnsupported;
}
cudaError_t cudaStreamSynchronize(cudaStream_t) { return sync(); }
cudaError_t cudaDeviceSynchronize(void) { return sync(); }
cudaError_t cudaStreamBeginCapture(cudaStream_t, cudaStreamCaptureMode) {
    if (capture) return cudaErrorIllegalState;
    capture = new CUgraph_st;
    capture_invalid = false;
    return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t, cudaGraph_t *g) {
    if (!capture) return cudaErrorIllegalState;
    *g = capture_invalid ? nullptr : capture;
    if (capture_invalid) delete capture;
    capture = nullptr;
    return capture_invalid ? cudaErrorStreamCaptureInvalidated : cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long) {
    *e = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}
cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t) {
    if (capture) return cudaErrorStreamCaptureUnsupported;
    graph_launches++;
    for (auto &f : e->ops) f();
    graph_ops_run += (long)e->ops.size();
    return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) { delete e; return cudaSuccess; }
cudaError_t cudaGraphDestroy(cudaGraph_t g) { delete g; return cudaSuccess; }
// The fake's own (tests find it with dlsym): graphs launched, and the
// launches, copies, memsets and GEMMs they ran.
void emu_graph_counts(long *launches, long *ops) {
    *launches = graph_launches;
    *ops = graph_ops_run;
}
// an event is the host's clock when recorded: every launch before it has run to completion
cudaError_t cudaEventCreate(cudaEvent_t *e) {
    *e = (cudaEvent_t)calloc(1, sizeof(timespec));
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) { free(e); return cudaSuccess; }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
    clock_gettime(CLOCK_MONOTONIC, (timespec *)e);
    return cudaSuccess;
}
// cudaEventRecordExternal in a capture: an event record node, read each launch
cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned) {
    if (!emu_capture([e] { clock_gettime(CLOCK_MONOTONIC, (timespec *)e); })) return cudaEventRecord(e, s);
    return cudaSuccess;
}
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b) {
    const timespec *x = (const timespec *)a, *y = (const timespec *)b;
    *ms = (float)(1e3 * (double)(y->tv_sec - x->tv_sec) + 1e-6 * (double)(y->tv_nsec - x->tv_nsec));
    return cudaSuccess;
}

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) { *h = (cublasHandle_t)0x1; return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t cublasDestroy_v2(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
static bool blas_workspace; // the handle has a user workspace
// as cuBLAS's: a new stream takes the handle back to the default workspace pool
cublasStatus_t cublasSetStream_v2(cublasHandle_t, cudaStream_t) {
    blas_workspace = false;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t, void *w, size_t n) {
    if ((n && !w) || (uintptr_t)w % 256) return CUBLAS_STATUS_INVALID_VALUE;
    blas_workspace = n > 0;
    return CUBLAS_STATUS_SUCCESS;
}
// alpha and beta are read through their pointers either way (device
// memory is host memory), but
// a captured GEMM reads them when it runs in device mode, at capture in host mode (as cuBLAS)
static cublasPointerMode_t pointer_mode = CUBLAS_POINTER_MODE_HOST;
cublasStatus_t cublasSetPointerMode_v2(cublasHandle_t, cublasPointerMode_t m) {
    pointer_mode = m;
    return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetMathMode(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
}

static double ld(cudaDataType t, const void *p, long long i) {
    switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CUDA_R_64F: return ((const double *)p)[i];
    default: return ((const float *)p)[i];
    }
}
static void st(cudaDataType t, void *p, long long i, double v) {
    switch (t) {
    case CUDA_R_16F: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CUDA_R_16BF: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case CUDA_R_64F: ((double *)p)[i] = v; break;
    default: ((float *)p)[i] = (float)v;
    }
}
// An f32 as a TF32 tensor core reads it: 10 bits of mantissa, rounded to
// nearest with ties away from zero (cvt.rna.tf32.f32).
static double tf32(double v) {
    float f = (float)v;
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0x1000u) & ~0x1fffu;
    memcpy(&f, &u, 4);
    return f;
}
// column-major C (m x n) = alpha op(A) op(B) + beta C
static cublasStatus_t gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha, const void *A,
                           cudaDataType at, int lda, long long sa, const void *B, cudaDataType bt, int ldb, long long sb,
                           const void *beta, void *C, cudaDataType ct, int ldc, long long sc, int batch,
                           cublasComputeType_t comp) {
    bool d = comp == CUBLAS_COMPUTE_64F || comp == CUBLAS_COMPUTE_64F_PEDANTIC;
    double al = d ? *(const double *)alpha : *(const float *)alpha, be = d ? *(const double *)beta : *(const float *)beta;
    bool t32 = comp == CUBLAS_COMPUTE_32F_FAST_TF32;
    if (ta == CUBLAS_OP_C || tb == CUBLAS_OP_C) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (lda < (ta == CUBLAS_OP_N ? m : k) || ldb < (tb == CUBLAS_OP_N ? k : n) || ldc < m) {
        fprintf(stderr, "fake cublas: bad leading dims m %d n %d k %d lda %d ldb %d ldc %d\n", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    for (int b = 0; b < batch; b++)
        for (int j = 0; j < n; j++)
            for (int i = 0; i < m; i++) {
                double s = 0;
                for (int p = 0; p < k; p++) {
                    double a = ld(at, A, b * sa + (ta == CUBLAS_OP_N ? i + (long long)p * lda : p + (long long)i * lda));
                    double v = ld(bt, B, b * sb + (tb == CUBLAS_OP_N ? p + (long long)j * ldb : j + (long long)p * ldb));
                    if (t32 && at == CUDA_R_32F) a = tf32(a);
                    if (t32 && bt == CUDA_R_32F) v = tf32(v);
                    s += a * v;
                }
                if (!d) s = (float)s;
                long long ci = b * sc + i + (long long)j * ldc;
                st(ct, C, ci, al * s + (be != 0 ? be * ld(ct, C, ci) : 0));
            }
    return CUBLAS_STATUS_SUCCESS;
}
// A GEMM, run now or kept by the open capture: then with alpha and beta
// copied in host pointer mode (the caller's may be gone when it runs).
static cublasStatus_t gemm_or_capture(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                                      const void *A, cudaDataType at, int lda, long long sa, const void *B,
                                      cudaDataType bt, int ldb, long long sb, const void *beta, void *C, cudaDataType ct,
                                      int ldc, long long sc, int batch, cublasComputeType_t comp) {
    if (!capture) return gemm(ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp);
    if (!blas_workspace) {
        capture_invalid = true;
        return CUBLAS_STATUS_SUCCESS;
    }
    bool copy = pointer_mode == CUBLAS_POINTER_MODE_HOST;
    size_t w = comp == CUBLAS_COMPUTE_64F || comp == CUBLAS_COMPUTE_64F_PEDANTIC ? 8 : 4;
    uint64_t al = 0, be = 0;
    if (copy) memcpy(&al, alpha, w), memcpy(&be, beta, w);
    emu_capture([=] {
        gemm(ta, tb, m, n, k, copy ? (const void *)&al : alpha, A, at, lda, sa, B, bt, ldb, sb,
             copy ? (const void *)&be : beta, C, ct, ldc, sc, batch, comp);
    });
    return CUBLAS_STATUS_SUCCESS;
}
extern "C" {
cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                                          const void *alpha, const void *A, cudaDataType at, int lda, long long sa,
                                          const void *B, cudaDataType bt, int ldb, long long sb, const void *beta, void *C,
                                          cudaDataType ct, int ldc, long long sc, int batch, cublasComputeType_t comp,
                                          cublasGemmAlgo_t) {
    return gemm_or_capture(ta, tb, m, n, k, alpha, A, at, lda, sa, B, bt, ldb, sb, beta, C, ct, ldc, sc, batch, comp);
}
cublasStatus_t cublasGemmEx(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void *alpha,
                            const void *A, cudaDataType at, int lda, const void *B, cudaDataType bt, int ldb,
                            const void *beta, void *C, cudaDataType ct, int ldc, cublasComputeType_t comp, cublasGemmAlgo_t) {
    return gemm_or_capture(ta, tb, m, n, k, alpha, A, at, lda, 0, B, bt, ldb, 0, beta, C, ct, ldc, 0, 1, comp);
}
}
