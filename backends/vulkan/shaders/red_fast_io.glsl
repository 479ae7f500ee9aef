// red_fast_io.glsl — bindings and push constants of red_row and red_col:
// x (f32; vec4 with RED_V4), y (f32 bits or argmax's i32), z (partials:
// planes of v, c and i, each S * nout words, when p.part is set). Outputs
// are found through the kept dims with the host's magic-number division
// (ew_udiv); their elements at k * rs, for k in split s's range.
#include "ew_fast.glsl"
#include "red_fast.glsl"
layout(local_size_x = 256) in;
#ifdef RED_V4
layout(std430, binding = 0) readonly buffer X { vec4 x[]; };
#else
layout(std430, binding = 0) readonly buffer X { float x[]; };
#endif
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
layout(std430, binding = 2) writeonly buffer Z { uint z[]; };
layout(push_constant) uniform P {
    uint n, chunk, S, nout, x0, y0, rs, lgl, part, nk, ksl, pad;
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
        y[p.y0 + r] = floatBitsToUint(red_value(a));
    } else {
        uint q = s * p.nout + r, P = p.S * p.nout;
        z[q] = floatBitsToUint(a.v);
        z[P + q] = floatBitsToUint(a.c);
        z[2u * P + q] = a.i;
    }
}
