#version 450
#include "common.glsl"
// ew_u_cheap_v4h: neg/scale/add_scalar/abs/sign/relu/leaky_relu on contiguous f16, computed in f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x3187
#define EW_T16
#include "ew_unary_v4.glsl"
