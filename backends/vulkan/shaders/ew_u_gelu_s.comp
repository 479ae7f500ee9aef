#version 450
#include "common.glsl"
// ew_u_gelu_s: gelu/gelu_grad on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x44000
#include "ew_unary_s.glsl"
