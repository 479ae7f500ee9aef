#version 450
#include "common.glsl"
// ew_b_div_sq: div on f32, four an invocation; a splat: a scalar or a column (see ew_binary_v4.glsl).
#define EW_OPS 0x8
#define EW_A_SCALAR
#include "ew_binary_v4.glsl"
