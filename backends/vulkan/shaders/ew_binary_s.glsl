// ew_binary_s.glsl — a binary op (EW_OPS, ew_binary_ops.glsl) with both
// sources any strided view (0 strides on broadcast dims) aligned to the
// contiguous output, one element an invocation, flat indices i0 ..
// i0 + n - 1 (i0 > 0: the tail of ew_binary_v4). EW_T16: f16 storage;
// EW_INT: the i32 comparison (the only binary op kiln allows on i32).
#include "ew_fast.glsl"
#include "ew_half.glsl"
#include "ew_binary_ops.glsl"
#ifdef EW_INT
#define EW_STORE_T int
#else
#include "ew_io.glsl"
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { EW_STORE_T a[]; };
layout(std430, binding = 1) readonly buffer B { EW_STORE_T b[]; };
layout(std430, binding = 2) writeonly buffer Y { EW_STORE_T y[]; };
layout(push_constant) uniform P {
    uint n, a0, b0, y0, nd, i0, sl, opc; // opc: op | cmp << 8
    uint shape[EW_MAX_DIMS], mg[EW_MAX_DIMS], sa[EW_MAX_DIMS], sb[EW_MAX_DIMS];
} p;

void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint j = p.i0 + i, oa, ob;
    EW_WALK2(j, p.nd, p.shape, p.mg, p.sl, p.sa, p.sb, oa, ob)
#ifdef EW_INT
    int u = a[p.a0 + oa], v = b[p.b0 + ob];
    y[p.y0 + j] = EW_CMP(p.opc >> 8, u, v) ? 1 : 0;
#else
    y[p.y0 + j] = ew_st(binary(p.opc & 255u, p.opc >> 8, ew_ld(a[p.a0 + oa]), ew_ld(b[p.b0 + ob])));
#endif
}
