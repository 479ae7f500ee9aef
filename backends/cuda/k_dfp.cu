// k_dfp.cu — the DFP matmul on the CUDA backend (launchers in
// cu_kernels.h), the CPU's arithmetic (quant/dfp16.c's quantizer,
// backends/cpu/gemm_dfp.c's scalar reference) so the results are equal bit
// for bit: each operand quantized to 14-bit codes with one exponent chosen
// from its largest magnitude; INT32 sums of code products over chunks of
// 2 cp consecutive k (cp from the operands' bounds: no chunk can wrap),
// each chunk converted to f32 and added in k order, then scaled by 2^ea
// and 2^eb. The exponents and bounds are derived on the device from the
// maxima, so nothing waits for the host. A 16 x 16 tile of outputs per
// block, 32 k at a time through shared memory: simple, not tuned.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

const int DFP_BITS = 14, TILE = 16, TK = 32;

// kiln__dfp_exponent
__device__ int dfp_exponent(uint32_t amax_bits, int bits) {
    int e = (int)((amax_bits >> 23) & 0xffu) - 127 - (bits - 2);
    return e < -127 ? -127 : e > 127 ? 127 : e;
}

// 2^e as f32, exact (kiln__dfp_pow2; 2^-127 is subnormal)
__device__ float pow2f(int e) { return (float)ldexp(1.0, e); }

// kiln__dfp_quantize's bound on |q|: ceil(amax 2^-e), or the limit
__device__ int dfp_qmax(uint32_t amax_bits) {
    int lim = (1 << (DFP_BITS - 1)) - 1;
    float amax = __uint_as_float(amax_bits), cb = ceilf(amax * pow2f(-dfp_exponent(amax_bits, DFP_BITS)));
    return cb == cb && cb < (float)lim ? (int)cb : lim;
}

// kiln__gemm_dfp_chunk_pairs
__device__ int64_t chunk_pairs(int amax, int bmax) {
    int64_t ab = (int64_t)(amax < 0 ? -amax : amax) * (int64_t)(bmax < 0 ? -bmax : bmax);
    if (ab == 0) return (int64_t)1 << 40;
    int64_t cp = (int64_t)2147483647 / (2 * ab);
    return cp < 1 ? 1 : cp;
}

__global__ void amax_k(const float *x, int64_t n, uint32_t *amax) {
    __shared__ uint32_t sh[THREADS];
    uint32_t m = 0; // integer max of |x| bits: NaN above inf
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint32_t u = __float_as_uint(x[i]) & 0x7fffffffu;
        m = u > m ? u : m;
    }
    sh[threadIdx.x] = m;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h && sh[threadIdx.x + h] > sh[threadIdx.x]) sh[threadIdx.x] = sh[threadIdx.x + h];
        __syncthreads();
    }
    if (threadIdx.x == 0) atomicMax(amax, sh[0]);
}

// quant/dfp16.c's round_scalar, nearest even
__global__ void round_k(const float *x, int64_t n, const uint32_t *amax, int16_t *q) {
    float scale = pow2f(-dfp_exponent(*amax, DFP_BITS)), hi = (float)((1 << (DFP_BITS - 1)) - 1);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        float v = x[i] * scale;
        if (v != v) v = 0.0f;
        float r = rintf(v);
        r = r > hi ? hi : r < -hi ? -hi : r;
        q[i] = (int16_t)r;
    }
}

// Code (p, j) of B: stored [k, n] or [n, k], or a tap of the image's columns.
__device__ int16_t b_code(const int16_t *b, int tb, const cu_conv *g, int64_t n, int64_t k, int64_t p, int64_t j) {
    if (!g) return tb ? b[j * k + p] : b[p * n + j];
    int64_t r = tb ? j : p, col = tb ? p : j; // cols (r = c kh kw, col = n oh ow)
    int64_t kj = r % g->kw, t = r / g->kw, ki = t % g->kh, ci = t / g->kh;
    int64_t oj = col % g->ow, u = col / g->ow, oi = u % g->oh, nb = u / g->oh;
    if (g->flip) { // the data gradient's taps (cu_conv.flip), the image [c, n, h, w]
        int64_t ii = oi * g->sh + g->ph - ki * g->dh, jj = oj * g->sw + g->pw - kj * g->dw;
        if (ii < 0 || ii >= g->h || jj < 0 || jj >= g->w) return 0;
        return b[((ci * g->n + nb) * g->h + ii) * g->w + jj];
    }
    int64_t ii = oi * g->sh - g->ph + ki * g->dh, jj = oj * g->sw - g->pw + kj * g->dw;
    if (ii < 0 || ii >= g->h || jj < 0 || jj >= g->w) return 0;
    return b[((nb * g->c + ci) * g->h + ii) * g->w + jj];
}

