// k_qmv.cu — QMATMUL's few-row products (y [m, n] = x [m, k] . W^T, m <=
// CU_QMV_MAX_M) for Q8_0 and Q4_0 as integer dot products, equal to the
// CPU's batch-1 path bit for bit (backends/cpu/qmatmul.h, qmatmul.c):
//
//   - x is quantized once per product as kiln__qmm_quantize_x does (int8
//     codes per block of 32, the scale amax / 127 rounded to f16);
//   - each row of W keeps the CPU's 16 f32 lanes, one thread each: lane
//     8c + l of Q8_0 takes bytes 4l..4l+3 of the blocks i with i % 2 == c,
//     lane 4c + l of Q4_0 packed bytes 4l..4l+3 (both nibbles) of the
//     blocks i with i % 4 == c; per block one __dp4a sum (exact) and
//     one fma with d_w d_x, block after block, then the lanes added as the
//     CPU's tree (kiln__qmm_q8_lanes_sum / _q4_).
//
// A block of 128 threads takes 8 rows of W (16 threads a row) and every
// row of x. W's 18- and 34-byte blocks are only 2-byte aligned, so the
// rows are staged chunk by chunk into shared memory by 16-byte loads of
// the aligned granules that hold them (each byte read from memory once);
// the lanes then read their 4 bytes there. x's codes (m k bytes) stay in
// the caches, read by every block.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

const int QMV_THREADS = 128, QMV_ROWS = QMV_THREADS / 16, QMV_MB = CU_QMV_MAX_M;
const int CHUNK = 576;                       // a row's bytes staged per step: 16 Q8_0 blocks (544) or 32 Q4_0
const int GRANULES = (CHUNK + 14 + 15) / 16; // 16-byte granules holding them (a chunk starts at an even byte)

// x [nblk 32] to codes xq and scales dx (kiln__qmm_quantize_x, which is
// kiln__quantize_q8_0_ref), and with sx Q8_1's s = f16(sum(q) d) too
// (kiln__quantize_q8_1_ref).
__global__ void quantize_x_k(const float *x, int8_t *xq, float *dx, float *sx, int64_t nblk) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nblk; b += (int64_t)gridDim.x * blockDim.x) {
        const float *v = x + 32 * b;
        float amax = 0.0f;
        for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(v[j]));
        const float d = amax / 127, id = d != 0.0f ? 1.0f / d : 0.0f;
        dx[b] = __half2float(__float2half_rn(d));
        int sum = 0;
        for (int j = 0; j < 32; j++) sum += xq[32 * b + j] = (int8_t)roundf(v[j] * id);
        if (sx) sx[b] = __half2float(__float2half_rn((float)sum * d));
    }
}

// The 4 bytes at even offset o of s (two 16-bit reads).
__device__ int s32(const unsigned char *s, int o) {
    const unsigned short *h = (const unsigned short *)(s + o);
    return (int)(h[0] | (unsigned)h[1] << 16);
}

// Bytes [a, e) of W to s, from the 16-byte granule holding a (at s[0]) on:
// granules inside W's bytes [w0, w1) by one 16-byte load, the others (at
// W's ends) byte by byte, so nothing outside W is read.
__device__ void stage(unsigned char *s, const unsigned char *a, const unsigned char *e, const unsigned char *w0,
                      const unsigned char *w1, int gi) {
    const unsigned char *g = (const unsigned char *)((uintptr_t)a & ~(uintptr_t)15) + 16 * gi;
    if (g >= e) return;
    if (g >= w0 && g + 16 <= w1) {
        *(uint4 *)(s + 16 * gi) = *(const uint4 *)g;
        return;
    }
    for (int j = 0; j < 16; j++)
        if (g + j >= a && g + j < e) s[16 * gi + j] = g[j];
}

// The CPU's lane trees (backends/cpu/qmatmul.h).
__device__ float q8_lanes_sum(const float *a) {
    float h[8], q[4];
    for (int l = 0; l < 8; l++) h[l] = a[l] + a[l + 8];
    for (int j = 0; j < 4; j++) q[j] = h[j] + h[j + 4];
    return (q[0] + q[2]) + (q[1] + q[3]);
}
__device__ float q4_lanes_sum(const float *a) {
    float bs[4];
    for (int b = 0; b < 4; b++) bs[b] = (a[4 * b] + a[4 * b + 2]) + (a[4 * b + 1] + a[4 * b + 3]);
    return (bs[0] + bs[2]) + (bs[1] + bs[3]);
}

