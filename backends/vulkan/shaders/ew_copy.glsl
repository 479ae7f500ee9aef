// ew_copy.glsl — CONTIGUOUS and CAST: y[i] = convert(x[offset of i]) with x
// read through its (coalesced) strides. Included by ew_copy_<src>_<dst>.comp,
// which say whether each side is stored in 32 or 16 bits (EW_SRC16,
// EW_DST16); 16-bit sides are bound as float16_t and moved as raw bits.
// EW_MOVE (same dtype on both sides) leaves out the conversion, which
// llvmpipe would otherwise evaluate for every dtype pair (it runs both sides
// of a branch). EW_QUAD (32-bit moves whose innermost dim is a multiple of
// 4 and whose output starts at a multiple of 4): four elements an
// invocation, one offset computation and one uvec4 store for the four;
// EW_VLOAD as well when x is contiguous along that dim from a multiple of
// 4 (the host checks every stride and x0): one uvec4 load.
#include "ew_fast.glsl"
#include "ew_half.glsl"
#if defined(EW_SRC16) || defined(EW_DST16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
layout(local_size_x = 256) in;
#if defined(EW_CASTV) && defined(EW_SRC16)
layout(std430, binding = 0) readonly buffer X { f16vec4 x[]; };
#elif defined(EW_CASTV)
layout(std430, binding = 0) readonly buffer X { uvec4 x[]; };
#elif defined(EW_SRC16)
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
#elif defined(EW_VLOAD)
layout(std430, binding = 0) readonly buffer X { uvec4 x[]; };
#else
layout(std430, binding = 0) readonly buffer X { uint x[]; };
#endif
#if defined(EW_CASTV) && defined(EW_DST16)
layout(std430, binding = 1) writeonly buffer Y { f16vec4 y[]; };
#elif defined(EW_DST16)
layout(std430, binding = 1) writeonly buffer Y { float16_t y[]; };
#elif defined(EW_QUAD) || defined(EW_CASTV)
layout(std430, binding = 1) writeonly buffer Y { uvec4 y[]; };
#else
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
#endif
layout(push_constant) uniform P {
    uint n, x0, y0, nd, sl, i0; // EW_QUAD: n, y0 in quads; EW_CASTV: n, x0, y0 in quads
    uint shape[EW_MAX_DIMS], mg[EW_MAX_DIMS], st[EW_MAX_DIMS];
} p;

#if defined(EW_CASTV)
uint ew_cast(uint b) { return ew_from_f32(EW_DDT, ew_to_f32(EW_SDT, b)); }
void main() {
    uint g = kiln_gid();
    if (g >= p.n) return;
#ifdef EW_SRC16
    f16vec4 h = x[p.x0 + g];
    uint lo = packFloat2x16(h.xy), hi = packFloat2x16(h.zw);
    uvec4 b = uvec4(lo & 0xffffu, lo >> 16, hi & 0xffffu, hi >> 16);
#else
    uvec4 b = x[p.x0 + g];
#endif
    b = uvec4(ew_cast(b.x), ew_cast(b.y), ew_cast(b.z), ew_cast(b.w));
#ifdef EW_DST16
    y[p.y0 + g] = f16vec4(unpackFloat2x16(b.x | (b.y << 16)), unpackFloat2x16(b.z | (b.w << 16)));
#else
    y[p.y0 + g] = b;
#endif
}
#elif defined(EW_QUAD)
void main() {
    uint g = kiln_gid();
    if (g >= p.n) return;
    uint off;
    EW_WALK1(g * 4u, p.nd, p.shape, p.mg, p.sl, p.st, off)
    off += p.x0;
#ifdef EW_VLOAD
    y[p.y0 + g] = x[off / 4u];
#else
    uint s = p.st[p.nd - 1u];
    y[p.y0 + g] = uvec4(x[off], x[off + s], x[off + 2u * s], x[off + 3u * s]);
#endif
}
#else
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    i += p.i0;
    uint off;
    EW_WALK1(i, p.nd, p.shape, p.mg, p.sl, p.st, off)
#ifdef EW_SRC16
    uint b = packFloat2x16(f16vec2(x[p.x0 + off], float16_t(0.0))) & 0xffffu;
#else
    uint b = x[p.x0 + off];
#endif
#ifndef EW_MOVE
    b = ew_from_f32(EW_DDT, ew_to_f32(EW_SDT, b));
#endif
#ifdef EW_DST16
    y[p.y0 + i] = unpackFloat2x16(b).x;
#else
    y[p.y0 + i] = b;
#endif
}
#endif
