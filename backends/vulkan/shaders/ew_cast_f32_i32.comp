#version 450
#include "common.glsl"
// ew_cast_f32_i32: CAST from f32 to i32 (see ew_copy.glsl).
#define EW_SDT EW_F32
#define EW_DDT EW_I32
#include "ew_copy.glsl"
