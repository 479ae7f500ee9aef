// rows_get.glsl — get_rows: y[p, j] = table[idx[p], j] widened to f32, one
// invocation per output element; the table may be strided (ts0, ts1), the
// indices are contiguous. An index outside [0, v) gives a zero row (the
// CPU kernel fails the compute instead; a kernel cannot). Included after
// TELEM (the table's element type) and TLOAD (its value as f32) are defined.
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer T { TELEM tab[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, d, v, t0, i0, y0, ts0, ts1; } p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint row = i / p.d, j = i % p.d;
    int r = idx[p.i0 + row];
    if (r >= 0 && uint(r) < p.v) y[p.y0 + i] = TLOAD(tab[p.t0 + uint(r) * p.ts0 + j * p.ts1]);
    else y[p.y0 + i] = 0.0;
}
