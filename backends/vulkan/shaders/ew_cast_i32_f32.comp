#version 450
#include "common.glsl"
// ew_cast_i32_f32: CAST from i32 to f32 (see ew_copy.glsl).
#define EW_SDT EW_I32
#define EW_DDT EW_F32
#include "ew_copy.glsl"
