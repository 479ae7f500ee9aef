// red_row.glsl — reductions along a short-stride axis (contiguous rows:
// sums over features, whole reductions of contiguous tensors): 2^lgl lanes
// per (output, split), each walking every 2^lgl-th element (or vec4 with
// RED_V4: rows and splits start at multiples of 4), then lane 0 merges the
// lanes in order through shared memory: one barrier, none with one lane.
#include "red_fast_io.glsl"
shared float sv[256], sc[256];
shared uint si[256];
void main() {
    uint g = kiln_gid(), lid = gl_LocalInvocationID.x;
    uint L = 1u << p.lgl, lane = g & (L - 1u), u = g >> p.lgl;
    bool live = u < p.nout * p.S;
    uint r = u / p.S, s = u - r * p.S;
    red_acc a = red_empty();
    if (live) {
        uint base = p.x0 + red_kept(r), k0 = s * p.chunk, k1 = min(p.n, k0 + p.chunk), ib = p.iflat * r * p.n;
#ifdef RED_V4
        red_acc4 a4 = red_empty4();
        uint b4 = base >> 2;
        for (uint k = k0 + 4u * lane; k < k1; k += 4u * L) red_step4(a4, x[b4 + (k >> 2)], uvec4(k + ib) + uvec4(0u, 1u, 2u, 3u));
        a = red_lane(a4, 0);
        for (int j = 1; j < 4; j++) a = red_merge(a, red_lane(a4, j));
#else
        for (uint k = k0 + lane; k < k1; k += L) red_step(a, red_ld(base + k * p.rs), k + ib);
#endif
    }
    if (p.lgl != 0u) {
        sv[lid] = a.v;
        sc[lid] = a.c;
        si[lid] = a.i;
        barrier();
        if (lane != 0u) return;
        for (uint j = 1u; j < L; j++) a = red_merge(a, red_acc(sv[lid + j], sc[lid + j], si[lid + j]));
    }
    if (live) red_put(r, s, a);
}
