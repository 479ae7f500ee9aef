#version 450
#include "common.glsl"
// red_cols_f16i: reductions, f16 in, i32 out (argmax) (see red_cols.glsl).
#define RED_IN16
#include "red_cols.glsl"
