// ew_where_v4.glsl — y = cond != 0 ? a : b (see ew_where.glsl) with the
// output contiguous from a multiple of 4 elements, four elements an
// invocation. cond is read as uvec4 from a multiple of 4, repeating every
// d quads (d = all of them when it is shaped like the output, its row
// when it is a row broadcast over rows of a multiple of 4: a mask over
// batches); a and b likewise, or splat (EW_A_SPLAT, EW_B_SPLAT: one
// element for d quads in turn: a scalar fill, a column). The host runs the
// n % 4 left over with the element kernel.
#include "ew_fast.glsl"
// W4: what the selection works on; bf16's u16vec4 (EW_TB16) only
// converts, so it selects as uvec4.
#if defined(EW_TB16)
#extension GL_EXT_shader_16bit_storage : require
#define EW_STORE_T uint16_t
#define EW_STORE4_T u16vec4
#define W4 uvec4
#define EW_SPLAT4(v) uvec4(uint(v))
#elif defined(EW_T16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define EW_STORE_T float16_t
#define EW_STORE4_T f16vec4
#define W4 f16vec4
#define EW_SPLAT4(v) f16vec4(v)
#else
#define EW_STORE_T uint
#define EW_STORE4_T uvec4
#define W4 uvec4
#define EW_SPLAT4(v) uvec4(v)
#endif
layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer C { uvec4 c[]; };
#ifdef EW_A_SPLAT
layout(std430, binding = 1) readonly buffer A { EW_STORE_T a[]; };
#else
layout(std430, binding = 1) readonly buffer A { EW_STORE4_T a[]; };
#endif
#ifdef EW_B_SPLAT
layout(std430, binding = 2) readonly buffer B { EW_STORE_T b[]; };
#else
layout(std430, binding = 2) readonly buffer B { EW_STORE4_T b[]; };
#endif
layout(std430, binding = 3) writeonly buffer Y { EW_STORE4_T y[]; };
layout(push_constant) uniform P {
    uint nq, c0, a0, b0, y0, c_i32; // c0, y0 in quads; a0, b0 in quads (elements when splat)
    uint mc, lc, dc, ma, la, da, mb, lb, db; // each source's period d in quads, with its magic (ew_udiv)
} p;

void main() {
    uint g = kiln_gid();
    if (g >= p.nq) return;
    uvec4 cb = c[p.c0 + g - ew_udiv(g, p.mc, p.lc) * p.dc];
    bvec4 on = notEqual(p.c_i32 != 0u ? cb : cb & 0x7fffffffu, uvec4(0u));
#ifdef EW_A_SPLAT
    W4 u = EW_SPLAT4(a[p.a0 + ew_udiv(g, p.ma, p.la)]);
#else
    W4 u = W4(a[p.a0 + g - ew_udiv(g, p.ma, p.la) * p.da]);
#endif
#ifdef EW_B_SPLAT
    W4 v = EW_SPLAT4(b[p.b0 + ew_udiv(g, p.mb, p.lb)]);
#else
    W4 v = W4(b[p.b0 + g - ew_udiv(g, p.mb, p.lb) * p.db]);
#endif
    y[p.y0 + g] = EW_STORE4_T(W4(on.x ? u.x : v.x, on.y ? u.y : v.y, on.z ? u.z : v.z, on.w ? u.w : v.w));
}
