#version 450
#include "common.glsl"
// ew_b_div_s: div on f32, any strided sources (see ew_binary_s.glsl).
#define EW_OPS 0x8
#include "ew_binary_s.glsl"
