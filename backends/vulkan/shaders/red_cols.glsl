// red_cols.glsl — one invocation per output, walking its elements in order:
// for many outputs with short or strided reductions (e.g. a bias gradient,
// [N, D] summed over N: neighbouring invocations read neighbouring columns).
// Included by red_cols*.comp.
layout(local_size_x = 256) in;
#include "red_common.glsl"
void main() {
    uint o = kiln_gid();
    if (o >= p.nout) return;
    uint base = p.x0 + red_kept_offset(o), op = p.op;
    red_acc a = red_empty();
    for (uint k = 0u; k < p.n; k++) red_add(a, op, red_ld(base + red_offset(k)), k);
    red_store(o, a);
}
