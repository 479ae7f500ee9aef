#version 450
#include "common.glsl"
// ew_u_log_s: log on f32, any strided input (see ew_unary_s.glsl).
#define EW_OPS 0x10
#include "ew_unary_s.glsl"
