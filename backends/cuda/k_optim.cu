// k_optim.cu — the CUDA backend's fused optimizer steps, in place, one
// thread per element: SGD (momentum, Nesterov), Adam / AdamW (AMSGrad) and
// Lion on f32 or f64 (the dtypes backends/cpu/optim.c defines), and their
// 8-bit (blockwise dynamic-map) variants on f32, written as the CPU's loops, operation for
// operation (the build passes -fmad=false so no multiply-add is fused that
// the CPU rounds twice). The hyperparameters are read from the hyper leaf
// on the device (they change between steps); the scalars the CPU derives
// from them in double are derived here the same way, in every thread.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"
#include "k_q8.cuh"

// The f32 and f64 steps are one template over T, as the CPU's DEFINE_*
// macros: the hyperparameters converted to T once.

// h: lr, momentum, dampening, weight_decay (optim/sgd.c)
template <typename T>
__global__ void sgd_k(T *p, const T *grad, T *buf, int64_t n, const float *h, bool nesterov, bool first) {
    const T lr = (T)h[0], mom = (T)h[1], keep = (T)(1.0 - (double)h[2]), wd = (T)h[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T g = grad[i];
        if (wd != 0) g += wd * p[i];
        if (buf) {
            T b = first ? g : mom * buf[i] + keep * g;
            buf[i] = b;
            g = nesterov ? g + mom * b : b;
        }
        p[i] -= lr * g;
    }
}

__device__ float sqrt_t(float x) { return sqrtf(x); }
__device__ double sqrt_t(double x) { return sqrt(x); }

// h: lr, beta1, beta2, eps, weight_decay, then the step number t >= 1 as
// t >> 16 and t & 0xffff (optim/adam.c, KILN__HYPER_STEP_SLOTS): read here,
// not passed, so that a captured CUDA graph's launch serves every step
template <typename T>
__global__ void adam_k(T *p, const T *grad, T *m, T *v, T *vmax, int64_t n, const float *h, bool decoupled) {
    double lr = h[0], b1d = h[1], b2d = h[2], wdd = h[4], step = (double)h[5] * 65536.0 + (double)h[6];
    const T decay = (T)(decoupled ? 1.0 - lr * wdd : 1.0), wd = (T)(decoupled ? 0.0 : wdd);
    const T b1 = (T)b1d, b2 = (T)b2d, one_b1 = (T)(1.0 - b1d), one_b2 = (T)(1.0 - b2d);
    const T neg_step = (T)(-(lr / (1.0 - pow(b1d, step)))), bc2s = (T)sqrt(1.0 - pow(b2d, step));
    const T eps = (T)(double)h[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T pi = p[i] * decay, g = grad[i];
        if (wd != 0) g += wd * pi;
        T mi = m[i] * b1 + g * one_b1;
        T vi = v[i] * b2 + one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            vi = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = vi;
        }
        T denom = sqrt_t(vi) / bc2s + eps;
        p[i] = pi + neg_step * mi / denom;
    }
}

// h: lr, beta1, beta2, weight_decay (optim/lion.c); sign(NaN) = 0
template <typename T>
__global__ void lion_k(T *p, const T *grad, T *m, int64_t n, const float *h) {
    const T neg_lr = (T)(-(double)h[0]), b1 = (T)h[1], b2 = (T)h[2], one_b1 = (T)(1.0 - (double)h[1]),
            one_b2 = (T)(1.0 - (double)h[2]), decay = (T)(1.0 - (double)h[0] * (double)h[3]);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        T pi = p[i] * decay, g = grad[i], mi = m[i];
        T c = mi * b1 + g * one_b1;
        T sgn = (T)((c > 0) - (c < 0));
        p[i] = pi + neg_lr * sgn;
        m[i] = mi * b2 + g * one_b2;
    }
}

// ---- 8-bit steps (optim/opt8bit.c, backends/cpu/optim_8bit.c): one block
// of THREADS (= 256, the quantization block) per block of elements; the
// state dequantized as map[code] * absmax, updated as the f32 step
// (skipping non-finite gradients), requantized: absmax the block's max |x|,
// code = #{k < 255 : x / absmax >= (map[k] + map[k+1]) * 0.5} (the CPU's
// table coder; the Vulkan shaders' opt_q8.glsl). Codes are bytes, element
// i's at byte i of the I32 leaf.

enum { OPT8_ADAM = 0, OPT8_LION, OPT8_SGD };

