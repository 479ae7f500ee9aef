#version 450
#include "common.glsl"
// ew_b_div_qq: div on f32, four an invocation; both sources in quads (see ew_binary_v4.glsl).
#define EW_OPS 0x8
#include "ew_binary_v4.glsl"
