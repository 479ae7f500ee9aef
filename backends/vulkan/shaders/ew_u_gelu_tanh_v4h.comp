#version 450
#include "common.glsl"
// ew_u_gelu_tanh_v4h: gelu_tanh on contiguous f16, computed in f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x8000
#define EW_T16
#include "ew_unary_v4.glsl"
