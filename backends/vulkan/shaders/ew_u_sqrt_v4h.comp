#version 450
#include "common.glsl"
// ew_u_sqrt_v4h: sqrt/rsqrt on contiguous f16, computed in f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x60
#define EW_T16
#include "ew_unary_v4.glsl"
