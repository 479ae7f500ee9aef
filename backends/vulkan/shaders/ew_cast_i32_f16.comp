#version 450
#include "common.glsl"
// ew_cast_i32_f16: CAST from i32 to f16 (see ew_copy.glsl).
#define EW_SDT EW_I32
#define EW_DDT EW_F16
#define EW_DST16
#include "ew_copy.glsl"
