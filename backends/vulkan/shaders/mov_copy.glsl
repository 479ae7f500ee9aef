// mov_copy.glsl — y[y0 + c.ystride] = x[x0 + c.xstride] for every index c
// of shape: a strided block copied into a strided place (concat writes each
// part's slab with it). Included after mov_elem.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Y { ELEM y[]; };
layout(push_constant) uniform P {
    uint n, ndim, x0, y0;
    uint shape[6], xstride[6], ystride[6];
} p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint rem = i, xi = p.x0, yi = p.y0;
    for (int d = int(p.ndim) - 1; d >= 0; d--) {
        uint c = rem % p.shape[d];
        rem /= p.shape[d];
        xi += c * p.xstride[d];
        yi += c * p.ystride[d];
    }
    y[yi] = x[xi];
}