template <int Q4>
__global__ void qmv_k(const unsigned char *w, const int8_t *xq, const float *dx, float *y, int m, int64_t n,
                      int64_t k) {
    const int BS = Q4 ? 18 : 34, CB = CHUNK / BS, STEP = Q4 ? 4 : 2;
    __shared__ __align__(16) unsigned char sw[QMV_ROWS][GRANULES * 16];
    __shared__ float lanes[QMV_ROWS][QMV_MB][16];
    const int t = threadIdx.x, rr = t / 16, ln = t % 16;
    const int cls = Q4 ? ln >> 2 : ln >> 3, l = Q4 ? ln & 3 : ln & 7; // the CPU's lane ln: blocks i % STEP == cls
    const int64_t nb = k / 32, rowb = nb * BS;
    const unsigned char *w1 = w + n * rowb;
    for (int64_t r0 = blockIdx.x * (int64_t)QMV_ROWS; r0 < n; r0 += (int64_t)gridDim.x * QMV_ROWS) {
        const int64_t r = r0 + rr;
        float acc[QMV_MB];
        for (int i = 0; i < QMV_MB; i++) acc[i] = 0.0f;
        for (int64_t c0 = 0; c0 < nb; c0 += CB) {
            const int cb = (int)(nb - c0 < CB ? nb - c0 : CB);
            __syncthreads(); // the last chunk's reads are done
            for (int e = t; e < QMV_ROWS * GRANULES; e += QMV_THREADS) {
                const int q = e / GRANULES;
                if (r0 + q >= n) continue;
                const unsigned char *a = w + (r0 + q) * rowb + c0 * BS;
                stage(sw[q], a, a + cb * BS, w, w1, e % GRANULES);
            }
            __syncthreads();
            if (r >= n) continue;
            const unsigned char *s = sw[rr];
            const int base = (int)((uintptr_t)(w + r * rowb + c0 * BS) & 15);
            for (int i = cls; i < cb; i += STEP) {
                const int o = base + i * BS;
                const float wd = __half2float(__ushort_as_half(*(const unsigned short *)(s + o)));
                const int wq = s32(s, o + 2 + 4 * l);
                const int64_t blk = c0 + i;
#pragma unroll // acc in registers
                for (int xr = 0; xr < QMV_MB; xr++) {
                    if (xr >= m) break;
                    const int8_t *xb = xq + xr * k + 32 * blk;
                    int sum;
                    if (Q4) { // (nibble - 8) x: the nibbles' products less 8 sum(x)
                        const int xl = *(const int *)(xb + 4 * l), xh = *(const int *)(xb + 16 + 4 * l);
                        sum = __dp4a(wq & 0x0f0f0f0f, xl, __dp4a((wq >> 4) & 0x0f0f0f0f, xh, 0)) -
                              8 * __dp4a(0x01010101, xl, __dp4a(0x01010101, xh, 0));
                    } else
                        sum = __dp4a(wq, *(const int *)(xb + 4 * l), 0);
                    acc[xr] = fmaf((float)sum, wd * dx[xr * nb + blk], acc[xr]);
                }
            }
        }
#pragma unroll
        for (int xr = 0; xr < QMV_MB; xr++)
            if (xr < m && r < n) lanes[rr][xr][ln] = acc[xr];
        __syncthreads();
        if (r < n && ln < m) y[ln * n + r] = Q4 ? q4_lanes_sum(lanes[rr][ln]) : q8_lanes_sum(lanes[rr][ln]);
    }
}

} // namespace

extern "C" void kiln__cu_quantize_x32(void *stream, const float *x, int8_t *xq, float *dx, float *sx, int64_t nblk) {
    quantize_x_k<<<blocks_for(nblk), THREADS, 0, (cudaStream_t)stream>>>(x, xq, dx, sx, nblk);
}

extern "C" int kiln__cu_qmv_i8(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n,
                               int64_t k, int8_t *xq, float *dx) {
    cudaStream_t st = (cudaStream_t)stream;
    kiln__cu_quantize_x32(st, x, xq, dx, NULL, m * k / 32);
    int64_t groups = (n + QMV_ROWS - 1) / QMV_ROWS;
    unsigned grid = (unsigned)(groups < 65535 * 8 ? groups : 65535 * 8);
    const unsigned char *wb = (const unsigned char *)w;
    if (qt == CU_Q4_0) qmv_k<1><<<grid, QMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else qmv_k<0><<<grid, QMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    return (int)cudaGetLastError();
}
