// k_qmv_ints.cuh — what the few-row integer products of ggml's types
// share (k_qmv_k.cu against Q8_K, k_qmv_32.cu against Q8_0 / Q8_1): the
// block's shape (8 rows of W, 16 threads a row, a thread per block of
// each step of 16), 32-bit loads of W at 2-byte alignment, and the exact
// integer sums of a block's codes against every row of x. Included inside
// each file's anonymous namespace.
#ifndef KILN_K_QMV_INTS_CUH
#define KILN_K_QMV_INTS_CUH

const int KMV_THREADS = 128, KMV_LANES = 16, KMV_ROWS = KMV_THREADS / KMV_LANES, KMV_MB = CU_QMV_MAX_M;

// The 4 bytes at p (2-byte aligned) as an int, little-endian.
__device__ int ld32(const unsigned char *p) {
    const unsigned short *h = (const unsigned short *)p;
    return (int)(h[0] | (unsigned)h[1] << 16);
}

// One block's integer sums against the m rows of x (xb: the block's codes
// in row 0, rows k bytes apart).
struct Sums {
    int isum[KMV_MB], summs[KMV_MB];
};

// Four codes u (a word) at element e, scaled by sc; q = u - off; mn the
// sub-block's min (0: none).
__device__ __forceinline__ void put(Sums &s, int u, int e, int sc, int mn, int off, const int8_t *xb, int m,
                                    int64_t k) {
#pragma unroll
    for (int xr = 0; xr < KMV_MB; xr++) {
        if (xr >= m) break;
        const int xw = *(const int *)(xb + xr * k + e);
        const int sx = mn || off ? __dp4a(0x01010101, xw, 0) : 0;
        s.isum[xr] += sc * (__dp4a(u, xw, 0) - off * sx);
        s.summs[xr] += mn * sx;
    }
}

#endif
