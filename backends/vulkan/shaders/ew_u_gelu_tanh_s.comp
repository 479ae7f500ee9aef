#version 450
#include "common.glsl"
// ew_u_gelu_tanh_s: gelu_tanh on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x8000
#include "ew_unary_s.glsl"
