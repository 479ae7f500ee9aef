#version 450
#include "common.glsl"
// ew_u_sigmoid_v4: sigmoid on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x800
#include "ew_unary_v4.glsl"
