// k_qmv_32.cu — QMATMUL's few-row products (m <= CU_QMV_MAX_M) for ggml's
// blocks of 32 (Q4_1, Q5_0, Q5_1, IQ4_NL) as integer dot products, equal
// to the CPU's batch-1 path bit for bit (backends/cpu/qmatmul_ggml.h,
// kiln__qmm_dot_ggml_ref):
//
//   - x is quantized once per product to the weight's partner as the CPU
//     does: Q8_1 for Q4_1 / Q5_1 (codes, f16 d, f16 s = sum(q) d), Q8_0
//     for Q5_0 / IQ4_NL (k_qmv.cu's kiln__cu_quantize_x32);
//   - a block's isum (its codes' dot with x) is exact by __dp4a; its term
//     is (d dx) isum, plus m s for Q8_1, f32 operations in that order,
//     never fused (-fmad=false);
//   - while whole groups of 8 blocks last, block i's term goes into lane
//     i % 8; the lanes are summed ((l0 + l4) + (l2 + l6)) + ((l1 + l5) +
//     (l3 + l7)), and the blocks left over are added to that in order.
//
// The block's shape is k_qmv_ints.cuh's: a thread decodes a block of each
// step of 16 against every row of x, and thread xr of a row folds the
// terms in order as above. Q5_0's q = u - 16 takes off 16 sum(x).
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "../../quant/ggml_decode.h"

namespace {

#include "k_common.cuh"
#include "k_qmv_ints.cuh"

// The fifth bits of codes 4i .. 4i + 3 (bits 4i .. of qh) at bit 4 of each byte.
__device__ int fifth(unsigned qh, int i) {
    const unsigned h = qh >> (4 * i);
    return (int)(((h & 1) | (h & 2) << 7 | (h & 4) << 14 | (h & 8) << 21) << 4);
}

// Four nibbles (the low ones of c's bytes) through IQ4_NL's table.
__device__ int iq4_word(int c) {
    int w = 0;
    for (int j = 0; j < 4; j++) w |= (kiln__qd_iq4((c >> (8 * j)) & 0x0f) & 0xff) << (8 * j);
    return w;
}

// The CPU's lane tree, kiln__qmm_ggml_lanes_sum.
__device__ float lanes_sum(const float *l) {
    const float s0 = l[0] + l[4], s1 = l[1] + l[5], s2 = l[2] + l[6], s3 = l[3] + l[7];
    return (s0 + s2) + (s1 + s3);
}

template <int QD>
__global__ void q32_k(const unsigned char *w, const int8_t *xq, const float *dx, const float *sx, float *y, int m,
                      int64_t n, int64_t k) {
    const int BS = QD == KILN_QD_Q4_1 ? 20 : QD == KILN_QD_Q5_0 ? 22 : QD == KILN_QD_Q5_1 ? 24 : 18;
    const int QS = QD == KILN_QD_Q4_1 ? 4 : QD == KILN_QD_Q5_0 ? 6 : QD == KILN_QD_Q5_1 ? 8 : 2; // codes' byte
    const bool MIN = QD == KILN_QD_Q4_1 || QD == KILN_QD_Q5_1, Q5 = QD == KILN_QD_Q5_0 || QD == KILN_QD_Q5_1;
    __shared__ float terms[KMV_ROWS][KMV_MB][KMV_LANES];
    const int t = threadIdx.x, rr = t / KMV_LANES, ln = t % KMV_LANES;
    const int64_t nb = k / 32, grouped = nb / 8 * 8;
    for (int64_t r0 = blockIdx.x * (int64_t)KMV_ROWS; r0 < n; r0 += (int64_t)gridDim.x * KMV_ROWS) {
        const int64_t r = r0 + rr;
        float lane[8] = {0, 0, 0, 0, 0, 0, 0, 0}, sum = 0.0f; // row ln of x's, in thread ln of the row
        for (int64_t c0 = 0; c0 < nb; c0 += KMV_LANES) {
            const int64_t blk = c0 + ln;
            if (r < n && blk < nb) {
                const unsigned char *b = w + (r * nb + blk) * BS;
                const int8_t *xb = xq + 32 * blk;
                Sums s;
#pragma unroll
                for (int xr = 0; xr < KMV_MB; xr++) s.isum[xr] = s.summs[xr] = 0;
                const unsigned qh = Q5 ? (unsigned)ld32(b + QS - 4) : 0;
#pragma unroll
                for (int i = 0; i < 4; i++) { // codes 4i .. (low nibbles) and 16 + 4i .. (high ones)
                    const int q = ld32(b + QS + 4 * i);
                    int lo = q & 0x0f0f0f0f, hi = (q >> 4) & 0x0f0f0f0f;
                    if (Q5) lo |= fifth(qh, i), hi |= fifth(qh, i + 4);
                    if (QD == KILN_QD_IQ4_NL) lo = iq4_word(lo), hi = iq4_word(hi);
                    const int off = QD == KILN_QD_Q5_0 ? 16 : 0;
                    put(s, lo, 4 * i, 1, 0, off, xb, m, k);
                    put(s, hi, 16 + 4 * i, 1, 0, off, xb, m, k);
                }
                const float d = kiln__qd_f16(b), dm = MIN ? kiln__qd_f16(b + 2) : 0.0f;
#pragma unroll
                for (int xr = 0; xr < KMV_MB; xr++) {
                    if (xr >= m) break;
                    const int64_t xi = xr * nb + blk;
                    terms[rr][xr][ln] = MIN ? d * dx[xi] * (float)s.isum[xr] + dm * sx[xi] : d * dx[xi] * (float)s.isum[xr];
                }
            }
            __syncthreads();
            if (r < n && ln < m)
                for (int i = 0; i < KMV_LANES && c0 + i < nb; i++) {
                    const int64_t bi = c0 + i;
                    if (bi == grouped && grouped) sum = lanes_sum(lane);
                    if (bi < grouped) lane[bi % 8] += terms[rr][ln][i];
                    else sum += terms[rr][ln][i];
                }
            __syncthreads(); // the terms are read before the next step's
        }
        if (r < n && ln < m) y[ln * n + r] = grouped && grouped == nb ? lanes_sum(lane) : sum;
    }
}

} // namespace

extern "C" int kiln__cu_qmv_q32(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n,
                                int64_t k, int8_t *xq, float *dx, float *sx) {
    cudaStream_t st = (cudaStream_t)stream;
    const int qd = qt & 0xff;
    const bool q8_1 = qd == KILN_QD_Q4_1 || qd == KILN_QD_Q5_1;
    kiln__cu_quantize_x32(stream, x, xq, dx, q8_1 ? sx : NULL, m * k / 32);
    const int64_t groups = (n + KMV_ROWS - 1) / KMV_ROWS;
    const unsigned grid = (unsigned)(groups < 65535 * 8 ? groups : 65535 * 8);
    const unsigned char *wb = (const unsigned char *)w;
    if (qd == KILN_QD_Q4_1) q32_k<KILN_QD_Q4_1><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, sx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q5_0) q32_k<KILN_QD_Q5_0><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, sx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q5_1) q32_k<KILN_QD_Q5_1><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, sx, y, (int)m, n, k);
    else if (qd == KILN_QD_IQ4_NL) q32_k<KILN_QD_IQ4_NL><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, sx, y, (int)m, n, k);
    else return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}
