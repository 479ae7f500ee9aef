// ew_io.glsl — element loads and stores for the element-wise kernels in the
// storage type EW_T16 selects: f32 (bound as uint, moved as bits) or f16
// (bound as float16_t, converted on bits as core/dtype.c rounds, so f16 ops
// compute in f32 like the CPU backend's widened path).
#ifdef EW_T16
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
// as f16vec4, each element converted as above.
#ifdef EW_T16
#define EW_STORE4_T f16vec4
#else
#define EW_STORE4_T uvec4
#endif
vec4 ew_ld4(EW_STORE4_T v) { return vec4(ew_ld(v.x), ew_ld(v.y), ew_ld(v.z), ew_ld(v.w)); }
EW_STORE4_T ew_st4(vec4 v) { return EW_STORE4_T(ew_st(v.x), ew_st(v.y), ew_st(v.z), ew_st(v.w)); }
