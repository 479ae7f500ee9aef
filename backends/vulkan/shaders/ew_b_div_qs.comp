#version 450
#include "common.glsl"
// ew_b_div_qs: div on f32, four an invocation; b splat: a scalar or a column (see ew_binary_v4.glsl).
#define EW_OPS 0x8
#define EW_B_SCALAR
#include "ew_binary_v4.glsl"
