// mm_elem.glsl — ELEM, the storage type of the matmul kernels' A, B and
// C, and LOAD / STORE between it and the f32 they compute in: float16_t
// when the including file defines MM_F16, bf16's bits in a uint16_t with
// MM_BF16_STORAGE (16-bit storage is all it needs: the arithmetic is f32),
// else float. STORE rounds to nearest even; a NaN stays a quiet NaN
// (kiln__f32_to_bf16).
#if defined(MM_F16)
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define ELEM float16_t
#define LOAD(x) float(x)
#define STORE(v) float16_t(v)
#elif defined(MM_BF16_STORAGE)
#extension GL_EXT_shader_16bit_storage : require
#define ELEM uint16_t
uint mm_bf16_bits(float v) {
    uint x = floatBitsToUint(v);
    if ((x & 0x7fffffffu) > 0x7f800000u) return (x >> 16) | 0x40u;
    return (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
}
#define LOAD(x) uintBitsToFloat(uint(x) << 16)
#define STORE(v) uint16_t(mm_bf16_bits(v))
#else
#define ELEM float
#define LOAD(x) (x)
#define STORE(v) (v)
#endif
