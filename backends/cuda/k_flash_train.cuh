// k_flash_train.cuh — what the training attention's two kernel files
// share (k_attention_flash.cu: f32 FMA; k_attention_flash_tc.cu: tensor
// cores): the geometry of a call, which keys a query sees, delta =
// rowsum(dO * O) and the grid size. Included inside each file's anonymous
// namespace, after k_common.cuh.
#ifndef KILN_K_FLASH_TRAIN_CUH
#define KILN_K_FLASH_TRAIN_CUH

struct fgeom {
    int64_t b, hk, group, t, s, nq; // nq = group * T query rows per kv head
    int d, dv;
    bool causal;
    float scale;
};

// Keys [0, kend) are visible to the query at position i of its head.
__device__ int64_t kend(const fgeom &g, int64_t i) {
    if (!g.causal) return g.s;
    int64_t n = i + g.s - g.t + 1;
    return n < 0 ? 0 : n > g.s ? g.s : n;
}

// The keys any of rows [x0, x0 + nr) of a kv head's group sees: kend of
// the largest position (T - 1 when the tile crosses into another head).
__device__ int64_t tile_kend(const fgeom &g, int64_t x0, int nr) {
    int64_t a = x0 % g.t, z = a + nr - 1;
    return kend(g, z >= g.t ? g.t - 1 : z);
}

fgeom make_fgeom(const int64_t *shape, int causal, double scale) {
    fgeom g;
    g.b = shape[0], g.hk = shape[2], g.group = shape[1] / shape[2], g.t = shape[3], g.s = shape[4];
    g.nq = g.group * g.t;
    g.d = (int)shape[5], g.dv = (int)shape[6];
    g.causal = causal != 0;
    g.scale = (float)scale;
    return g;
}

// di[row] = sum_e dO * O (in double, as k_attention.cu's).
__global__ void flash_delta_k(int64_t rows, int dv, const float *o, const float *dout, double *di) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        double s = 0;
        for (int e = 0; e < dv; e++) s += (double)o[r * dv + e] * dout[r * dv + e];
        di[r] = s;
    }
}

unsigned tile_blocks(int64_t n) { return (unsigned)(n < 1 ? 1 : n > 65535 * 8 ? 65535 * 8 : n); }

#endif
