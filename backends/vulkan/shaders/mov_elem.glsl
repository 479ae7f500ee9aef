// mov_elem.glsl — the element type of the movement kernels. Copies move
// bits, so a dtype is only its width: MOV_BITS 32 (f32, i32) as uint, 64
// (f64) as uvec2, 16 (f16, bf16) as float16_t, loaded and stored unchanged.
#if MOV_BITS == 16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define ELEM float16_t
#define ELEM_FILL(lo, hi) unpackFloat2x16(lo).x // the fill's bits in the low half
#elif MOV_BITS == 64
#define ELEM uvec2
#define ELEM_FILL(lo, hi) uvec2(lo, hi)
#else
#define ELEM uint
#define ELEM_FILL(lo, hi) (lo)
#endif
