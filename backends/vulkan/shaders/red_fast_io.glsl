// red_fast_io.glsl — bindings and push constants of red_row and red_col:
// x (f32; vec4 with RED_V4; f16 with RED_IN16, bf16 with RED_BF16 too,
// read through red_ld),
// y (red_fast_y.glsl), z (partials:
// planes of v, c and i, each S * nout words, when p.part is set). Outputs
// are found through the kept dims with the host's magic-number division
// (ew_udiv); their elements at k * rs, for k in split s's range. With
// p.iflat the outputs are rows of a whole reduction (partials all): the
// index of element k of row r is r * n + k, its place in x's element order.
#if (defined(RED_IN16) || defined(RED_OUT16)) && !defined(RED_BF16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#elif defined(RED_BF16)
#extension GL_EXT_shader_16bit_storage : require
#endif
#include "ew_fast.glsl"
#include "ew_half.glsl"
#include "red_fast.glsl"
layout(local_size_x = 256) in;
#if defined(RED_V4)
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
#elif defined(RED_IN16) && defined(RED_BF16)
layout(std430, binding = 0) readonly buffer X { uint16_t x[]; };
float red_ld(uint i) { return uintBitsToFloat(ew_bf16_to_f32(uint(x[i]))); }
#elif defined(RED_IN16)
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
float red_ld(uint i) { return uintBitsToFloat(ew_f16_to_f32(packFloat2x16(f16vec2(x[i], float16_t(0.0))) & 0xffffu)); }
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
float red_ld(uint i) { return x[i]; }
#endif
#include "red_fast_y.glsl"
layout(std430, binding = 2) writeonly buffer Z { uint z[]; };
layout(push_constant) uniform P {
    uint n, chunk, S, nout, x0, y0, rs, lgl, part, nk, ksl, iflat;
    uint kshape[6], kmg[6], kst[6];
} p;

uint red_kept(uint o) {
    uint off;
    EW_WALK1(o, p.nk, p.kshape, p.kmg, p.ksl, p.kst, off)
    return off;
}

// Output r's accumulator from split s: the result, or a partial.
void red_put(uint r, uint s, red_acc a) {
    if (p.part == 0u) {
        red_st(p.y0 + r, red_value(a));
    } else {
        uint q = s * p.nout + r, P = p.S * p.nout;
        z[q] = floatBitsToUint(a.v);
        z[P + q] = floatBitsToUint(a.c);
        z[2u * P + q] = a.i;
    }
}
