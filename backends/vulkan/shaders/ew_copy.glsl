// ew_copy.glsl — CONTIGUOUS and CAST: y[i] = convert(x[offset of i]) with x
// read through its (coalesced) strides. Included by ew_copy_<src>_<dst>.comp,
// which say whether each side is stored in 32 or 16 bits (EW_SRC16,
// EW_DST16); 16-bit sides are bound as float16_t and moved as raw bits.
#include "ew_index.glsl"
#include "ew_half.glsl"
#if defined(EW_SRC16) || defined(EW_DST16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
layout(local_size_x = 256) in;
#ifdef EW_SRC16
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
#else
layout(std430, binding = 0) readonly buffer X { uint x[]; };
#endif
#ifdef EW_DST16
layout(std430, binding = 1) writeonly buffer Y { float16_t y[]; };
#else
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
#endif
layout(push_constant) uniform P {
    uint n, x0, y0, nd, sdt, ddt; // sdt, ddt: EW_F32, EW_F16, EW_BF16, EW_I32
    uint shape[EW_MAX_DIMS], st[EW_MAX_DIMS];
} p;
void main() {
    uint i = kiln_gid();
    if (i >= p.n) return;
    uint off;
    EW_OFFSET(i, p.nd, p.shape, p.st, off)
#ifdef EW_SRC16
    uint b = packFloat2x16(f16vec2(x[p.x0 + off], float16_t(0.0))) & 0xffffu;
#else
    uint b = x[p.x0 + off];
#endif
    if (p.sdt != p.ddt) b = ew_from_f32(p.ddt, ew_to_f32(p.sdt, b));
#ifdef EW_DST16
    y[p.y0 + i] = unpackFloat2x16(b).x;
#else
    y[p.y0 + i] = b;
#endif
}
