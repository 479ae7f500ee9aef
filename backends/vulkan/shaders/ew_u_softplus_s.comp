#version 450
#include "common.glsl"
// ew_u_softplus_s: softplus on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x20000
#include "ew_unary_s.glsl"
