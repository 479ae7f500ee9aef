#version 450
#include "common.glsl"
// ew_u_pow_s: pow on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x200
#include "ew_unary_s.glsl"
