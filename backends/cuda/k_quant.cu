// k_quant.cu — the quantized dtypes on the CUDA backend: element decoding
// of Q8_0, Q4_0, NF4, NF4_DQ, DFP16, GQ<b>_<G> (GPTQ, 2/3/4 bits) and ggml's
// other types (Q4_1 .. IQ4_XS: quant/ggml_decode.h's) blocks (layouts in quant/quant.h and
// quant/dfp.h, formulas of quant/q8_0.c, q4_0.c, nf4.c (NF4_DQ too), dfp16.c, gq.c and gptq.h: the f32
// product of code and scale, so
// dequantize equals the CPU bit for bit), dequantize, get_rows from a
// quantized table, and the quantized matmul y = x . W^T, which sums
// x * w over k in double (x never rounded, as the Vulkan kernels; the
// CPU's batch-1 path rounds x to int8 for Q8_0/Q4_0), or for NF4,
// NF4_DQ and the GQ dtypes with few rows of x a warp per row in f32
// (nf4_mv_k, gq_mv_k); the f16 conversions of the many-row products
// (cu_qgemm.c).
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"
#include "../../quant/ggml_decode.h"

__constant__ float nf4_table[16] = {
    -1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
    -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
    0.24611230194568634f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f,
    0.7229568362236023f, 1.0f};

// NF4_DQ's absmax codes index the signed dynamic map (quant/dynamic_map.h),
// copied here once (kiln__cu_nf4_dq_map) before the first NF4_DQ kernel.
__device__ float dq_map[256];

// The f32 at byte b, at any alignment (little-endian).
__device__ float f32_at(const unsigned char *b) {
    return __uint_as_float((unsigned)b[0] | (unsigned)b[1] << 8 | (unsigned)b[2] << 16 | (unsigned)b[3] << 24);
}

// Element i (from a block boundary at base) of quantized dtype qt.
__device__ float decode(int qt, const unsigned char *base, int64_t i) {
    if (qt & CU_GGML) {
        int k = qt & 0xff, blck = kiln__qd_blck(k);
        return kiln__qd_get(k, base + (i / blck) * kiln__qd_bytes(k), (int)(i % blck));
    }
    if (qt & CU_GQ) { // GPTQ layout (quant/quant.h): f16 scale (bytes), zero byte, chunks of 32 codes
        int bits = (qt >> 8) & 0xf, g = qt & 0xff;
        const unsigned char *blk = base + (i / g) * (3 + g / 32 * 4 * bits);
        float sc = __half2float(__ushort_as_half((unsigned short)(blk[0] | blk[1] << 8)));
        int j = (int)(i % g), z = blk[2];
        const unsigned char *c = blk + 3 + (j / 32) * 4 * bits;
        int k = j % 32, q;
        if (bits == 4) q = k < 16 ? c[k] & 0x0f : c[k - 16] >> 4;
        else {
            q = (c[k % 8] >> (2 * (k / 8))) & 3;
            if (bits == 3) q |= ((c[8 + k / 8] >> (k % 8)) & 1) << 2;
        }
        return sc * (float)(q - z);
    }
    if (qt == CU_Q8_0) { // f16 d, 32 int8
        const unsigned char *blk = base + (i / 32) * 34;
        float d = __half2float(*(const __half *)blk);
        return (float)(signed char)blk[2 + i % 32] * d;
    }
    if (qt == CU_Q4_0) { // f16 d, 16 bytes: elements j (low nibble) and j + 16 (high)
        const unsigned char *blk = base + (i / 32) * 18;
        float d = __half2float(*(const __half *)blk);
        int j = (int)(i % 32), byte = blk[2 + j % 16];
        int nib = j < 16 ? (byte & 0x0f) : (byte >> 4);
        return (float)(nib - 8) * d;
    }
    if (qt == CU_DFP16) { // int16 e, 64 int16 codes: q 2^e, exact (2^e for e in [-127, 127], subnormal too)
        const unsigned char *blk = base + (i / 64) * 130, *c = blk + 2 + 2 * (i % 64);
        int e = (short)(blk[0] | blk[1] << 8), q = (short)(c[0] | c[1] << 8);
        return (float)q * ldexpf(1.0f, e);
    }
    if (qt == CU_NF4_DQ) { // f32 offset, f32 absmax2, 256 absmax codes, 8192 bytes of NF4 codes
        const unsigned char *blk = base + (i / 16384) * 8456;
        int j = (int)(i % 16384), byte = blk[264 + j / 2];
        // quant/nf4.c: map[code] * absmax2 + offset, two f32 roundings (-fmad=false: no fma)
        float a = dq_map[blk[8 + j / 64]] * f32_at(blk + 4);
        a = a + f32_at(blk);
        return nf4_table[j % 2 == 0 ? byte >> 4 : byte & 0x0f] * a;
    }
    // NF4: f32 absmax, 32 bytes: element 2j high nibble of byte j, 2j + 1 low
    const unsigned char *blk = base + (i / 64) * 36;
    float a = *(const float *)blk;
    int j = (int)(i % 64), byte = blk[4 + j / 2];
    return nf4_table[j % 2 == 0 ? byte >> 4 : byte & 0x0f] * a;
}

