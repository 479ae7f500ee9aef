#version 450
#include "common.glsl"
// red_cols: reductions, f32 in, f32 (i32 for argmax) out (see red_cols.glsl).
#include "red_cols.glsl"
