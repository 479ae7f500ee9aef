#version 450
#include "common.glsl"
// ew_u_sqrt_s: sqrt/rsqrt on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x60
#include "ew_unary_s.glsl"
