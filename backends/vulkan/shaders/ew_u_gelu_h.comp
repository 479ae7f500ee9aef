#version 450
#include "common.glsl"
// ew_u_gelu_h: gelu/gelu_grad on f16, computed in f32 (see ew_unary_s.glsl).
#define EW_OPS 0x44000
#define EW_T16
#include "ew_unary_s.glsl"
