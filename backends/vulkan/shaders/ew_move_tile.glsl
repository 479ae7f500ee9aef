// ew_move_tile.glsl — CONTIGUOUS of 32-bit elements where x runs along the
// output's second-to-last dim (a transpose of the last two): read one
// element at a time, each output row would gather from as many cache
// lines as elements. Instead each invocation moves a 4x4 block: four
// uvec4 loads down x's contiguous dim, a transpose in registers, four
// uvec4 stores. Invocations walk the blocks with the row block fastest,
// so neighbours read neighbouring quads of the same lines of x.
//
// The host passes the walk over blocks (outer dims, column blocks, row
// blocks) with x's and y's element strides for each, and checks that
// both sides' offsets stay multiples of 4 (both dims multiples of 4, x's
// strides and both bases too).
#include "ew_fast.glsl"
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer X { uvec4 x[]; };
layout(std430, binding = 1) writeonly buffer Y { uvec4 y[]; };
layout(push_constant) uniform P {
    uint n, x0, y0, nd, sl; // n blocks; x0, y0 in elements
    uint xs, ys;            // x's stride along the output's last dim, y's row length
    uint shape[EW_MAX_DIMS], mg[EW_MAX_DIMS], sx[EW_MAX_DIMS], sy[EW_MAX_DIMS];
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.n) return;
    uint ox, oy;
    EW_WALK2(g, p.nd, p.shape, p.mg, p.sl, p.sx, p.sy, ox, oy)
    ox += p.x0;
    oy += p.y0;
    // c_k: output column k of the block, rows 0..3
    uvec4 c0 = x[ox / 4u], c1 = x[(ox + p.xs) / 4u], c2 = x[(ox + 2u * p.xs) / 4u], c3 = x[(ox + 3u * p.xs) / 4u];
    y[oy / 4u] = uvec4(c0.x, c1.x, c2.x, c3.x);
    y[(oy + p.ys) / 4u] = uvec4(c0.y, c1.y, c2.y, c3.y);
    y[(oy + 2u * p.ys) / 4u] = uvec4(c0.z, c1.z, c2.z, c3.z);
    y[(oy + 3u * p.ys) / 4u] = uvec4(c0.w, c1.w, c2.w, c3.w);
}
