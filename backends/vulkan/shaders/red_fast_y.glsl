// red_fast_y.glsl — the output binding of red_row, red_col and red_fin:
// f32 bits or argmax's i32 index (the value from red_value), or f16 with
// RED_OUT16 (rounded once, ew_half.glsl's bit-exact conversion; bf16 with
// RED_BF16 too).
#if defined(RED_OUT16) && defined(RED_BF16)
layout(std430, binding = 1) writeonly buffer Y { uint16_t y[]; };
void red_st(uint i, float v) { y[i] = uint16_t(ew_f32_to_bf16(floatBitsToUint(v))); }
#elif defined(RED_OUT16)
layout(std430, binding = 1) writeonly buffer Y { float16_t y[]; };
void red_st(uint i, float v) { y[i] = unpackFloat2x16(ew_f32_to_f16(floatBitsToUint(v))).x; }
#else
layout(std430, binding = 1) writeonly buffer Y { uint y[]; };
void red_st(uint i, float v) { y[i] = floatBitsToUint(v); }
#endif
