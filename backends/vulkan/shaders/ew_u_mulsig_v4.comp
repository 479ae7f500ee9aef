#version 450
#include "common.glsl"
// ew_u_mulsig_v4: gelu_tanh/silu on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x18000
#include "ew_unary_v4.glsl"
