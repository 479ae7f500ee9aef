#version 450
#include "common.glsl"
// ew_u_tanh_v4: tanh on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x400
#include "ew_unary_v4.glsl"
