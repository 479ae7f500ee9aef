// ew_io.glsl — element loads and stores for the element-wise kernels in the
// storage type EW_T16 or EW_TB16 selects: f32 (bound as uint, moved as
// bits), f16 (bound as float16_t) or bf16 (its bits in a uint16_t: 16-bit
// storage is all it needs), converted on bits as core/dtype.c rounds, so
// 16-bit ops compute in f32 like the CPU backend's widened path.
#if defined(EW_TB16)
#extension GL_EXT_shader_16bit_storage : require
#define EW_STORE_T uint16_t
// macros: a 16-bit type may not be a parameter or a result
#define ew_ld(h) uintBitsToFloat(ew_bf16_to_f32(uint(h)))
#define ew_st(v) uint16_t(ew_f32_to_bf16(floatBitsToUint(v)))
#elif defined(EW_T16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define EW_STORE_T float16_t
float ew_ld(float16_t h) { return uintBitsToFloat(ew_f16_to_f32(packFloat2x16(f16vec2(h, float16_t(0.0))) & 0xffffu)); }
float16_t ew_st(float v) { return unpackFloat2x16(ew_f32_to_f16(floatBitsToUint(v))).x; }
#else
#define EW_STORE_T uint
float ew_ld(uint b) { return uintBitsToFloat(b); }
uint ew_st(float v) { return floatBitsToUint(v); }
#endif

// Four at a time, for the vector kernels (*_v4.glsl): f32 as uvec4, f16
// as f16vec4, bf16 as u16vec4 (built from a uvec4: 16-bit storage allows
// only conversions), each element converted as above.
#if defined(EW_TB16)
#define EW_STORE4_T u16vec4
uvec4 ew_bf16_4(vec4 v) {
    uvec4 b = floatBitsToUint(v);
    return uvec4(ew_f32_to_bf16(b.x), ew_f32_to_bf16(b.y), ew_f32_to_bf16(b.z), ew_f32_to_bf16(b.w));
}
#define ew_ld4(v) uintBitsToFloat(uvec4(v) << 16)
#define ew_st4(v) u16vec4(ew_bf16_4(v))
#else
#ifdef EW_T16
#define EW_STORE4_T f16vec4
#else
#define EW_STORE4_T uvec4
#endif
vec4 ew_ld4(EW_STORE4_T v) { return vec4(ew_ld(v.x), ew_ld(v.y), ew_ld(v.z), ew_ld(v.w)); }
EW_STORE4_T ew_st4(vec4 v) { return EW_STORE4_T(ew_st(v.x), ew_st(v.y), ew_st(v.z), ew_st(v.w)); }
#endif
