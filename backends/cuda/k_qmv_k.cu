// k_qmv_k.cu — QMATMUL's few-row products (m <= CU_QMV_MAX_M) for ggml's K
// types and IQ4_XS (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS) as integer dot
// products against Q8_K activations, equal to the CPU's batch-1 path bit
// for bit (backends/cpu/qmatmul_ggml.h, kiln__qmm_dot_ggml_ref):
//
//   - x is quantized once per product to Q8_K as kiln__quantize_q8_K_ref
//     does (per 256: the x of largest magnitude max, q = nearest of
//     (-127 / max) x capped at 127, d = 1 / (-127 / max));
//   - a block's isum (sc times the codes' dot with x per sub-block) and
//     summs (mn times x's sum per sub-block) are exact int32 by __dp4a in
//     any order; its term is (dx d) isum + (dx dm) summs (dm = -dmin, 0
//     for the types without a min), f32 operations in that order, never
//     fused (-fmad=false);
//   - the terms are added to one f32 sum per row, block after block.
//
// A block of 128 threads takes 8 rows of W, 16 threads a row: thread l of
// a row decodes blocks c0 + l of each step of 16 (every byte once, 32-bit
// loads: blocks are 2-byte aligned) against every row of x, its terms go
// through shared memory, and thread xr of the row adds them in order into
// row xr of y's sum. Codes are 4 to an int32 as signed bytes; Q6_K's and
// Q3_K's q = u - off take off sc off sum(x) from the unsigned u's product.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

#include "../../quant/ggml_decode.h"

namespace {

#include "k_common.cuh"
#include "k_qmv_ints.cuh"

// x [nblk 256] to Q8_K's codes xq and scales dx (kiln__quantize_q8_K_ref).
__global__ void quantize_q8k_k(const float *x, int8_t *xq, float *dx, int64_t nblk) {
    for (int64_t b = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; b < nblk; b += (int64_t)gridDim.x * blockDim.x) {
        const float *v = x + 256 * b;
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < 256; j++)
            if (fabsf(v[j]) > amax) amax = fabsf(v[j]), max = v[j];
        if (!amax) {
            dx[b] = 0.0f;
            for (int j = 0; j < 256; j++) xq[256 * b + j] = 0;
            continue;
        }
        const float iscale = -127.0f / max;
        for (int j = 0; j < 256; j++) {
            const int q = __float2int_rn(iscale * v[j]); // ties to even, as the reference's magic number
            xq[256 * b + j] = (int8_t)(q < 127 ? q : 127);
        }
        dx[b] = 1 / iscale;
    }
}

// Q4_K / Q5_K (qs at 16 or 48, Q5_K's fifth bits in qh at 16): four runs of
// 64, the low nibbles of 32 bytes then their high ones, 6-bit scales and
// mins (kiln__scale_min_k4).
template <bool Q5> __device__ void ints_k45(Sums &s, const unsigned char *b, const int8_t *xb, int m, int64_t k) {
    const unsigned char *sc = b + 4, *qs = b + (Q5 ? 48 : 16);
    int qh[8];
#pragma unroll
    for (int i = 0; i < 8; i++) qh[i] = Q5 ? ld32(b + 16 + 4 * i) : 0;
    for (int j = 0; j < 4; j++) {
        int scl[2], mnl[2];
        for (int h = 0; h < 2; h++) {
            const int js = 2 * j + h;
            scl[h] = js < 4 ? sc[js] & 63 : (sc[js + 4] & 0x0f) | (sc[js - 4] >> 6) << 4;
            mnl[h] = js < 4 ? sc[js + 4] & 63 : (sc[js + 4] >> 4) | (sc[js] >> 6) << 4;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = ld32(qs + 32 * j + 4 * i);
            int lo = q & 0x0f0f0f0f, hi = (q >> 4) & 0x0f0f0f0f;
            if (Q5) {
                lo |= ((qh[i] >> (2 * j)) & 0x01010101) << 4;
                hi |= ((qh[i] >> (2 * j + 1)) & 0x01010101) << 4;
            }
            put(s, lo, 64 * j + 4 * i, scl[0], mnl[0], 0, xb, m, k);
            put(s, hi, 64 * j + 32 + 4 * i, scl[1], mnl[1], 0, xb, m, k);
        }
    }
}

