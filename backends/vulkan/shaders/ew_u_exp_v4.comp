#version 450
#include "common.glsl"
// ew_u_exp_v4: exp on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x8
#include "ew_unary_v4.glsl"
