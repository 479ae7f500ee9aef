#version 450
#include "common.glsl"
// ew_where_sqh: where with f16 values, four an invocation; a splat (see ew_where_v4.glsl).
#define EW_A_SPLAT
#define EW_T16
#include "ew_where_v4.glsl"
