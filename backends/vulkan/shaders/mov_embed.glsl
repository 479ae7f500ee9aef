// mov_embed.glsl — one invocation per element of the contiguous output y:
// the element at output index c is x[(c - before) / step] where that lands
// inside x (step only on axis saxis, 1 elsewhere), else the fill value. Pad
// is before = the pads before each axis; slice_scatter is before = start
// and step on its axis with a zero fill. Included after mov_elem.glsl.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { ELEM x[]; };
layout(std430, binding = 1) writeonly buffer Y { ELEM y[]; };
layout(push_constant) uniform P {
    uint n, ndim, x0, y0, saxis, step, fill_lo, fill_hi;
    uint oshape[6], before[6], xshape[6], xstride[6];
} p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint rem = i, xi = p.x0;
    bool inside = true;
    for (int d = int(p.ndim) - 1; d >= 0; d--) {
        uint c = rem % p.oshape[d];
        rem /= p.oshape[d];
        int k = int(c) - int(p.before[d]);
        uint st = uint(d) == p.saxis ? p.step : 1u;
        if (k < 0 || uint(k) % st != 0u || uint(k) / st >= p.xshape[d]) inside = false;
        else xi += uint(k) / st * p.xstride[d];
    }
    if (inside) y[p.y0 + i] = x[xi];
    else y[p.y0 + i] = ELEM_FILL(p.fill_lo, p.fill_hi);
}
