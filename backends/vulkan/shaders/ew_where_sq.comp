#version 450
#include "common.glsl"
// ew_where_sq: where with f32 values, four an invocation; a splat (see ew_where_v4.glsl).
#define EW_A_SPLAT
#include "ew_where_v4.glsl"
