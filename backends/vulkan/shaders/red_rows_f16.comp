#version 450
#include "common.glsl"
// red_rows_f16: reductions, f16 in, f16 out (see red_rows.glsl).
#define RED_IN16
#define RED_OUT16
#include "red_rows.glsl"
