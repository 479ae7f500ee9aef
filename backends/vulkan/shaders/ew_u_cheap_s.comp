#version 450
#include "common.glsl"
// ew_u_cheap_s: neg/scale/add_scalar/abs/sign/relu/leaky_relu on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x3187
#include "ew_unary_s.glsl"
