// k_nn.cu — the CUDA backend's row kernels: softmax and log_softmax (with
// the causal mask) and their backward, layer_norm and rms_norm and their
// fused backward, batch_norm (training) and its backward (a block per
// channel), cross_entropy and its backward, and the index ops
// get_rows, scatter_add_rows and one_hot, rope and dropout (launchers in
// cu_kernels.h). f32 or f64 rows (each kernel a template on T, the
// launcher picks it from dt), contiguous; one block of THREADS threads per
// row, statistics summed in double (the CPU's f64 formulas,
// backends/cpu/nn*.c), each result rounded once to T.
#include "cu_kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math.h>

namespace {

#include "k_common.cuh"

unsigned row_blocks(int64_t rows) { return (unsigned)(rows < 1 ? 1 : rows > 65535 * 8 ? 65535 * 8 : rows); }

// Visible columns of row r: causal row i of the last two dims (mrows x n)
// sees columns j <= i + (n - mrows) (backends/cpu/nn.c).
__device__ int64_t visible(int64_t r, int64_t n, int64_t mrows, bool causal) {
    int64_t nv = causal ? r % mrows + n - mrows + 1 : n;
    return nv < 0 ? 0 : nv > n ? n : nv;
}

template <typename T>
__global__ void softmax_k(int64_t rows, int64_t n, int64_t mrows, bool causal, bool log_out, const void *xv, void *yv) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * n;
        T *yr = y + r * n;
        int64_t nv = visible(r, n, mrows, causal);
        double m = -INFINITY, s = 0;
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) m = fmax(m, (double)xr[j]);
        m = block_max(m, sh);
        for (int64_t j = threadIdx.x; j < nv; j += blockDim.x) s += exp((double)xr[j] - m);
        s = block_sum(s, sh);
        double lse = m + log(s);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            if (j >= nv) yr[j] = log_out ? (T)-INFINITY : (T)0;
            else yr[j] = (T)(log_out ? (double)xr[j] - lse : exp((double)xr[j] - m) / s);
        }
    }
}

// softmax gx = y (gy - sum(gy y)), 0 where masked; log_softmax gx = gy - exp(y) sum(gy), the sum over the
// whole row and gy itself where masked (y = -inf there: the rule of a log_softmax of an input of -inf).
template <typename T>
__global__ void softmax_grad_k(int64_t rows, int64_t n, int64_t mrows, bool causal, bool log_in, const void *yv,
                               const void *gyv, void *gxv) {
    __shared__ double sh[THREADS];
    const T *y = (const T *)yv, *gy = (const T *)gyv;
    T *gx = (T *)gxv;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *yr = y + r * n, *gr = gy + r * n;
        T *g = gx + r * n;
        int64_t nv = visible(r, n, mrows, causal);
        double s = 0;
        for (int64_t j = threadIdx.x; j < (log_in ? n : nv); j += blockDim.x)
            s += log_in ? (double)gr[j] : (double)gr[j] * yr[j];
        s = block_sum(s, sh);
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
            if (j >= nv) g[j] = log_in ? gr[j] : (T)0;
            else g[j] = (T)(log_in ? gr[j] - exp((double)yr[j]) * s : yr[j] * (gr[j] - s));
        }
    }
}

// mean (0 for rms) and rstd = 1/sqrt(var + eps) of one row, in every thread.
template <typename T> __device__ void row_stats(const T *xr, int64_t c, double eps, bool rms, double *sh, double *mean, double *rstd) {
    double m = 0, v = 0;
    if (!rms) {
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m += xr[j];
        m = block_sum(m, sh) / (double)c;
    }
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) v += ((double)xr[j] - m) * ((double)xr[j] - m);
    v = block_sum(v, sh);
    *mean = m;
    *rstd = 1.0 / sqrt(v / (double)c + eps);
}

template <typename T>
__global__ void norm_k(int64_t rows, int64_t c, double eps, bool rms, const void *xv, const void *wv, const void *bv,
                       void *yv) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv, *w = (const T *)wv, *b = (const T *)bv;
    T *y = (T *)yv;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * c;
        double mean, rstd;
        row_stats(xr, c, eps, rms, sh, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
            double v = ((double)xr[j] - mean) * rstd;
            if (w) v *= w[j];
            if (b) v += b[j];
            y[r * c + j] = (T)v;
        }
    }
}

