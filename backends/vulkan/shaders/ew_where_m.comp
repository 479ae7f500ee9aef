#version 450
#include "common.glsl"
// ew_where_m: where with f32 values, up to 4 dims (see ew_where.glsl).
#define EW_MAGIC
#include "ew_where.glsl"
