#version 450
#include "common.glsl"
// ew_u_sqrt_v4: sqrt/rsqrt on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x60
#include "ew_unary_v4.glsl"
