// k_flash.cuh — what the FlashAttention-2 style kernels share
// (k_attention_flash.cu, k_attention_cached.cu): the tile kernels' block
// size, the staging of rows into shared memory, the scores of a tile and
// a tile's online-softmax step, the tile shapes and the merge of key splits. Templates on the element type
// (float or double). Included inside each file's anonymous namespace,
// after k_common.cuh. Only __syncthreads and shared memory (no warp
// shuffles): the host emulator (emu/fake) runs these kernels as they are.
#ifndef KILN_K_FLASH_CUH
#define KILN_K_FLASH_CUH

const int NT = 128; // threads of a tile kernel: 4 warps

// Rows [0, n) of a tile of `rows` rows from src (row length len, stride len)
// into dst[rows][W], zeros past n rows and len columns.
template <int ROWS, int W, int PAD, typename T>
__device__ void stage(T (*dst)[W + PAD], const T *src, int n, int len) {
    for (int x = threadIdx.x; x < ROWS * W; x += NT) {
        int r = x / W, e = x % W;
        dst[r][e] = r < n && e < len ? src[(int64_t)r * len + e] : (T)0;
    }
}

// s[m] = row tid / BC + m * (NT / BC) of a . b over e < n: a thread's
// SE scores share one key row b, read once for all of them.
template <int SE, int BC, int W, typename T>
__device__ void dots(T (&s)[SE], const T (*a)[W], const T *b, int n) {
#pragma unroll
    for (int m = 0; m < SE; m++) s[m] = 0;
    for (int e = 0; e < n; e++) {
        T x = b[e];
#pragma unroll
        for (int m = 0; m < SE; m++) s[m] += a[threadIdx.x / BC + m * (NT / BC)][e] * x;
    }
}

// A thread's output entry e of a tile HD wide (HD divides NT, or NT
// divides HD): up to NT columns a thread keeps column tid % HD of rows
// tid / HD + e (NT / HD); past NT, columns tid + (e % (HD / NT)) NT of
// row e / (HD / NT).
template <int HD> __device__ int out_row(int e) {
    return (int)threadIdx.x / HD + e / (HD > NT ? HD / NT : 1) * (HD < NT ? NT / HD : 1);
}
template <int HD> __device__ int out_col(int e) {
    return (int)threadIdx.x % HD + e % (HD > NT ? HD / NT : 1) * NT;
}

// One key tile's step of the online softmax of BR rows, their scaled
// scores (-inf where masked) in ps: the running max m_s (c_s: the
// rescaling of what came before) and sum l_s, ps turned into
// probabilities, and acc (entry e: row out_row(e), column out_col(e))
// rescaled and added p v over the nc keys staged in vs.
template <int BR, int BC, int HD, int OE, typename T>
__device__ void softmax_tile(T (*ps)[BC + 1], T *m_s, T *l_s, T *c_s, const T (*vs)[HD], int nc, T (&acc)[OE]) {
    const int tid = threadIdx.x, sc = tid % BC;
    __syncthreads();
    if (tid < BR) {
        T mo = m_s[tid], mx = mo;
        for (int c = 0; c < BC; c++) mx = fmax(mx, ps[tid][c]);
        c_s[tid] = mx == (T)-INFINITY ? (T)1 : exp(mo - mx);
        m_s[tid] = mx;
    }
    __syncthreads();
#pragma unroll
    for (int m = 0; m < BR * BC / NT; m++) {
        int r = tid / BC + m * (NT / BC);
        T s = ps[r][sc];
        ps[r][sc] = s == (T)-INFINITY ? (T)0 : exp(s - m_s[r]);
    }
#pragma unroll
    for (int e = 0; e < OE; e++) acc[e] *= c_s[out_row<HD>(e)];
    __syncthreads();
    if (tid < BR) {
        T s = 0;
        for (int c = 0; c < BC; c++) s += ps[tid][c];
        l_s[tid] = l_s[tid] * c_s[tid] + s;
    }
    for (int c = 0; c < nc; c++) {
#pragma unroll
        for (int e = 0; e < OE; e++) acc[e] += ps[out_row<HD>(e)][c] * vs[c][out_col<HD>(e)];
    }
    __syncthreads(); // vs, ps are rewritten next tile
}

// The nsplit partial (O, L) of each of `rows` rows merged by their
// logsumexps (+inf: a split that saw no key, weight 0); lse may be NULL.
// A row no split saw gets O = empty and L = +inf.
template <typename T>
__global__ void flash_merge_k(int64_t rows, int dv, int nsplit, const T *po, const T *pl, T *o, T *lse, T empty) {
    int64_t n = rows * (dv + 1);
    for (int64_t x = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; x < n; x += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = x / (dv + 1);
        int col = (int)(x % (dv + 1));
        T mx = -INFINITY, lt = 0, a = 0;
        for (int s = 0; s < nsplit; s++)
            if (pl[s * rows + r] != (T)INFINITY) mx = fmax(mx, pl[s * rows + r]);
        for (int s = 0; s < nsplit; s++) {
            T l = pl[s * rows + r];
            if (l == (T)INFINITY) continue;
            T w = exp(l - mx);
            lt += w;
            if (col < dv) a += w * po[(s * rows + r) * dv + col];
        }
        if (col < dv) o[r * dv + col] = lt > 0 ? a / lt : empty;
        else if (lse) lse[r] = lt > 0 ? mx + log(lt) : (T)INFINITY;
    }
}

const int DECODE_ROWS = 8, DECODE_KEYS = 32, TARGET_BLOCKS = 256, MAX_SPLIT = 32;

// A tile shape: head sizes up to HD, BR query rows, BC keys (NT % BC == 0,
// NT % HD == 0 or HD % NT == 0, BR * BC % NT == 0): 32 x 32 up to D = 64
// (41 KiB of shared memory in dk/dv), 16 x 16 up to 128; decoding takes 8
// rows (T = 1: the group's heads) against 32 keys. Up to 256 (cached f32
// only, the training kernels stop at 128): 16 x 8, 8 x 16 decoding, to
// stay under 48 KiB of static shared memory (34 and 41 KiB).
struct tiles64 {
    static const int HD = 64, BR = 32, BC = 32;
};
struct tiles128 {
    static const int HD = 128, BR = 16, BC = 16;
};
struct decode64 {
    static const int HD = 64, BR = DECODE_ROWS, BC = DECODE_KEYS;
};
struct decode128 {
    static const int HD = 128, BR = DECODE_ROWS, BC = DECODE_KEYS;
};
struct tiles256 {
    static const int HD = 256, BR = 16, BC = 8;
};
struct decode256 {
    static const int HD = 256, BR = DECODE_ROWS, BC = 16;
};

// The splits of the keys for `blocks` tiles of a kernel whose rows see at
// most `keys` keys: enough blocks to fill the device, at least 8 key tiles
// of bc each.
int key_splits(int64_t blocks, int64_t keys, int bc) {
    int64_t n = (TARGET_BLOCKS + blocks - 1) / blocks, most = keys / (8 * bc);
    n = n < most ? n : most;
    return (int)(n < 1 ? 1 : n > MAX_SPLIT ? MAX_SPLIT : n);
}

#endif
