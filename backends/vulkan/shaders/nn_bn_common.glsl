// nn_bn_common.glsl — batch norm over x [N, C, S] (f32 contiguous), one
// 256-wide workgroup per channel, after common.glsl; the kernel declares
// `x` and push constants p with n, c, s, x0. Sums go lane by lane over
// the channel's M = N * S values, then through a fixed tree in shared
// memory: the same bits every run. Every invocation must call the
// reductions (they barrier).
layout(local_size_x = 256) in;
shared float bn_red[256];

float bn_sum(float v) {
    uint i = gl_LocalInvocationID.x;
    bn_red[i] = v;
    barrier();
    for (uint h = 128u; h > 0u; h >>= 1) {
        if (i < h) bn_red[i] += bn_red[i + h];
        barrier();
    }
    float r = bn_red[0];
    barrier();
    return r;
}

// the workgroup's channel (the host spreads them over x and y)
uint bn_channel() { return gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x; }

// element k (of M) of channel ch
uint bn_at(uint ch, uint k) {
    uint i = k / p.s;
    return p.x0 + (i * p.c + ch) * p.s + (k - i * p.s);
}

// mean and biased variance, shifted by the channel's first value as the
// CPU does, two passes so nothing cancels
void bn_stats(uint ch, out float mean, out float var) {
    uint m = p.n * p.s;
    float x0 = x[bn_at(ch, 0u)], d = 0.0, q = 0.0;
    for (uint k = gl_LocalInvocationID.x; k < m; k += 256u) d += x[bn_at(ch, k)] - x0;
    mean = x0 + bn_sum(d) / float(m);
    for (uint k = gl_LocalInvocationID.x; k < m; k += 256u) {
        float e = x[bn_at(ch, k)] - mean;
        q += e * e;
    }
    var = bn_sum(q) / float(m);
}
