#version 450
#include "common.glsl"
// ew_u_gtgrad_v4: gelu_tanh_grad on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x80000
#include "ew_unary_v4.glsl"
