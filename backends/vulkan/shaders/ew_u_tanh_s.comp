#version 450
#include "common.glsl"
// ew_u_tanh_s: tanh on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x400
#include "ew_unary_s.glsl"
