// conv_geom.glsl — what the conv kernels (vk_conv.c) share: the geometry
// of ops/conv.c (kernel, stride, padding, dilation, image H x W, cols grid
// OH x OW) and the N x C planes as push constants, and the grid.
//
// The output is a run of `blocks` blocks of `len` elements (an image
// plane, or one tap's OH x OW grid of cols): the workgroup's y and z pick
// the block, x runs along it, one invocation per element. Indices are
// split by udiv, not `/`: lavapipe turns each vector integer division
// into scalar ones, which took half of im2col's time. All f32 and
// contiguous.

layout(local_size_x = 64) in;

// Matches struct conv_push in vk_conv.c.
layout(push_constant) uniform P {
    uint blocks, len;     // the output: blocks x len elements
    uint n, c, h, w, oh, ow;
    uint kh, kw, sh, sw;
    int ph, pw;
    uint dh, dw;
    uint cn;              // ip[11] = 1: cols [C, kh, kw, N, OH, OW], or the max-pool's image stored [C, N, H, W]
    uint tiled;           // pool backward: the windows tile the image (see conv_pool_max_grad.comp)
    uint s0, s1, s2, d0;  // first elements of bindings 0, 1, 2 (sources) and of the output
    float pad;            // the value of out-of-image taps (IM2COL, max-pool)
} p;

// x / d for x < 2^22 and d >= 1 (vk_conv.c keeps every index that
// small): a float estimate, within 2 even at the 2.5 ulp Vulkan allows a
// division, corrected to the exact quotient. (A fallback `x / d` for
// bigger x would be flattened into a select and cost as much as before.)
uint udiv(uint x, uint d) {
    uint q = uint(float(x) / float(d));
    int r = int(x) - int(q * d);
    [[unroll]] for (int i = 0; i < 2; i++)
        if (r < 0) q--, r += int(d);
    [[unroll]] for (int i = 0; i < 2; i++)
        if (r >= int(d)) q++, r -= int(d);
    return q;
}

// This workgroup's block (>= p.blocks: nothing to do).
uint conv_block() { return gl_WorkGroupID.y + gl_WorkGroupID.z * gl_NumWorkGroups.y; }

// Element of cols at (plane (n, c), tap (ki, kj)), grid (oi, oj), either layout.
uint cols_index(uint n, uint c, uint ki, uint kj, uint oi, uint oj) {
    uint tap = ki * p.kw + kj;
    uint blk = p.cn != 0u ? (c * p.kh * p.kw + tap) * p.n + n : (n * p.c + c) * p.kh * p.kw + tap;
    return (blk * p.oh + oi) * p.ow + oj;
}

// The grid positions o whose taps k = 0, 1, ... land on image position x
// (o*s - pad + k*d = x), walked without a division per tap: t = x + pad -
// k*d must be a non-negative multiple of s below s*n_out. q, r: t / s and
// t % s, stepped by d / s and d % s (dq, dr) per tap.
struct tap_walk {
    int q, r, dq, dr, s;
};
tap_walk walk_start(uint x, int pad, uint d, uint s) {
    uint t = x + uint(pad), q = udiv(t, s), dq = udiv(d, s); // k = 0
    return tap_walk(int(q), int(t - q * s), int(dq), int(d - dq * s), int(s));
}
tap_walk walk_step(tap_walk w) { // k + 1
    w.q -= w.dq, w.r -= w.dr;
    if (w.r < 0) w.r += w.s, w.q -= 1;
    return w;
}
tap_walk walk_unstep(tap_walk w) { // k - 1
    w.q += w.dq, w.r += w.dr;
    if (w.r >= w.s) w.r -= w.s, w.q += 1;
    return w;
}
bool walk_hit(tap_walk w, uint n_out) { return w.r == 0 && w.q >= 0 && w.q < int(n_out); }

// The max-pool with cn = 1: pooled plane q = i c + j (i < n, j < c, the
// image tensor's dims 0 and 1) lies at plane j n + i of the other layout.
uint swap_planes(uint q) {
    uint i = udiv(q, p.c);
    return (q - i * p.c) * p.n + i;
}