__global__ void dequant_k(int qt, const unsigned char *q, float *y, int64_t n) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = decode(qt, q, i);
}

// The same from a view: row r's blocks start at byte walk_off(w, 0, r).
__global__ void dequant_rows_k(int qt, const unsigned char *q, float *y, int64_t n, int64_t cols, cu_walk w) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = decode(qt, q + walk_off(w, 0, i / cols), i % cols);
}

// y [n, d] = rows idx of table [v, d] (contiguous; a zero row for an index outside [0, v))
__global__ void qrows_k(int qt, const unsigned char *table, int64_t v, int64_t d, const int32_t *idx, int64_t n,
                        float *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * d; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i / d, j = i % d, row = idx[p];
        y[i] = row >= 0 && row < v ? decode(qt, table, row * d + j) : 0.0f;
    }
}

// f16 of a finite v, raising *big where v is beyond f16's range (65504):
// the many-row product is then redone in f32 (qmatmul_k's flag).
__device__ __half to_h16(float v, unsigned *big) {
    __half h = __float2half_rn(v);
    if (isinf(__half2float(h)) && isfinite(v)) atomicMax(big, 1u);
    return h;
}

// y[i] = f16 of element i0 + i of W (the many-row product's tile of W).
__global__ void dequant_h16_k(int qt, const unsigned char *q, int64_t i0, __half *y, int64_t n, unsigned *big) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = to_h16(decode(qt, q, i0 + i), big);
}

__global__ void f32_h16_k(const float *x, __half *y, int64_t n, unsigned *big) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
        y[i] = to_h16(x[i], big);
}

// y [m, n] = x [m, k] . W^T, W [n, k] quantized: one thread per output;
// with only non-NULL, nothing unless *only is set.
__global__ void qmatmul_k(int qt, const float *x, const unsigned char *w, float *y, int64_t m, int64_t n, int64_t k,
                          const unsigned *only) {
    if (only && !*only) return;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < m * n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / n, c = e % n;
        const float *xr = x + r * k;
        double s = 0;
        for (int64_t j = 0; j < k; j++) s += (double)xr[j] * decode(qt, w, c * k + j);
        y[e] = (float)s;
    }
}

// NF4 / NF4_DQ's few-row products (m <= CU_QMV_MAX_M): a warp per row of W,
// lane l taking its blocks of 64 l, l + 32, ... (W's bytes read once, a
// block's 32 code bytes as 8 words, x's 64 as 16 float4), each block's sum
// in the CPU reference's order (kiln__qmm_dot_nf4_ref: x[2j] t[hi] + x[2j +
// 1] t[lo], then times absmax) added to the lane's f32 partial; the 32
// partials of a row summed in lane order through shared memory. The CPU's
// SIMD kernels sum in other orders: f32 rounding apart, not bit for bit.
const int NF4_THREADS = 128, NF4_ROWS = NF4_THREADS / 32;

// The few-row kernels' end for a block of NF4_ROWS warps, a row of W each:
// lane ln's partials acc of row r summed in lane order through part into y.
__device__ void rows_sum(float (*part)[CU_QMV_MAX_M][32], const float *acc, int rr, int ln, int m, int64_t r, int64_t n,
                         float *y) {
#pragma unroll
    for (int xr = 0; xr < CU_QMV_MAX_M; xr++)
        if (xr < m) part[rr][xr][ln] = acc[xr];
    __syncthreads();
    if (r < n && ln < m) {
        float s = 0.0f;
        for (int l = 0; l < 32; l++) s += part[rr][ln][l];
        y[ln * n + r] = s;
    }
    __syncthreads(); // the partials are read before the next rows'
}

