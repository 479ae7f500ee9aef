// k_optim.cu — the CUDA backend's fused optimizer steps, f32, in place,
// one thread per element: SGD (momentum, Nesterov), Adam / AdamW (AMSGrad)
// and Lion, written as backends/cpu/optim.c's f32 loops, operation for
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

// h: lr, momentum, dampening, weight_decay (optim/sgd.c)
__global__ void sgd_k(float *p, const float *grad, float *buf, int64_t n, const float *h, bool nesterov, bool first) {
    const float lr = h[0], mom = h[1], keep = (float)(1.0 - (double)h[2]), wd = h[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float g = grad[i];
        if (wd != 0) g += wd * p[i];
        if (buf) {
            float b = first ? g : mom * buf[i] + keep * g;
            buf[i] = b;
            g = nesterov ? g + mom * b : b;
        }
        p[i] -= lr * g;
    }
}

// h: lr, beta1, beta2, eps, weight_decay (optim/adam.c); step >= 1
__global__ void adam_k(float *p, const float *grad, float *m, float *v, float *vmax, int64_t n, const float *h,
                       bool decoupled, double step) {
    double lr = h[0], b1d = h[1], b2d = h[2], wdd = h[4];
    const float decay = (float)(decoupled ? 1.0 - lr * wdd : 1.0), wd = (float)(decoupled ? 0.0 : wdd);
    const float b1 = (float)b1d, b2 = (float)b2d, one_b1 = (float)(1.0 - b1d), one_b2 = (float)(1.0 - b2d);
    const float neg_step = (float)(-(lr / (1.0 - pow(b1d, step)))), bc2s = (float)sqrt(1.0 - pow(b2d, step));
    const float eps = (float)(double)h[3];
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float pi = p[i] * decay, g = grad[i];
        if (wd != 0) g += wd * pi;
        float mi = m[i] * b1 + g * one_b1;
        float vi = v[i] * b2 + one_b2 * g * g;
        m[i] = mi;
        v[i] = vi;
        if (vmax) {
            vi = vmax[i] > vi ? vmax[i] : vi;
            vmax[i] = vi;
        }
        float denom = sqrtf(vi) / bc2s + eps;
        p[i] = pi + neg_step * mi / denom;
    }
}

// h: lr, beta1, beta2, weight_decay (optim/lion.c); sign(NaN) = 0
__global__ void lion_k(float *p, const float *grad, float *m, int64_t n, const float *h) {
    const float neg_lr = (float)(-(double)h[0]), b1 = h[1], b2 = h[2], one_b1 = (float)(1.0 - (double)h[1]),
                one_b2 = (float)(1.0 - (double)h[2]), decay = (float)(1.0 - (double)h[0] * (double)h[3]);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float pi = p[i] * decay, g = grad[i], mi = m[i];
        float c = mi * b1 + g * one_b1;
        float sgn = (float)((c > 0) - (c < 0));
        p[i] = pi + neg_lr * sgn;
        m[i] = mi * b2 + g * one_b2;
    }
}

} // namespace

extern "C" {

int kiln__cu_sgd(void *stream, float *p, const float *grad, float *buf, int64_t n, const float *h, int nesterov,
                 int first) {
    sgd_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(p, grad, buf, n, h, nesterov, first);
    return (int)cudaGetLastError();
}

int kiln__cu_adam(void *stream, float *p, const float *grad, float *m, float *v, float *vmax, int64_t n, const float *h,
                  int decoupled, int64_t step) {
    adam_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(p, grad, m, v, vmax, n, h, decoupled, (double)step);
    return (int)cudaGetLastError();
}

int kiln__cu_lion(void *stream, float *p, const float *grad, float *m, int64_t n, const float *h) {
    lion_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(p, grad, m, n, h);
    return (int)cudaGetLastError();
}

} // extern "C"
