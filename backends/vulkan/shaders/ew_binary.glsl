// ew_binary.glsl — ADD SUB MUL DIV and CMP (op 0..4, cmp a kiln_cmp_op)
// with broadcasting: each source read through its own strides (0 on
// stretched dims) aligned to the contiguous output. EW_INT builds the
// i32 comparison (the only binary op kiln allows on i32); EW_T16 the f16 one.
#include "ew_index.glsl"
#include "ew_half.glsl"
#ifdef EW_INT
#define EW_STORE_T int
#else
#include "ew_io.glsl"
#include "ew_math.glsl"
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { EW_STORE_T a[]; };
layout(std430, binding = 1) readonly buffer B { EW_STORE_T b[]; };
layout(std430, binding = 2) writeonly buffer Y { EW_STORE_T y[]; };
layout(push_constant) uniform P {
    uint n, a0, b0, y0, nd, op, cmp;
    uint shape[EW_MAX_DIMS], sa[EW_MAX_DIMS], sb[EW_MAX_DIMS];
} p;

// Ordered comparisons except NE, which is true when either side is NaN.
#define EW_CMP(cmp, u, v) \
    (cmp == 0u ? u == v : cmp == 1u ? !(u == v) : cmp == 2u ? u < v : cmp == 3u ? u <= v : cmp == 4u ? u > v : u >= v)

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint oa = 0u, ob = 0u, r = i;
    for (int d = int(p.nd) - 1; d >= 0; d--) {
        uint c = r % p.shape[d];
        r /= p.shape[d];
        oa += c * p.sa[d];
        ob += c * p.sb[d];
    }
#ifdef EW_INT
    int u = a[p.a0 + oa], v = b[p.b0 + ob];
    y[p.y0 + i] = EW_CMP(p.cmp, u, v) ? 1 : 0;
#else
    float u = ew_ld(a[p.a0 + oa]), v = ew_ld(b[p.b0 + ob]), w;
    switch (p.op) {
    case 0u: w = u + v; break;
    case 1u: w = u - v; break;
    case 2u: w = u * v; break;
    case 3u: w = ew_div(u, v); break;
    default: w = EW_CMP(p.cmp, u, v) ? 1.0 : 0.0; break;
    }
    y[p.y0 + i] = ew_st(w);
#endif
}
