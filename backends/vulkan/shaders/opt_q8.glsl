// opt_q8.glsl — the block-wise 8-bit state coding of the 8-bit step shaders
// that run one workgroup of 256 per block (optim/dynamic_map.h), as
// opt_adam8.glsl codes it (the CPU's codes and absmax bit for bit): the two
// maps and their f32 midpoint thresholds in shared memory, a value's code
// as the count of thresholds at or below it (bisection), absmax by a
// shared-memory max reduction, codes packed four to a uint little-endian.
// (opt_adam8.glsl holds the same lines inline; it can include this file.)
shared float s_map[512], s_thr[512];
shared float s_red[2][256];
shared uint s_code[2][256];

// Both maps (signed, then unsigned) from maps[mp0..] and their thresholds;
// every invocation calls it (it has barriers).
#define Q8_LOAD_MAPS(maps, mp0)                                                                      \
    {                                                                                                \
        uint l_ = gl_LocalInvocationIndex;                                                           \
        s_map[l_] = maps[(mp0) + l_];                                                                \
        s_map[256u + l_] = maps[(mp0) + 256u + l_];                                                  \
        barrier();                                                                                   \
        for (uint k = l_; k < 512u; k += 256u) {                                                     \
            precise float th = (s_map[k] + s_map[(k & 255u) == 255u ? k : k + 1u]) * 0.5;            \
            s_thr[k] = (k & 255u) == 255u ? uintBitsToFloat(0x7f800000u) : th;                       \
        }                                                                                            \
    }

// #{k < 255 : x >= thr[k]} over one map's thresholds (base 0 signed, 256 unsigned)
uint q8_code(uint base, float x) {
    uint lo = 0u, hi = 255u;
    while (lo < hi) {
        uint mid = (lo + hi) >> 1;
        if (x >= s_thr[base + mid]) lo = mid + 1u;
        else hi = mid;
    }
    return lo;
}

uint q8_byte(uint w, uint i) { return (w >> (8u * (i & 3u))) & 255u; }

// The block's absmax of the two states (a, b hold this invocation's
// values) into am, and each invocation's codes into s_code[0..1][l]
// (a with the signed map, b with the unsigned one). Has barriers.
void q8_code_block(float a, float b, out float am, out float bm) {
    uint l = gl_LocalInvocationIndex;
    s_red[0][l] = abs(a);
    s_red[1][l] = abs(b);
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s) {
            s_red[0][l] = max(s_red[0][l], s_red[0][l + s]);
            s_red[1][l] = max(s_red[1][l], s_red[1][l + s]);
        }
        barrier();
    }
    am = s_red[0][0];
    bm = s_red[1][0];
    s_code[0][l] = q8_code(0u, am == 0.0 ? 0.0 : div_cr(a, am));
    s_code[1][l] = q8_code(256u, bm == 0.0 ? 0.0 : div_cr(b, bm));
    barrier();
}

// Word w (< 64) of the block's packed codes of state k, for n elements in all
// from the block's first element e0.
uint q8_word(uint k, uint w, uint e0, uint n) {
    uint word = 0u;
    for (uint j = 0u; j < 4u; j++)
        if (e0 + 4u * w + j < n) word |= s_code[k][4u * w + j] << (8u * j);
    return word;
}