// dx per row; each row's mean and rstd saved to stats[2r], stats[2r+1] for dw/db.
template <typename T>
__global__ void norm_grad_dx_k(int64_t rows, int64_t c, double eps, bool rms, const void *xv, const void *wv,
                               const void *gyv, void *dxv, double *stats) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv, *w = (const T *)wv, *gy = (const T *)gyv;
    T *dx = (T *)dxv;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        const T *xr = x + r * c, *gr = gy + r * c;
        double mean, rstd, sg = 0, sgx = 0;
        row_stats(xr, c, eps, rms, sh, &mean, &rstd);
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
            double xh = ((double)xr[j] - mean) * rstd, g = w ? (double)gr[j] * w[j] : (double)gr[j];
            sg += g;
            sgx += g * xh;
        }
        sg = block_sum(sg, sh);
        sgx = block_sum(sgx, sh);
        double ca = rms ? 0.0 : sg / (double)c, cb = sgx / (double)c;
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
            double xh = ((double)xr[j] - mean) * rstd, g = w ? (double)gr[j] * w[j] : (double)gr[j];
            dx[r * c + j] = (T)(rstd * (g - ca - xh * cb));
        }
        if (threadIdx.x == 0) stats[2 * r] = mean, stats[2 * r + 1] = rstd;
    }
}

// batch norm over x [N, C, S] (training mode): one block per channel,
// its N * S values at (i * C + ch) * S + j; statistics in double, two
// passes (backends/cpu/nn_norm_chan.c's f64 formulas).
template <typename T>
__device__ void chan_stats(const T *x, int64_t n, int64_t c, int64_t s, int64_t ch, double *sh, double *mean, double *var) {
    int64_t m = n * s;
    double a = 0, q = 0;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) a += (double)x[(k / s * c + ch) * s + k % s];
    a = block_sum(a, sh) / (double)m;
    for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
        double d = (double)x[(k / s * c + ch) * s + k % s] - a;
        q += d * d;
    }
    *mean = a;
    *var = block_sum(q, sh) / (double)m;
}

// y = (x - mean) rstd [* w] [+ b]; with rm, rv the running statistics updated as torch (unbiased variance).
template <typename T>
__global__ void bn_k(int64_t n, int64_t c, int64_t s, double eps, double mom, const void *xv, void *rmv, void *rvv,
                     const void *wv, const void *bv, void *yv) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv, *w = (const T *)wv, *b = (const T *)bv;
    T *y = (T *)yv, *rm = (T *)rmv, *rv = (T *)rvv;
    int64_t m = n * s;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mean, var;
        chan_stats(x, n, c, s, ch, sh, &mean, &var);
        double rstd = 1.0 / sqrt(var + eps), wc = w ? (double)w[ch] : 1.0, bc = b ? (double)b[ch] : 0.0;
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
            int64_t at = (k / s * c + ch) * s + k % s;
            y[at] = (T)(((double)x[at] - mean) * rstd * wc + bc);
        }
        if (threadIdx.x == 0 && rm) {
            rm[ch] = (T)((1.0 - mom) * (double)rm[ch] + mom * mean);
            rv[ch] = (T)((1.0 - mom) * (double)rv[ch] + mom * var * (double)m / (double)(m - 1));
        }
    }
}

// dx = w rstd (gy - mean(gy) - xhat mean(gy xhat)) per channel; dw = sum(gy xhat), db = sum(gy) where not NULL.
template <typename T>
__global__ void bn_grad_k(int64_t n, int64_t c, int64_t s, double eps, const void *xv, const void *wv, const void *gyv,
                          void *dxv, void *dwv, void *dbv) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv, *w = (const T *)wv, *gy = (const T *)gyv;
    T *dx = (T *)dxv, *dw = (T *)dwv, *db = (T *)dbv;
    int64_t m = n * s;
    for (int64_t ch = blockIdx.x; ch < c; ch += gridDim.x) {
        double mean, var, sg = 0, sgx = 0;
        chan_stats(x, n, c, s, ch, sh, &mean, &var);
        double rstd = 1.0 / sqrt(var + eps), wc = w ? (double)w[ch] : 1.0;
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
            int64_t at = (k / s * c + ch) * s + k % s;
            sg += (double)gy[at];
            sgx += (double)gy[at] * ((double)x[at] - mean) * rstd;
        }
        sg = block_sum(sg, sh);
        sgx = block_sum(sgx, sh);
        for (int64_t k = threadIdx.x; k < m; k += blockDim.x) {
            int64_t at = (k / s * c + ch) * s + k % s;
            dx[at] = (T)(wc * rstd * ((double)gy[at] - sg / (double)m - ((double)x[at] - mean) * rstd * sgx / (double)m));
        }
        if (threadIdx.x == 0 && dw) dw[ch] = (T)sgx;
        if (threadIdx.x == 0 && db) db[ch] = (T)sg;
    }
}

