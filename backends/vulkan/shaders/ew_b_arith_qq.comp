#version 450
#include "common.glsl"
// ew_b_arith_qq: add/sub/mul/cmp on f32, four an invocation; both sources in quads (see ew_binary_v4.glsl).
#define EW_OPS 0x17
#include "ew_binary_v4.glsl"
