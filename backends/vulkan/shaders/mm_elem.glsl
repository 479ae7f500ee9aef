// mm_elem.glsl — ELEM, the storage type of the matmul kernels' A, B and
// C: float16_t when the including file defines MM_F16, else float.
#ifdef MM_F16
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define ELEM float16_t
#else
#define ELEM float
#endif
