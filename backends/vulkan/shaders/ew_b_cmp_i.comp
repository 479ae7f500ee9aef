#version 450
#include "common.glsl"
// ew_b_cmp_i: cmp on i32, any strided sources (see ew_binary_s.glsl).
#define EW_INT
#include "ew_binary_s.glsl"
