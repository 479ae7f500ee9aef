#version 450
#include "common.glsl"
// ew_u_cheap_v4: neg/scale/add_scalar/abs/sign/relu/leaky_relu on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x3187
#include "ew_unary_v4.glsl"
