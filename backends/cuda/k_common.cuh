// k_common.cuh — what the CUDA kernel files share: launch sizes, the
// walk of a strided operand, and loads/stores of each dtype that round as
// kiln's CPU does (core/dtype.c). Included inside each file's anonymous
// namespace.
#ifndef KILN_K_COMMON_CUH
#define KILN_K_COMMON_CUH

const int THREADS = 256;

// Blocks for n threads' worth of a grid-stride loop (capped: the loop covers the rest).
unsigned blocks_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    return (unsigned)(b < 1 ? 1 : b > 65535 * 8 ? 65535 * 8 : b);
}

__device__ int64_t walk_off(const cu_walk &w, int k, int64_t i) {
    int64_t off = 0;
    for (int d = w.nd - 1; d >= 0; d--) {
        int64_t s = w.shape[d];
        off += (i % s) * w.st[k][d];
        i /= s;
    }
    return off;
}

__device__ double load(int dt, const void *p, int64_t i) {
    switch (dt) {
    case CU_F32: return ((const float *)p)[i];
    case CU_F16: return __half2float(((const __half *)p)[i]);
    case CU_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case CU_F64: return ((const double *)p)[i];
    default: return ((const int32_t *)p)[i];
    }
}

// core/dtype.c's set functions: 16-bit types round from the f32 value (f64
// through f32 too, as the CPU's set_f16 / set_bf16);
// i32 saturates, rounds to nearest even, NaN becomes 0.
__device__ void store(int dt, void *p, int64_t i, double v) {
    switch (dt) {
    case CU_F32: ((float *)p)[i] = (float)v; break;
    case CU_F16: ((__half *)p)[i] = __float2half_rn((float)v); break;
    case CU_BF16: ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn((float)v); break;
    case CU_F64: ((double *)p)[i] = v; break;
    default:
        ((int32_t *)p)[i] = v != v ? 0 : v >= 2147483647.0 ? INT32_MAX : v <= -2147483648.0 ? INT32_MIN : __double2int_rn(v);
    }
}

// The sum (or max) of v over the block (blockDim.x == THREADS), in every thread.
__device__ double block_sum(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] += sh[threadIdx.x + h];
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

__device__ double block_max(double v, double *sh) {
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int h = THREADS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.x < h) sh[threadIdx.x] = fmax(sh[threadIdx.x], sh[threadIdx.x + h]);
        __syncthreads();
    }
    double r = sh[0];
    __syncthreads();
    return r;
}

#endif
