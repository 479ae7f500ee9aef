#version 450
#include "common.glsl"
// red_rows_f16i: reductions, f16 in, i32 out (argmax) (see red_rows.glsl).
#define RED_IN16
#include "red_rows.glsl"
