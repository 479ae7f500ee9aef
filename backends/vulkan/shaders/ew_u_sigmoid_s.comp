#version 450
#include "common.glsl"
// ew_u_sigmoid_s: sigmoid on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x800
#include "ew_unary_s.glsl"
