#version 450
#include "common.glsl"
// ew_u_softplus_v4: softplus on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x20000
#include "ew_unary_v4.glsl"
