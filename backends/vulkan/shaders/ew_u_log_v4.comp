#version 450
#include "common.glsl"
// ew_u_log_v4: log on contiguous f32, four an invocation (see ew_unary_v4.glsl).
#define EW_OPS 0x10
#include "ew_unary_v4.glsl"
