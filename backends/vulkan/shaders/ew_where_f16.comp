#version 450
#include "common.glsl"
// ew_where_f16: where with f16 values (see ew_where.glsl).
#define EW_T16
#include "ew_where.glsl"