// Q2_K, Q3_K and Q6_K: halves of 128 whose 32 code bytes l hold elements
// l + 32 r (r < 4); 16 sub-blocks of 16 (element e in sub-block e / 16).
__device__ void ints_q2(Sums &s, const unsigned char *b, const int8_t *xb, int m, int64_t k) {
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = ld32(b + 16 + 32 * h + 4 * i);
            for (int r = 0; r < 4; r++) {
                const int e = 128 * h + 32 * r + 4 * i, sb = b[e / 16];
                put(s, (q >> (2 * r)) & 0x03030303, e, sb & 0x0f, sb >> 4, 0, xb, m, k);
            }
        }
}

// Q3_K: u = the two bits + 4 where hmask's bit e / 32 of byte e % 32 is
// set, q = u - 4; scales 6 bits less 32.
__device__ void ints_q3(Sums &s, const unsigned char *b, const int8_t *xb, int m, int64_t k) {
    const unsigned char *sc = b + 96;
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int q = ld32(b + 32 + 32 * h + 4 * i), hm = ld32(b + 4 * i);
            for (int r = 0; r < 4; r++) {
                const int e = 128 * h + 32 * r + 4 * i, sb = e / 16;
                const int lo = sb < 8 ? sc[sb] & 0x0f : sc[sb - 8] >> 4, hi = (sc[8 + sb % 4] >> (2 * (sb / 4))) & 3;
                const int u = ((q >> (2 * r)) & 0x03030303) | ((hm >> (4 * h + r)) & 0x01010101) << 2;
                put(s, u, e, (lo | hi << 4) - 32, 0, 4, xb, m, k);
            }
        }
}

// Q6_K: u = ql's nibble r / 2 of byte l + 32 (r & 1) | qh's bits 2r, 2r + 1
// of byte l, shifted to 4-5; q = u - 32; int8 scales.
__device__ void ints_q6(Sums &s, const unsigned char *b, const int8_t *xb, int m, int64_t k) {
    const signed char *sc = (const signed char *)b + 192;
    for (int h = 0; h < 2; h++)
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int l0 = ld32(b + 64 * h + 4 * i), l1 = ld32(b + 64 * h + 32 + 4 * i), hb = ld32(b + 128 + 32 * h + 4 * i);
            const int u[4] = {(l0 & 0x0f0f0f0f) | ((hb << 4) & 0x30303030), (l1 & 0x0f0f0f0f) | ((hb << 2) & 0x30303030),
                              ((l0 >> 4) & 0x0f0f0f0f) | (hb & 0x30303030),
                              ((l1 >> 4) & 0x0f0f0f0f) | ((hb >> 2) & 0x30303030)};
            for (int r = 0; r < 4; r++) {
                const int e = 128 * h + 32 * r + 4 * i;
                put(s, u[r], e, sc[e / 16], 0, 32, xb, m, k);
            }
        }
}

// IQ4_XS: sub-block s's 16 bytes, low nibbles elements 0-15, high 16-31,
// through the table; scale ls - 32 (low 4 bits in scales_l, high 2 in
// scales_h).
__device__ int iq4_word(int c) {
    int w = 0;
    for (int j = 0; j < 4; j++) w |= (kiln__qd_iq4((c >> (8 * j)) & 0x0f) & 0xff) << (8 * j);
    return w;
}
__device__ void ints_iq4xs(Sums &s, const unsigned char *b, const int8_t *xb, int m, int64_t k) {
    const int sh = b[2] | b[3] << 8;
    for (int sb = 0; sb < 8; sb++) {
        const int ls = ((b[4 + sb / 2] >> (4 * (sb % 2))) & 0x0f) | ((sh >> (2 * sb)) & 3) << 4;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const int q = ld32(b + 8 + 16 * sb + 4 * i);
            put(s, iq4_word(q), 32 * sb + 4 * i, ls - 32, 0, 0, xb, m, k);
            put(s, iq4_word(q >> 4), 32 * sb + 16 + 4 * i, ls - 32, 0, 0, xb, m, k);
        }
    }
}