// dw[j] = sum_r gy xhat, db[j] = sum_r gy: one thread per column, rows in order.
template <typename T>
__global__ void norm_grad_dwb_k(int64_t rows, int64_t c, const void *xv, const void *gyv, const double *stats,
                                void *dwv, void *dbv) {
    const T *x = (const T *)xv, *gy = (const T *)gyv;
    T *dw = (T *)dwv, *db = (T *)dbv;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < c; j += (int64_t)gridDim.x * blockDim.x) {
        double sw = 0, sb = 0;
        for (int64_t r = 0; r < rows; r++) {
            double g = gy[r * c + j];
            sw += g * (((double)x[r * c + j] - stats[2 * r]) * stats[2 * r + 1]);
            sb += g;
        }
        if (dw) dw[j] = (T)sw;
        if (db) db[j] = (T)sb;
    }
}

// log-sum-exp of row xr (c logits), in every thread.
template <typename T> __device__ double row_lse(const T *xr, int64_t c, double *sh) {
    double m = -INFINITY, s = 0;
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) m = fmax(m, (double)xr[j]);
    m = block_max(m, sh);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) s += exp((double)xr[j] - m);
    return m + log(block_sum(s, sh));
}

// A label counts when it is not ignore_index and lies in [0, c) (the CPU
// fails the compute on any other; a kernel cannot, so such a row is left out).
__device__ bool kept(int32_t l, int32_t ignore, int64_t c) { return l != ignore && l >= 0 && l < c; }

// loss[r] = lse - x[label] on kept rows, 0 on the others.
template <typename T>
__global__ void ce_rows_k(int64_t rows, int64_t c, int32_t ignore, const void *xv, const int32_t *labels, double *loss) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv;
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int32_t l = labels[r];
        if (!kept(l, ignore, c)) { // uniform in the block
            if (threadIdx.x == 0) loss[r] = 0;
            continue;
        }
        double lse = row_lse(x + r * c, c, sh);
        if (threadIdx.x == 0) loss[r] = lse - (double)x[r * c + l];
    }
}

// One block: the mean over kept rows (0 when none) into y[0], or, with
// loss NULL, the kept rows' count (1 when none) into cnt[0].
template <typename T>
__global__ void ce_total_k(int64_t rows, int64_t c, int32_t ignore, const int32_t *labels, const double *loss, void *yv,
                           double *cnt) {
    T *y = (T *)yv;
    __shared__ double sh[THREADS];
    double s = 0, k = 0;
    for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
        if (!kept(labels[r], ignore, c)) continue;
        k += 1;
        if (loss) s += loss[r];
    }
    s = block_sum(s, sh);
    k = block_sum(k, sh);
    if (threadIdx.x == 0) {
        if (loss) y[0] = (T)(k > 0 ? s / k : 0.0);
        else cnt[0] = k > 0 ? k : 1;
    }
}

// gx = (softmax(x) - one_hot(label)) gy / count on kept rows, 0 on the others.
template <typename T>
__global__ void ce_grad_k(int64_t rows, int64_t c, int32_t ignore, const void *xv, const int32_t *labels,
                          const void *gyv, const double *cnt, void *gxv) {
    __shared__ double sh[THREADS];
    const T *x = (const T *)xv, *gy = (const T *)gyv;
    T *gx = (T *)gxv;
    double scale = (double)gy[0] / cnt[0];
    for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
        int32_t l = labels[r];
        T *g = gx + r * c;
        if (!kept(l, ignore, c)) {
            for (int64_t j = threadIdx.x; j < c; j += blockDim.x) g[j] = (T)0;
            continue;
        }
        const T *xr = x + r * c;
        double lse = row_lse(xr, c, sh);
        for (int64_t j = threadIdx.x; j < c; j += blockDim.x)
            g[j] = (T)(exp((double)xr[j] - lse) * scale - (j == l ? scale : 0.0));
    }
}

// y[p, j] = table[idx[p], j] (a row of zeros for an index outside [0, v)).
__global__ void get_rows_k(int tt, const void *table, int64_t v, int64_t d, int64_t ts0, int64_t ts1,
                           const int32_t *idx, int64_t n, int yt, void *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n * d; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t p = i / d, j = i % d, row = idx[p];
        store(yt, y, i, row >= 0 && row < v ? load(tt, table, row * ts0 + j * ts1) : 0.0);
    }
}

