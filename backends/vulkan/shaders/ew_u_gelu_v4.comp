#version 450
#include "common.glsl"
// ew_u_gelu_v4: gelu/gelu_grad on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x44000
#include "ew_unary_v4.glsl"
