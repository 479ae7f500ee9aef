#version 450
#include "common.glsl"
// ew_where_qq: where with f32 values, four an invocation; a and b in quads (see ew_where_v4.glsl).
#include "ew_where_v4.glsl"