// y [v, d] = 0, then y[idx[p]] += rows[p]: one thread per column, the
// rows in order (the same sums every run); an index outside [0, v) adds nothing.
template <typename T>
__global__ void scatter_add_rows_k(const void *rowsv, const int32_t *idx, int64_t n, int64_t d, int64_t v, void *yv) {
    const T *rows = (const T *)rowsv;
    T *y = (T *)yv;
    for (int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; j < d; j += (int64_t)gridDim.x * blockDim.x) {
        for (int64_t r = 0; r < v; r++) y[r * d + j] = (T)0;
        for (int64_t p = 0; p < n; p++) {
            int64_t row = idx[p];
            if (row >= 0 && row < v) y[row * d + j] += rows[p * d + j];
        }
    }
}

// y [m, n] one-hot of labels (a row of zeros for a label outside [0, n)).
__global__ void one_hot_k(const int32_t *labels, int64_t m, int64_t n, int yt, void *y) {
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < m * n; i += (int64_t)gridDim.x * blockDim.x)
        store(yt, y, i, labels[i / n] == i % n ? 1.0 : 0.0);
}

// x [rows, d] with rows cycling over t positions: pairs rotated by angle
// pos * theta^(-2i/d) (negated when inverse), NEOX pairs (i, i + d/2) or
// INTERLEAVED (2i, 2i+1); angles, cos and sin in double as the CPU's table.
template <typename T>
__global__ void rope_k(const void *xv, void *yv, int64_t rows, int64_t t, int64_t d, bool interleaved,
                       const int32_t *pos, double theta, double sign) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    int64_t h = d / 2, step = interleaved ? 2 : 1, other = interleaved ? 1 : h;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < rows * h; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / h, i = e % h, p = r % t;
        double ang = (double)(pos ? pos[p] : p) * pow(theta, -2.0 * (double)i / (double)d);
        double cs = cos(ang), sn = sign * sin(ang);
        int64_t ia = r * d + i * step, ib = ia + other;
        double a = x[ia], b = x[ib];
        y[ia] = (T)(a * cs - b * sn);
        y[ib] = (T)(b * cs + a * sn);
    }
}

// core/rng.c's kiln__hash64
__device__ uint64_t hash64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// kept where kiln__uniform01(seed ^ run C, i) >= p (backends/cpu/nn.c);
// run read here, not passed, so that a captured launch reads each run's
template <typename T>
__global__ void dropout_k(const void *xv, void *yv, int64_t n, uint64_t seed, const uint64_t *run, double p) {
    const T *x = (const T *)xv;
    T *y = (T *)yv;
    uint64_t hs = hash64(seed ^ (*run * 0x9e3779b97f4a7c15ull));
    double keep_scale = 1.0 / (1.0 - p);
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        uint64_t h = hash64(hs ^ ((uint64_t)i * 0xd1b54a32d192ed03ull));
        double u = (double)(h >> 11) * (1.0 / 9007199254740992.0);
        y[i] = u >= p ? (T)((double)x[i] * keep_scale) : (T)0;
    }
}

} // namespace

// A launch of KERNEL<float> or KERNEL<double> as dt says.
#define LAUNCH(dt, KERNEL, grid, stream, ...)                                                          \
    do {                                                                                               \
        if ((dt) == CU_F64) KERNEL<double><<<(grid), THREADS, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__); \
        else KERNEL<float><<<(grid), THREADS, 0, (cudaStream_t)(stream)>>>(__VA_ARGS__);                 \
    } while (0)

