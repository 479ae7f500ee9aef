#version 450
#include "common.glsl"
// ew_where_mh: where with f16 values, up to 4 dims (see ew_where.glsl).
#define EW_MAGIC
#define EW_T16
#include "ew_where.glsl"
