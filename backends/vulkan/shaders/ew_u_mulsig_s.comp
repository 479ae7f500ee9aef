#version 450
#include "common.glsl"
// ew_u_mulsig_s: gelu_tanh/silu on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x18000
#include "ew_unary_s.glsl"
