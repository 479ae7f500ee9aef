#version 450
#include "common.glsl"
// ew_u_pow_v4: pow on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x200
#include "ew_unary_v4.glsl"