extern "C" {

int kiln__cu_rope(void *stream, int dt, const void *x, void *y, int64_t rows, int64_t t, int64_t d, int interleaved,
                  const int32_t *pos, double theta, int inverse) {
    LAUNCH(dt, rope_k, blocks_for(rows * (d / 2)), stream, x, y, rows, t, d, interleaved, pos, theta, inverse ? -1.0 : 1.0);
    return (int)cudaGetLastError();
}

int kiln__cu_dropout(void *stream, int dt, const void *x, void *y, int64_t n, uint64_t seed, const uint64_t *run,
                     double p) {
    LAUNCH(dt, dropout_k, blocks_for(n), stream, x, y, n, seed, run, p);
    return (int)cudaGetLastError();
}

int kiln__cu_softmax(void *stream, int dt, int64_t rows, int64_t n, int64_t mrows, int causal, int log_out, const void *x,
                     void *y) {
    LAUNCH(dt, softmax_k, row_blocks(rows), stream, rows, n, mrows, causal, log_out, x, y);
    return (int)cudaGetLastError();
}

int kiln__cu_softmax_grad(void *stream, int dt, int64_t rows, int64_t n, int64_t mrows, int causal, int log_in,
                          const void *y, const void *gy, void *gx) {
    LAUNCH(dt, softmax_grad_k, row_blocks(rows), stream, rows, n, mrows, causal, log_in, y, gy, gx);
    return (int)cudaGetLastError();
}

int kiln__cu_norm(void *stream, int dt, int64_t rows, int64_t c, double eps, int rms, const void *x, const void *w,
                  const void *b, void *y) {
    LAUNCH(dt, norm_k, row_blocks(rows), stream, rows, c, eps, rms, x, w, b, y);
    return (int)cudaGetLastError();
}

int kiln__cu_norm_grad(void *stream, int dt, int64_t rows, int64_t c, double eps, int rms, const void *x, const void *w,
                       const void *gy, void *dx, void *dw, void *db, double *stats) {
    LAUNCH(dt, norm_grad_dx_k, row_blocks(rows), stream, rows, c, eps, rms, x, w, gy, dx, stats);
    int e = (int)cudaGetLastError();
    if (e || (!dw && !db)) return e;
    LAUNCH(dt, norm_grad_dwb_k, blocks_for(c), stream, rows, c, x, gy, stats, dw, db);
    return (int)cudaGetLastError();
}

int kiln__cu_batch_norm(void *stream, int dt, int64_t n, int64_t c, int64_t s, double eps, double mom, const void *x,
                        void *rm, void *rv, const void *w, const void *b, void *y) {
    LAUNCH(dt, bn_k, row_blocks(c), stream, n, c, s, eps, mom, x, rm, rv, w, b, y);
    return (int)cudaGetLastError();
}

int kiln__cu_batch_norm_grad(void *stream, int dt, int64_t n, int64_t c, int64_t s, double eps, const void *x,
                             const void *w, const void *gy, void *dx, void *dw, void *db) {
    LAUNCH(dt, bn_grad_k, row_blocks(c), stream, n, c, s, eps, x, w, gy, dx, dw, db);
    return (int)cudaGetLastError();
}

int kiln__cu_cross_entropy(void *stream, int dt, int64_t rows, int64_t c, int32_t ignore, const void *x,
                           const int32_t *labels, void *y, double *loss) {
    LAUNCH(dt, ce_rows_k, row_blocks(rows), stream, rows, c, ignore, x, labels, loss);
    int e = (int)cudaGetLastError();
    if (e) return e;
    LAUNCH(dt, ce_total_k, 1, stream, rows, c, ignore, labels, loss, y, NULL);
    return (int)cudaGetLastError();
}

int kiln__cu_cross_entropy_grad(void *stream, int dt, int64_t rows, int64_t c, int32_t ignore, const void *x,
                                const int32_t *labels, const void *gy, void *gx, double *cnt) {
    LAUNCH(dt, ce_total_k, 1, stream, rows, c, ignore, labels, NULL, NULL, cnt);
    int e = (int)cudaGetLastError();
    if (e) return e;
    LAUNCH(dt, ce_grad_k, row_blocks(rows), stream, rows, c, ignore, x, labels, gy, cnt, gx);
    return (int)cudaGetLastError();
}

int kiln__cu_get_rows(void *stream, int tt, const void *table, int64_t v, int64_t d, int64_t ts0, int64_t ts1,
                      const int32_t *idx, int64_t n, int yt, void *y) {
    get_rows_k<<<blocks_for(n * d), THREADS, 0, (cudaStream_t)stream>>>(tt, table, v, d, ts0, ts1, idx, n, yt, y);
    return (int)cudaGetLastError();
}

int kiln__cu_scatter_add_rows(void *stream, int dt, const void *rows, const int32_t *idx, int64_t n, int64_t d, int64_t v,
                              void *y) {
    LAUNCH(dt, scatter_add_rows_k, blocks_for(d), stream, rows, idx, n, d, v, y);
    return (int)cudaGetLastError();
}

int kiln__cu_one_hot(void *stream, const int32_t *labels, int64_t m, int64_t n, int yt, void *y) {
    one_hot_k<<<blocks_for(m * n), THREADS, 0, (cudaStream_t)stream>>>(labels, m, n, yt, y);
    return (int)cudaGetLastError();
}

} // extern "C"
