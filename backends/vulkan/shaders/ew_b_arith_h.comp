#version 450
#include "common.glsl"
// ew_b_arith_h: add/sub/mul/cmp on f16, computed in f32 (see ew_binary_s.glsl).
#define EW_OPS 0x17
#define EW_T16
#include "ew_binary_s.glsl"
