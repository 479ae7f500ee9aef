#version 450
#include "common.glsl"
// ew_b_arith_qs: add/sub/mul/cmp on f32, four an invocation; b splat: a scalar or a column (see ew_binary_v4.glsl).
#define EW_OPS 0x17
#define EW_B_SCALAR
#include "ew_binary_v4.glsl"
