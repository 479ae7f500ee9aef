#version 450
#include "common.glsl"
// ew_u_gtgrad_s: gelu_tanh_grad on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x80000
#include "ew_unary_s.glsl"
