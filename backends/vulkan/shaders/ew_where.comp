#version 450
#include "common.glsl"
// ew_where: where with f32 values (see ew_where.glsl).
#include "ew_where.glsl"