__global__ void opt8_k(int kind, float *p, const float *grad, unsigned char *q0, float *a0, unsigned char *q1, float *a1,
                       const float *maps, const float *h, int64_t n, bool flag_a, bool flag_b) {
    __shared__ float map[512], thr[512], red[2][THREADS];
    int l = threadIdx.x;
    q8_load_maps(maps, map, thr);
    int64_t nb = (n + 255) / 256;
    for (int64_t b = blockIdx.x; b < nb; b += gridDim.x) {
        int64_t i = b * 256 + l;
        bool live = i < n;
        float s0 = 0, s1 = 0;
        if (live) {
            s0 = map[q0[i]] * a0[b];
            if (kind == OPT8_ADAM) s1 = map[256 + q1[i]] * a1[b];
            float g = grad[i];
            if (isfinite(g)) {
                if (kind == OPT8_ADAM) {
                    // the step number after the hyperparameters, as adam_k's
                    double lr = h[0], b1d = h[1], b2d = h[2], wdd = h[4], step = (double)h[5] * 65536.0 + (double)h[6];
                    bool decoupled = flag_a;
                    const float decay = (float)(decoupled ? 1.0 - lr * wdd : 1.0), wd = (float)(decoupled ? 0.0 : wdd);
                    const float b1 = (float)b1d, b2 = (float)b2d, one_b1 = (float)(1.0 - b1d), one_b2 = (float)(1.0 - b2d);
                    const float neg_step = (float)(-(lr / (1.0 - pow(b1d, step)))), bc2s = (float)sqrt(1.0 - pow(b2d, step));
                    const float eps = h[3];
                    float pi = p[i] * decay;
                    if (wd != 0.0f) g += wd * pi;
                    s0 = s0 * b1 + g * one_b1;
                    s1 = s1 * b2 + one_b2 * g * g;
                    float denom = sqrtf(s1) / bc2s + eps;
                    p[i] = pi + neg_step * s0 / denom;
                } else if (kind == OPT8_LION) {
                    const float neg_lr = (float)(-(double)h[0]), b1 = h[1], b2 = h[2], one_b1 = (float)(1.0 - (double)h[1]),
                                one_b2 = (float)(1.0 - (double)h[2]), decay = (float)(1.0 - (double)h[0] * (double)h[3]);
                    float pi = p[i] * decay;
                    float c = s0 * b1 + g * one_b1;
                    float sgn = (float)((c > 0) - (c < 0));
                    p[i] = pi + neg_lr * sgn;
                    s0 = s0 * b2 + g * one_b2;
                } else {
                    const float lr = h[0], mom = h[1], keep = (float)(1.0 - (double)h[2]), wd = h[3];
                    bool nesterov = flag_a, first = flag_b;
                    if (wd != 0) g += wd * p[i];
                    float bi = first ? g : mom * s0 + keep * g;
                    s0 = bi;
                    g = nesterov ? g + mom * bi : bi;
                    p[i] -= lr * g;
                }
            }
        }
        float am0, am1;
        q8_block_absmax2(red, s0, s1, &am0, &am1);
        if (live) {
            q0[i] = (unsigned char)code_of(thr, am0 == 0.0f ? 0.0f : s0 / am0);
            if (kind == OPT8_ADAM) q1[i] = (unsigned char)code_of(thr + 256, am1 == 0.0f ? 0.0f : s1 / am1);
        }
        if (l == 0) {
            a0[b] = am0;
            if (kind == OPT8_ADAM) a1[b] = am1;
        }
        __syncthreads(); // red is reused by the next block
    }
}

unsigned opt8_blocks(int64_t n) {
    int64_t nb = (n + 255) / 256;
    return (unsigned)(nb < 1 ? 1 : nb > 65535 * 8 ? 65535 * 8 : nb);
}

} // namespace

extern "C" {

int kiln__cu_adam8(void *stream, float *p, const float *grad, void *mq, float *ma, void *vq, float *va, const float *maps,
                   int64_t n, const float *h, int decoupled) {
    opt8_k<<<opt8_blocks(n), THREADS, 0, (cudaStream_t)stream>>>(OPT8_ADAM, p, grad, (unsigned char *)mq, ma,
                                                                 (unsigned char *)vq, va, maps, h, n, decoupled, false);
    return (int)cudaGetLastError();
}

int kiln__cu_lion8(void *stream, float *p, const float *grad, void *mq, float *ma, const float *maps, int64_t n,
                   const float *h) {
    opt8_k<<<opt8_blocks(n), THREADS, 0, (cudaStream_t)stream>>>(OPT8_LION, p, grad, (unsigned char *)mq, ma, NULL, NULL,
                                                                 maps, h, n, false, false);
    return (int)cudaGetLastError();
}

int kiln__cu_sgd8(void *stream, float *p, const float *grad, void *bq, float *ba, const float *maps, int64_t n,
                  const float *h, int nesterov, int first) {
    opt8_k<<<opt8_blocks(n), THREADS, 0, (cudaStream_t)stream>>>(OPT8_SGD, p, grad, (unsigned char *)bq, ba, NULL, NULL,
                                                                 maps, h, n, nesterov, first);
    return (int)cudaGetLastError();
}

int kiln__cu_sgd(void *stream, int f64, void *p, const void *grad, void *buf, int64_t n, const float *h, int nesterov,
                 int first) {
    cudaStream_t st = (cudaStream_t)stream;
    if (f64)
        sgd_k<<<blocks_for(n), THREADS, 0, st>>>((double *)p, (const double *)grad, (double *)buf, n, h, nesterov, first);
    else
        sgd_k<<<blocks_for(n), THREADS, 0, st>>>((float *)p, (const float *)grad, (float *)buf, n, h, nesterov, first);
    return (int)cudaGetLastError();
}

int kiln__cu_adam(void *stream, int f64, void *p, const void *grad, void *m, void *v, void *vmax, int64_t n,
                  const float *h, int decoupled) {
    cudaStream_t st = (cudaStream_t)stream;
    if (f64)
        adam_k<<<blocks_for(n), THREADS, 0, st>>>((double *)p, (const double *)grad, (double *)m, (double *)v,
                                                  (double *)vmax, n, h, decoupled);
    else
        adam_k<<<blocks_for(n), THREADS, 0, st>>>((float *)p, (const float *)grad, (float *)m, (float *)v,
                                                  (float *)vmax, n, h, decoupled);
    return (int)cudaGetLastError();
}

int kiln__cu_lion(void *stream, int f64, void *p, const void *grad, void *m, int64_t n, const float *h) {
    cudaStream_t st = (cudaStream_t)stream;
    if (f64) lion_k<<<blocks_for(n), THREADS, 0, st>>>((double *)p, (const double *)grad, (double *)m, n, h);
    else lion_k<<<blocks_for(n), THREADS, 0, st>>>((float *)p, (const float *)grad, (float *)m, n, h);
    return (int)cudaGetLastError();
}

} // extern "C"
