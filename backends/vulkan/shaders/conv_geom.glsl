// conv_geom.glsl — the push constants shared by the conv kernels
// (vk_conv.c): the geometry of ops/conv.c (kernel, stride, padding,
// dilation, image H x W, cols grid OH x OW), the N x C planes and where
// each binding's tensor starts. All f32 and contiguous; one invocation
// per output element (1-D grid, kiln_gid()).

layout(local_size_x = 256) in;

// Matches struct conv_push in vk_conv.c.
layout(push_constant) uniform P {
    uint total;           // output elements
    uint n, c, h, w, oh, ow;
    uint kh, kw, sh, sw;
    int ph, pw;
    uint dh, dw;
    uint cn;              // cols layout [C, kh, kw, N, OH, OW] (ip[11] = 1)
    uint tiled;           // pool backward: the windows tile the image (see conv_pool_max_grad.comp)
    uint s0, s1, s2, d0;  // first elements of bindings 0, 1, 2 (sources) and of the output
    float pad;            // the value of out-of-image taps (IM2COL, max-pool)
} p;

// Element of cols at (plane (n, c), tap (ki, kj), grid (oi, oj)), either layout.
uint cols_index(uint n, uint c, uint ki, uint kj, uint oi, uint oj) {
    uint tap = ki * p.kw + kj;
    uint blk = p.cn != 0u ? (c * p.kh * p.kw + tap) * p.n + n : (n * p.c + c) * p.kh * p.kw + tap;
    return (blk * p.oh + oi) * p.ow + oj;
}
