#version 450
#include "common.glsl"
// rows_scatter_add: out[v, j] = the sum of rows[p, j] over the positions p
// with idx[p] == v, added in increasing p from 0 as the CPU kernel does, so
// the sums are the same bits. Without float atomics each output element
// has one writer: a workgroup owns 256 columns of one row v and walks the
// indices in tiles of 256 through shared memory; a tile without v (most of
// them) costs one compare per invocation. Indices outside [0, V) match no
// row (the CPU kernel fails the compute instead).
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer R { float rows[]; };
layout(std430, binding = 1) readonly buffer I { int idx[]; };
layout(std430, binding = 2) writeonly buffer Y { float y[]; };
// v rows of d columns, chunks = ceil(d / 256) workgroups per row, nidx indices
layout(push_constant) uniform P { uint v, d, chunks, nidx, r0, i0, y0; } p;
shared int tile[256];
shared uint hit; // the last tile (numbered from 1) in which some index was this row
void main() {
    uint wg = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x, l = gl_LocalInvocationID.x;
    if (wg >= p.v * p.chunks) return; // whole workgroups only: the barriers below stay uniform
    int row = int(wg / p.chunks);
    uint j = (wg % p.chunks) * 256u + l;
    if (l == 0u) hit = 0u;
    float acc = 0.0;
    uint tno = 0u;
    for (uint base = 0u; base < p.nidx; base += 256u) {
        tno++;
        uint q = base + l;
        int r = -1;
        if (q < p.nidx) r = idx[p.i0 + q];
        tile[l] = r;
        barrier();
        if (r == row) atomicMax(hit, tno);
        barrier();
        if (hit == tno && j < p.d) {
            uint m = min(256u, p.nidx - base);
            for (uint k = 0u; k < m; k++)
                if (tile[k] == row) acc += rows[p.r0 + (base + k) * p.d + j];
        }
        barrier(); // everyone has read the tile before the next one overwrites it
    }
    if (j < p.d) y[p.y0 + uint(row) * p.d + j] = acc;
}