template <bool DQ> __global__ void nf4_mv_k(const float *x, const unsigned char *w, float *y, int m, int64_t n, int64_t k) {
    __shared__ float part[NF4_ROWS][CU_QMV_MAX_M][32], tab[16]; // the table: lanes index it apart
    const int t = threadIdx.x, rr = t / 32, ln = t % 32;
    if (t < 16) tab[t] = nf4_table[t];
    __syncthreads();
    const int64_t nb = k / 64;
    for (int64_t r0 = blockIdx.x * (int64_t)NF4_ROWS; r0 < n; r0 += (int64_t)gridDim.x * NF4_ROWS) {
        const int64_t r = r0 + rr;
        float acc[CU_QMV_MAX_M];
#pragma unroll
        for (int xr = 0; xr < CU_QMV_MAX_M; xr++) acc[xr] = 0.0f;
        for (int64_t b = ln; r < n && b < nb; b += 32) {
            const int64_t gi = r * nb + b; // the block's index from W's first byte
            const unsigned char *codes;
            float a;
            if (DQ) { // super-blocks of 256 blocks: f32 offset, f32 absmax2, 256 absmax codes, the codes
                const unsigned char *sb = w + (gi / 256) * 8456;
                a = dq_map[sb[8 + gi % 256]] * *(const float *)(sb + 4);
                a = a + *(const float *)sb;
                codes = sb + 264 + 32 * (gi % 256);
            } else {
                a = *(const float *)(w + gi * 36);
                codes = w + gi * 36 + 4;
            }
            unsigned cw[8];
#pragma unroll
            for (int i = 0; i < 8; i++) cw[i] = ((const unsigned *)codes)[i];
#pragma unroll
            for (int xr = 0; xr < CU_QMV_MAX_M; xr++) {
                if (xr >= m) break;
                const float4 *xv = (const float4 *)(x + xr * k + 64 * b);
                float s = 0.0f;
#pragma unroll
                for (int i = 0; i < 8; i++) // bytes 4i .. 4i + 3: elements 8i .. 8i + 7
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const float4 v = xv[2 * i + h];
                        const unsigned c0 = (cw[i] >> (16 * h)) & 0xff, c1 = (cw[i] >> (16 * h + 8)) & 0xff;
                        s += v.x * tab[c0 >> 4] + v.y * tab[c0 & 0x0f];
                        s += v.z * tab[c1 >> 4] + v.w * tab[c1 & 0x0f];
                    }
                acc[xr] += s * a;
            }
        }
        rows_sum(part, acc, rr, ln, m, r, n, y);
    }
}

// GQ<bits>_<g>'s few-row products (m <= CU_QMV_MAX_M): as nf4_mv_k, a warp
// per row of W, lane l taking its groups l, l + 32, ... (W's bytes read
// once, by bytes: the blocks are 3 + g bits / 8 bytes, odd), each group's
// sum of (q - zero) x in f32 in element order times its f16 scale added
// to the lane's partial: the f32 product with the dequantized W up to
// rounding (the CPU's batch-1 path rounds x to int8; the devices do not).
template <int BITS>
__global__ void gq_mv_k(int g, const float *x, const unsigned char *w, float *y, int m, int64_t n, int64_t k) {
    __shared__ float part[NF4_ROWS][CU_QMV_MAX_M][32];
    const int t = threadIdx.x, rr = t / 32, ln = t % 32, bb = 3 + g / 32 * 4 * BITS;
    const int64_t nb = k / g;
    for (int64_t r0 = blockIdx.x * (int64_t)NF4_ROWS; r0 < n; r0 += (int64_t)gridDim.x * NF4_ROWS) {
        const int64_t r = r0 + rr;
        float acc[CU_QMV_MAX_M];
#pragma unroll
        for (int xr = 0; xr < CU_QMV_MAX_M; xr++) acc[xr] = 0.0f;
        for (int64_t b = ln; r < n && b < nb; b += 32) {
            const unsigned char *blk = w + (r * nb + b) * bb;
            const float sc = __half2float(__ushort_as_half((unsigned short)(blk[0] | blk[1] << 8)));
            const int z = blk[2];
            float s[CU_QMV_MAX_M];
#pragma unroll
            for (int xr = 0; xr < CU_QMV_MAX_M; xr++) s[xr] = 0.0f;
            for (int c = 0; c < g / 32; c++) {
                unsigned char cc[4 * BITS]; // the chunk's 32 codes (quant/quant.h's GPTQ layout)
#pragma unroll
                for (int i = 0; i < 4 * BITS; i++) cc[i] = blk[3 + c * 4 * BITS + i];
                const float *xc = x + b * g + c * 32;
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    int q;
                    if (BITS == 4) q = j < 16 ? cc[j] & 0x0f : cc[j - 16] >> 4;
                    else {
                        q = (cc[j % 8] >> (2 * (j / 8))) & 3;
                        if (BITS == 3) q |= ((cc[8 + j / 8] >> (j % 8)) & 1) << 2;
                    }
                    const float d = (float)(q - z);
#pragma unroll
                    for (int xr = 0; xr < CU_QMV_MAX_M; xr++)
                        if (xr < m) s[xr] += d * xc[xr * k + j];
                }
            }
#pragma unroll
            for (int xr = 0; xr < CU_QMV_MAX_M; xr++) acc[xr] += s[xr] * sc;
        }
        rows_sum(part, acc, rr, ln, m, r, n, y);
    }
}

} // namespace

