// opt_adam8.glsl — the 8-bit Adam/AdamW step (optim/opt8bit.c), in place,
// one workgroup per block of 256 elements, giving the CPU kernel's bits
// (backends/cpu/optim_8bit.c): dequantize (map[code] * absmax), update as
// opt_adam.glsl (skipping non-finite gradients), absmax per state by a
// shared-memory max reduction, then each code as the count of the f32
// midpoint thresholds (map[k] + map[k+1]) * 0.5 at or below x / absmax
// (found by bisection over the maps held in shared memory), which is the
// CPU's count. Codes are bytes packed four to a uint (little-endian, as the
// CPU's bytes lie in its I32 leaf); a block's 64 words belong to it alone.
// Included after opt_exact.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer Prm { float prm[]; };
layout(std430, binding = 1) readonly buffer G { float grad[]; };
layout(std430, binding = 2) buffer MQ { uint mq[]; };
layout(std430, binding = 3) buffer MA { float ma[]; };
layout(std430, binding = 4) buffer VQ { uint vq[]; };
layout(std430, binding = 5) buffer VA { float va[]; };
layout(std430, binding = 6) readonly buffer Maps { float maps[]; };
layout(std430, binding = 7) readonly buffer H { float hyper[]; };
layout(push_constant) uniform P { uint n, p0, g0, mq0, ma0, vq0, va0, mp0, h0, t, decoupled; } pc;
shared float s_decay, s_neg_step, s_bc2s;
shared float s_map[512], s_thr[512];
shared float s_red[2][256];
shared uint s_code[2][256];

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

uint byte_of(uint w, uint i) { return (w >> (8u * (i & 3u))) & 255u; }

void main() {
    uint l = gl_LocalInvocationIndex;
    float lr = hyper[pc.h0], b1 = hyper[pc.h0 + 1u], b2 = hyper[pc.h0 + 2u], eps = hyper[pc.h0 + 3u],
          wd = hyper[pc.h0 + 4u];
    s_map[l] = maps[pc.mp0 + l];
    s_map[256u + l] = maps[pc.mp0 + 256u + l];
    if (l == 0u) {
        s_decay = pc.decoupled != 0u ? ff_sub_from(1.0, ff_two_prod(lr, wd)).x : 1.0; // 1 - lr wd
        s_neg_step = -ff_div(lr, ff_sub_from(1.0, ff_pow(b1, pc.t))).x;               // -lr / (1 - b1^t)
        s_bc2s = ff_sqrt(ff_sub_from(1.0, ff_pow(b2, pc.t))).x;                       // sqrt(1 - b2^t)
    }
    barrier();
    for (uint k = l; k < 512u; k += 256u) {
        precise float th = (s_map[k] + s_map[(k & 255u) == 255u ? k : k + 1u]) * 0.5;
        s_thr[k] = (k & 255u) == 255u ? uintBitsToFloat(0x7f800000u) : th; // unused past 254
    }
    uint i = kiln_gid(), blk = i >> 8;
    bool live = i < pc.n;
    precise float mi = 0.0, vi = 0.0;
    if (live) {
        mi = s_map[byte_of(mq[pc.mq0 + (i >> 2)], i)] * ma[pc.ma0 + blk];
        vi = s_map[256u + byte_of(vq[pc.vq0 + (i >> 2)], i)] * va[pc.va0 + blk];
        precise float g = grad[pc.g0 + i];
        if ((floatBitsToUint(g) & 0x7f800000u) != 0x7f800000u) { // finite
            bool l2 = pc.decoupled == 0u && wd != 0.0;
            precise float one_b1 = 1.0 - b1, one_b2 = 1.0 - b2;
            precise float pi = prm[pc.p0 + i] * s_decay;
            if (l2) g = g + wd * pi;
            mi = mi * b1 + g * one_b1;
            vi = vi * b2 + one_b2 * g * g;
            precise float denom = div_cr(sqrt_cr(vi), s_bc2s) + eps;
            precise float np = pi + div_cr(s_neg_step * mi, denom);
            prm[pc.p0 + i] = np;
        }
    }
    s_red[0][l] = abs(mi);
    s_red[1][l] = abs(vi);
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (l < s) {
            s_red[0][l] = max(s_red[0][l], s_red[0][l + s]);
            s_red[1][l] = max(s_red[1][l], s_red[1][l + s]);
        }
        barrier();
    }
    float am = s_red[0][0], av = s_red[1][0];
    s_code[0][l] = code_of(0u, am == 0.0 ? 0.0 : div_cr(mi, am));
    s_code[1][l] = code_of(256u, av == 0.0 ? 0.0 : div_cr(vi, av));
    if (l == 0u && live) {
        ma[pc.ma0 + blk] = am;
        va[pc.va0 + blk] = av;
    }
    barrier();
    uint e = blk * 256u + 4u * l; // first element of word l of this block
    if (l < 64u && e < pc.n) {
        uint wm = 0u, wv = 0u;
        for (uint j = 0u; j < 4u; j++)
            if (e + j < pc.n) {
                wm |= s_code[0][4u * l + j] << (8u * j);
                wv |= s_code[1][4u * l + j] << (8u * j);
            }
        mq[pc.mq0 + blk * 64u + l] = wm;
        vq[pc.vq0 + blk * 64u + l] = wv;
    }
}
