#version 450
#include "common.glsl"
// ew_u_cheap_h: neg/scale/add_scalar/abs/sign/relu/leaky_relu on f16, computed in f32 (see ew_unary_s.glsl).
#define EW_OPS 0x3187
#define EW_T16
#include "ew_unary_s.glsl"