template <int QD>
__global__ void kmv_k(const unsigned char *w, const int8_t *xq, const float *dx, float *y, int m, int64_t n,
                      int64_t k) {
    const int BS = QD == KILN_QD_Q2_K   ? 84
                   : QD == KILN_QD_Q3_K ? 110
                   : QD == KILN_QD_Q4_K ? 144
                   : QD == KILN_QD_Q5_K ? 176
                   : QD == KILN_QD_Q6_K ? 210
                                        : 136;
    const bool MIN = QD == KILN_QD_Q2_K || QD == KILN_QD_Q4_K || QD == KILN_QD_Q5_K;
    const int DOFF = QD == KILN_QD_Q2_K ? 80 : QD == KILN_QD_Q3_K ? 108 : QD == KILN_QD_Q6_K ? 208 : 0; // d's byte
    __shared__ float terms[KMV_ROWS][KMV_MB][KMV_LANES];
    const int t = threadIdx.x, rr = t / KMV_LANES, ln = t % KMV_LANES;
    const int64_t nb = k / 256;
    for (int64_t r0 = blockIdx.x * (int64_t)KMV_ROWS; r0 < n; r0 += (int64_t)gridDim.x * KMV_ROWS) {
        const int64_t r = r0 + rr;
        float sum = 0.0f; // row ln of x's, in thread ln of the row
        for (int64_t c0 = 0; c0 < nb; c0 += KMV_LANES) {
            const int64_t blk = c0 + ln;
            if (r < n && blk < nb) {
                const unsigned char *b = w + (r * nb + blk) * BS;
                const int8_t *xb = xq + 256 * blk;
                Sums s;
#pragma unroll
                for (int xr = 0; xr < KMV_MB; xr++) s.isum[xr] = s.summs[xr] = 0;
                if (QD == KILN_QD_Q4_K) ints_k45<false>(s, b, xb, m, k);
                else if (QD == KILN_QD_Q5_K) ints_k45<true>(s, b, xb, m, k);
                else if (QD == KILN_QD_Q2_K) ints_q2(s, b, xb, m, k);
                else if (QD == KILN_QD_Q3_K) ints_q3(s, b, xb, m, k);
                else if (QD == KILN_QD_Q6_K) ints_q6(s, b, xb, m, k);
                else ints_iq4xs(s, b, xb, m, k);
                const float d = kiln__qd_f16(b + DOFF), dm = MIN ? -kiln__qd_f16(b + DOFF + 2) : 0.0f;
#pragma unroll
                for (int xr = 0; xr < KMV_MB; xr++) {
                    if (xr >= m) break;
                    const float a = dx[xr * nb + blk];
                    terms[rr][xr][ln] = a * d * (float)s.isum[xr] + (MIN ? a * dm * (float)s.summs[xr] : 0.0f);
                }
            }
            __syncthreads();
            if (r < n && ln < m)
                for (int i = 0; i < KMV_LANES && c0 + i < nb; i++) sum += terms[rr][ln][i];
            __syncthreads(); // the terms are read before the next step's
        }
        if (r < n && ln < m) y[ln * n + r] = sum;
    }
}

} // namespace

extern "C" int kiln__cu_qmv_q8k(void *stream, int qt, const float *x, const void *w, float *y, int64_t m, int64_t n,
                                int64_t k, int8_t *xq, float *dx) {
    cudaStream_t st = (cudaStream_t)stream;
    quantize_q8k_k<<<blocks_for(m * k / 256), THREADS, 0, st>>>(x, xq, dx, m * k / 256);
    const int64_t groups = (n + KMV_ROWS - 1) / KMV_ROWS;
    const unsigned grid = (unsigned)(groups < 65535 * 8 ? groups : 65535 * 8);
    const unsigned char *wb = (const unsigned char *)w;
    const int qd = qt & 0xff;
    if (qd == KILN_QD_Q2_K) kmv_k<KILN_QD_Q2_K><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q3_K) kmv_k<KILN_QD_Q3_K><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q4_K) kmv_k<KILN_QD_Q4_K><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q5_K) kmv_k<KILN_QD_Q5_K><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else if (qd == KILN_QD_Q6_K) kmv_k<KILN_QD_Q6_K><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else if (qd == KILN_QD_IQ4_XS) kmv_k<KILN_QD_IQ4_XS><<<grid, KMV_THREADS, 0, st>>>(wb, xq, dx, y, (int)m, n, k);
    else return (int)cudaErrorInvalidValue;
    return (int)cudaGetLastError();
}
