#version 450
#include "common.glsl"
// ew_where_qs: where with f32 values, four an invocation; b splat (see ew_where_v4.glsl).
#define EW_B_SPLAT
#include "ew_where_v4.glsl"
