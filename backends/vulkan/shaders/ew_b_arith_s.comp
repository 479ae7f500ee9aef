#version 450
#include "common.glsl"
// ew_b_arith_s: add/sub/mul/cmp on f32, any strided sources (see ew_binary_s.glsl).
#define EW_OPS 0x17
#include "ew_binary_s.glsl"
