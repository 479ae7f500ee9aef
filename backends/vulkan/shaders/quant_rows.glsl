// quant_rows.glsl — GET_ROWS from a quantized table [v, d] (contiguous, d
// whole blocks): y[p, j] = table[idx[p], j] dequantized, one invocation per
// output element; an index outside [0, v) gives a zero row (rows_get.glsl).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer Q { uint qw[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
layout(push_constant) uniform P { uint n, d, v, q0, i0, y0, row_bytes; } p;
#define KQ_MAP_BINDING 3
#include "quant.glsl"
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint row = i / p.d, j = i % p.d;
    int r = idx[p.i0 + row];
    if (r >= 0 && uint(r) < p.v) y[p.y0 + i] = kq_get(p.q0 + uint(r) * p.row_bytes + (j / KQ_BLCK) * KQ_BYTES, j % KQ_BLCK);
    else y[p.y0 + i] = 0.0;
}