__global__ void dfp_gemm_k(int64_t m, int64_t n, int64_t k, const int16_t *a, int ta, const int16_t *b, int tb,
                           cu_conv img, int has_img, const uint32_t *amax, float *c, int acc) {
    __shared__ int16_t as[TILE][TK + 2], bs[TK][TILE + 1];
    const cu_conv *g = has_img ? &img : NULL;
    uint32_t ab = amax[0], bb = amax[1];
    int ea = dfp_exponent(ab, DFP_BITS), eb = dfp_exponent(bb, DFP_BITS);
    const int64_t chunk = 2 * chunk_pairs(dfp_qmax(ab), dfp_qmax(bb));
    const float sa = pow2f(ea), sb = pow2f(eb);
    int64_t tm = (m + TILE - 1) / TILE, tn = (n + TILE - 1) / TILE;
    int tx = threadIdx.x % TILE, ty = threadIdx.x / TILE; // blockDim.x == TILE * TILE
    for (int64_t tile = blockIdx.x; tile < tm * tn; tile += gridDim.x) {
        int64_t i = tile / tn * TILE + ty, j = tile % tn * TILE + tx;
        uint32_t s = 0; // the chunk's INT32 sum (wrapping as the CPU's, only past the bounds)
        float f = 0.0f;
        int64_t left = chunk;
        for (int64_t p0 = 0; p0 < k; p0 += TK) {
            // load A [TILE rows, TK k] and B [TK k, TILE cols]: TILE*TILE threads, 2 each
            for (int e = threadIdx.x; e < TILE * TK; e += TILE * TILE) {
                int r = e / TK, q = e % TK;
                int64_t ai = tile / tn * TILE + r, ap = p0 + q;
                as[r][q] = ai < m && ap < k ? (ta ? a[ap * m + ai] : a[ai * k + ap]) : (int16_t)0;
                int bq = e / TILE, bc = e % TILE;
                int64_t bp = p0 + bq, bj = tile % tn * TILE + bc;
                bs[bq][bc] = bp < k && bj < n ? b_code(b, tb, g, n, k, bp, bj) : (int16_t)0;
            }
            __syncthreads();
            int64_t steps = k - p0 < TK ? k - p0 : TK;
            for (int q = 0; q < steps; q++) {
                s += (uint32_t)((int32_t)as[ty][q] * (int32_t)bs[q][tx]);
                if (--left == 0) {
                    f += (float)(int32_t)s;
                    s = 0, left = chunk;
                }
            }
            __syncthreads();
        }
        if (left != chunk) f += (float)(int32_t)s; // the last, partial chunk
        if (i < m && j < n) c[i * n + j] = acc ? c[i * n + j] + f * sa * sb : f * sa * sb; // acc: the gradient it adds into
    }
}

} // namespace

extern "C" {

int kiln__cu_dfp_quantize(void *stream, const float *x, int64_t n, int16_t *q, uint32_t *amax) {
    cudaStream_t st = (cudaStream_t)stream;
    int e = (int)cudaMemsetAsync(amax, 0, sizeof *amax, st);
    if (e) return e;
    amax_k<<<blocks_for(n), THREADS, 0, st>>>(x, n, amax);
    if ((e = (int)cudaGetLastError())) return e;
    round_k<<<blocks_for(n), THREADS, 0, st>>>(x, n, amax, q);
    return (int)cudaGetLastError();
}

int kiln__cu_dfp_matmul(void *stream, int64_t m, int64_t n, int64_t k, const int16_t *a, int ta, const int16_t *b,
                        int tb, const cu_conv *img, const uint32_t *amax, float *c, int acc) {
    int64_t tiles = ((m + TILE - 1) / TILE) * ((n + TILE - 1) / TILE);
    unsigned grid = (unsigned)(tiles < 1 ? 1 : tiles > 65535 * 8 ? 65535 * 8 : tiles);
    cu_conv g = img ? *img : cu_conv{};
    dfp_gemm_k<<<grid, TILE * TILE, 0, (cudaStream_t)stream>>>(m, n, k, a, ta, b, tb, g, img != NULL, amax, c, acc);
    return (int)cudaGetLastError();
}

} // extern "C"
