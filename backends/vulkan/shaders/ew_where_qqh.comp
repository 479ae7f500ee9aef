#version 450
#include "common.glsl"
// ew_where_qqh: where with f16 values, four an invocation; a and b in quads (see ew_where_v4.glsl).
#define EW_T16
#include "ew_where_v4.glsl"
