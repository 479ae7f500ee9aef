// red_rows.glsl — one workgroup per output; its 256 invocations stride
// through the reduced elements, then combine through shared memory (see
// red_common.glsl). Included by red_rows*.comp.
layout(local_size_x = 256) in;
#include "red_common.glsl"
shared float sv[256], sc[256];
shared uint si[256];
void main() {
    uint o = kiln_gid() / 256u, lid = gl_LocalInvocationID.x;
    if (o >= p.nout) return; // the whole workgroup leaves together
    uint base = p.x0 + red_kept_offset(o), op = p.op;
    red_acc a = red_empty();
    for (uint k = lid; k < p.n; k += 256u) red_add(a, op, red_ld(base + red_offset(k)), k);
    sv[lid] = a.v;
    sc[lid] = a.c;
    si[lid] = a.i;
    barrier();
    for (uint s = 128u; s > 0u; s >>= 1) {
        if (lid < s) {
            red_acc m = red_merge(op, red_acc(sv[lid], sc[lid], si[lid]), red_acc(sv[lid + s], sc[lid + s], si[lid + s]));
            sv[lid] = m.v;
            sc[lid] = m.c;
            si[lid] = m.i;
        }
        barrier();
    }
    if (lid == 0u) red_store(o, red_acc(sv[0], sc[0], si[0]));
}
