#version 450
#include "common.glsl"
// red_rows: reductions, f32 in, f32 (i32 for argmax) out (see red_rows.glsl).
#include "red_rows.glsl"
