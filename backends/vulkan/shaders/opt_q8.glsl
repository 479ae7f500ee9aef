// opt_q8.glsl — the block quantization shared by the 8-bit optimizer steps
// (opt_adam8.glsl, opt_lion8.glsl, opt_sgd8.glsl; layout in
// optim/opt8bit.c): one workgroup of 256 invocations per block of 256
// elements, Q8_STATES (1 or 2) states per element. Dequantize is
// s_map[code] * absmax. Requantize gives the CPU's bits
// (quant/dynamic_map.c's table coder): absmax by a shared-memory max
// reduction, then each code as the count of the f32 midpoint thresholds
// (map[k] + map[k+1]) * 0.5 at or below x / absmax (found by bisection over
// the maps held in shared memory), which is the CPU's count. Codes are bytes
// packed four to a uint (little-endian, as the CPU's bytes lie in its I32
// leaf); a block's 64 words belong to it alone. Included after
// opt_exact.glsl; the step shader binds the buffers and calls, in order:
// q8_maps (every invocation, before a barrier), q8_thresholds, then
// q8_requantize with every state's new value, then q8_word for l < 64.
layout(local_size_x = 256) in;
shared float s_map[512], s_thr[512]; // signed map then unsigned map
shared float s_red[Q8_STATES][256];
shared uint s_code[Q8_STATES][256];

uint byte_of(uint w, uint i) { return (w >> (8u * (i & 3u))) & 255u; }

// Invocation l's entries of the two maps (maps leaf [512]).
void q8_maps(uint l, float signed_l, float unsigned_l) {
    s_map[l] = signed_l;
    s_map[256u + l] = unsigned_l;
}

// The midpoint thresholds, once s_map is complete (after a barrier).
void q8_thresholds(uint l) {
    for (uint k = l; k < 512u; k += 256u) {
        precise float th = (s_map[k] + s_map[(k & 255u) == 255u ? k : k + 1u]) * 0.5;
        s_thr[k] = (k & 255u) == 255u ? uintBitsToFloat(0x7f800000u) : th; // unused past 254
    }
}

// #{k < 255 : x >= thr[k]} over one map's thresholds (sorted ascending)
uint code_of(uint base, float x) {
    uint lo = 0u, hi = 255u;
    while (lo < hi) {
        uint mid = (lo + hi) >> 1;
        if (x >= s_thr[base + mid]) lo = mid + 1u;
        else hi = mid;
    }
    return lo;
}

// Every invocation of the workgroup, x[k] its new value of state k (0 past
// n, which leaves the absmax alone), base[k] that state's map (0 signed,
// 256 unsigned). Returns the block's absmax of each state; the codes wait
// in s_code for q8_word.
float[Q8_STATES] q8_requantize(uint l, float x[Q8_STATES], uint base[Q8_STATES]) {
    for (uint k = 0u; k < Q8_STATES; k++) s_red[k][l] = abs(x[k]);
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s)
            for (uint k = 0u; k < Q8_STATES; k++) s_red[k][l] = max(s_red[k][l], s_red[k][l + s]);
        barrier();
    }
    float am[Q8_STATES];
    for (uint k = 0u; k < Q8_STATES; k++) {
        am[k] = s_red[k][0];
        s_code[k][l] = code_of(base[k], am[k] == 0.0 ? 0.0 : div_cr(x[k], am[k]));
    }
    barrier();
    return am;
}

// Word l (< 64) of state k's codes for the block whose first element is
// blk0: the codes of elements blk0 + 4l .. + 3, those at or past n as 0.
uint q8_word(uint k, uint l, uint blk0, uint n) {
    uint e = blk0 + 4u * l, w = 0u;
    for (uint j = 0u; j < 4u; j++)
        if (e + j < n) w |= s_code[k][4u * l + j] << (8u * j);
    return w;
}