extern "C" {

int kiln__cu_dequantize(void *stream, int qt, const void *q, float *y, int64_t n) {
    dequant_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(qt, (const unsigned char *)q, y, n);
    return (int)cudaGetLastError();
}

int kiln__cu_dequantize_rows(void *stream, int qt, const void *q, float *y, int64_t n, int64_t cols, const cu_walk *w) {
    dequant_rows_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(qt, (const unsigned char *)q, y, n, cols, *w);
    return (int)cudaGetLastError();
}

int kiln__cu_qget_rows(void *stream, int qt, const void *table, int64_t v, int64_t d, const int32_t *idx, int64_t n,
                       float *y) {
    qrows_k<<<blocks_for(n * d), THREADS, 0, (cudaStream_t)stream>>>(qt, (const unsigned char *)table, v, d, idx, n, y);
    return (int)cudaGetLastError();
}

int kiln__cu_nf4_dq_map(void *stream, const float *map) {
    cudaError_t e = cudaMemcpyToSymbolAsync(dq_map, map, 256 * sizeof(float), 0, cudaMemcpyHostToDevice,
                                            (cudaStream_t)stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize((cudaStream_t)stream); // map is the caller's
    return (int)e;
}

int kiln__cu_qmatmul(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k) {
    cudaStream_t st = (cudaStream_t)stream;
    const unsigned char *wb = (const unsigned char *)w;
    const int64_t groups = (n + NF4_ROWS - 1) / NF4_ROWS;
    const unsigned grid = (unsigned)(groups < 65535 * 8 ? groups : 65535 * 8);
    const bool mv = m <= CU_QMV_MAX_M && !((uintptr_t)x & 15) && !((uintptr_t)w & 3); // float4 x, word W loads
    if (mv && qt == CU_NF4) nf4_mv_k<false><<<grid, NF4_THREADS, 0, st>>>(x, wb, y, (int)m, n, k);
    else if (mv && qt == CU_NF4_DQ) nf4_mv_k<true><<<grid, NF4_THREADS, 0, st>>>(x, wb, y, (int)m, n, k);
    else if (m <= CU_QMV_MAX_M && (qt & CU_GQ)) {
        const int bits = (qt >> 8) & 0xf, g = qt & 0xff;
        if (bits == 4) gq_mv_k<4><<<grid, NF4_THREADS, 0, st>>>(g, x, wb, y, (int)m, n, k);
        else if (bits == 3) gq_mv_k<3><<<grid, NF4_THREADS, 0, st>>>(g, x, wb, y, (int)m, n, k);
        else gq_mv_k<2><<<grid, NF4_THREADS, 0, st>>>(g, x, wb, y, (int)m, n, k);
    }
    else qmatmul_k<<<blocks_for(m * n), THREADS, 0, st>>>(qt, x, wb, y, m, n, k, NULL);
    return (int)cudaGetLastError();
}

int kiln__cu_dequantize_h16(void *stream, int qt, const void *q, int64_t i0, void *y, int64_t n, unsigned *big) {
    dequant_h16_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(qt, (const unsigned char *)q, i0, (__half *)y, n,
                                                                       big);
    return (int)cudaGetLastError();
}

int kiln__cu_f32_h16(void *stream, const float *x, void *y, int64_t n, unsigned *big) {
    f32_h16_k<<<blocks_for(n), THREADS, 0, (cudaStream_t)stream>>>(x, (__half *)y, n, big);
    return (int)cudaGetLastError();
}

int kiln__cu_qmatmul_if(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n, int64_t k,
                        const unsigned *flag) {
    // at most 1024 blocks (the loop covers the rest): unless the flag is set each returns at once
    const unsigned grid = blocks_for(m * n) < 1024 ? blocks_for(m * n) : 1024;
    qmatmul_k<<<grid, THREADS, 0, (cudaStream_t)stream>>>(qt, x, (const unsigned char *)w, y, m, n, k, flag);
    return (int)cudaGetLastError();
}

} // extern "C"
