#version 450
#include "common.glsl"
// red_cols_f16: reductions, f16 in, f16 out (see red_cols.glsl).
#define RED_IN16
#define RED_OUT16
#include "red_cols.glsl"
