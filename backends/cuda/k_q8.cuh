// k_q8.cuh — the 8-bit optimizer states' block coder shared by k_optim.cu
// and k_optim_lowrank.cu (quant/dynamic_map.h): a state is map[code] *
// absmax per block of 256; requantizing takes the block's max |x| as its
// absmax and codes x / absmax as the count of the f32 midpoint thresholds
// (map[k] + map[k+1]) * 0.5 at or below it (the CPU's table coder, the
// Vulkan shaders' opt_q8.glsl). Included inside each file's anonymous
// namespace, after k_common.cuh.
#ifndef KILN_K_Q8_CUH
#define KILN_K_Q8_CUH

// #{k < 255 : x >= thr[k]}, thr one map's thresholds (sorted ascending).
__device__ int code_of(const float *thr, float x) {
    int lo = 0, hi = 255;
    while (lo < hi) {
        int mid = (lo + hi) >> 1;
        if (x >= thr[mid]) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

// The two maps (signed, then unsigned: maps[512]) and their thresholds
// into shared memory; every thread of a THREADS (= 256) block calls it.
__device__ void q8_load_maps(const float *maps, float *map, float *thr) {
    int l = threadIdx.x;
    map[l] = maps[l];
    map[256 + l] = maps[256 + l];
    __syncthreads();
    for (int k = l; k < 512; k += THREADS) thr[k] = (k & 255) == 255 ? INFINITY : (map[k] + map[k + 1]) * 0.5f;
    __syncthreads();
}


// The block's max |a| and max |b| (two states' new absmax) through red, a
// shared [2][THREADS]; every thread of the block calls it and gets both.
__device__ void q8_block_absmax2(float (*red)[THREADS], float a, float b, float *am0, float *am1) {
    int l = threadIdx.x;
    red[0][l] = fabsf(a);
    red[1][l] = fabsf(b);
    __syncthreads();
    for (int half = THREADS / 2; half > 0; half >>= 1) {
        if (l < half) {
            red[0][l] = fmaxf(red[0][l], red[0][l + half]);
            red[1][l] = fmaxf(red[1][l], red[1][l + half]);
        }
        __syncthreads();
    }
    *am0 = red[0][0], *am1 = red[1][0];
}

#endif
