#version 450
#include "common.glsl"
// ew_u_exp_s: exp on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x8
#include "ew_unary_s.glsl"
