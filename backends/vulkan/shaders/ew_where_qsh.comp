#version 450
#include "common.glsl"
// ew_where_qsh: where with f16 values, four an invocation; b splat (see ew_where_v4.glsl).
#define EW_B_SPLAT
#define EW_T16
#include "ew_where_v4.glsl"
