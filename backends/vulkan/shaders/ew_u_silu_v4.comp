#version 450
#include "common.glsl"
// ew_u_silu_v4: silu on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x10000
#include "ew_unary_v4.glsl"
