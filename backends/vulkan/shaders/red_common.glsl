// red_common.glsl — SUM, MAX, MIN and ARGMAX (op 0..3) of f32 values over
// one axis or all of them. An output's elements are found through the kept
// dims (kshape/kst), the elements it reduces through the reduced dims
// (rshape/rst; one dim for an axis, the coalesced source for a whole
// reduction). Sums carry a compensation term (float-float, TwoSum) so they
// come close to the CPU's double accumulation; max/min/argmax follow the
// CPU: a NaN wins (argmax: the first NaN), ties keep the first index.
// RED_IN16 / RED_OUT16: f16 input / output (computed in f32, as the CPU's
// widened path; the result rounded to f16 once).
#include "ew_half.glsl"
#if defined(RED_IN16) || defined(RED_OUT16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif
#ifdef RED_IN16
layout(std430, binding = 0) readonly buffer X { float16_t x[]; };
float red_ld(uint i) { return uintBitsToFloat(ew_f16_to_f32(packFloat2x16(f16vec2(x[i], float16_t(0.0))) & 0xffffu)); }
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
float red_ld(uint i) { return x[i]; }
#endif
#ifdef RED_OUT16
layout(std430, binding = 1) writeonly buffer Y { float16_t y[]; };
void red_st(uint i, float v) { y[i] = unpackFloat2x16(ew_f32_to_f16(floatBitsToUint(v))).x; }
#else
layout(std430, binding = 1) writeonly buffer Y { uint y[]; }; // f32 bits, or i32 (argmax)
void red_st(uint i, float v) { y[i] = floatBitsToUint(v); }
#endif
layout(push_constant) uniform P {
    uint n, nout, x0, y0, op, nk, nr;
    uint kshape[6], kst[6], rshape[6], rst[6];
} p;

#define RED_SUM 0u
#define RED_MIN 2u
#define RED_ARGMAX 3u
#define RED_EMPTY 0xffffffffu

bool red_isnan(float v) { return (floatBitsToUint(v) & 0x7fffffffu) > 0x7f800000u; }
bool red_isinf(float v) { return (floatBitsToUint(v) & 0x7fffffffu) == 0x7f800000u; }

// s + e = a + b exactly (e = 0 once s is not finite).
void red_two_sum(float a, float b, out float s, out float e) {
    precise float s_ = a + b;
    precise float bb = s_ - a;
    precise float e_ = (a - (s_ - bb)) + (b - bb);
    s = s_;
    e = red_isinf(s_) || red_isnan(s_) ? 0.0 : e_;
}

// An accumulator: v (+ c for sums) and the index of v (RED_EMPTY: nothing yet).
struct red_acc {
    float v, c;
    uint i;
};

red_acc red_empty() { return red_acc(0.0, 0.0, RED_EMPTY); }

// Does candidate (v, i) beat the accumulator? NaN wins, then the extreme,
// then the lower index.
bool red_beats(uint op, float v, uint i, red_acc a) {
    if (a.i == RED_EMPTY) return true;
    bool nv = red_isnan(v), na = red_isnan(a.v);
    if (nv || na) return nv && (!na || i < a.i);
    if (v == a.v) return i < a.i;
    return op == RED_MIN ? v < a.v : v > a.v;
}

void red_add(inout red_acc a, uint op, float v, uint i) {
    if (op == RED_SUM) {
        float s, e;
        red_two_sum(a.v, v, s, e);
        a.v = s;
        a.c += e;
        a.i = 0u;
    } else if (red_beats(op, v, i, a)) {
        a.v = v;
        a.i = i;
    }
}

red_acc red_merge(uint op, red_acc a, red_acc b) {
    if (op != RED_SUM) return b.i != RED_EMPTY && red_beats(op, b.v, b.i, a) ? b : a;
    float s, e;
    red_two_sum(a.v, b.v, s, e);
    precise float c = e + (a.c + b.c);
    float s2, e2;
    red_two_sum(s, c, s2, e2);
    return red_acc(s2, e2, 0u);
}

// Offset of output o's first element, and of element k along the reduction.
uint red_kept_offset(uint o) {
    uint off = 0u;
    for (int d = int(p.nk) - 1; d >= 0; d--) {
        off += (o % p.kshape[d]) * p.kst[d];
        o /= p.kshape[d];
    }
    return off;
}
uint red_offset(uint k) {
    if (p.nr == 1u) return k * p.rst[0];
    uint off = 0u;
    for (int d = int(p.nr) - 1; d >= 0; d--) {
        off += (k % p.rshape[d]) * p.rst[d];
        k /= p.rshape[d];
    }
    return off;
}

void red_store(uint o, red_acc a) {
#ifdef RED_OUT16
    red_st(p.y0 + o, p.op == RED_SUM ? a.v + a.c : a.v);
#else
    if (p.op == RED_ARGMAX) y[p.y0 + o] = a.i;
    else red_st(p.y0 + o, p.op == RED_SUM ? a.v + a.c : a.v);
#endif
}
