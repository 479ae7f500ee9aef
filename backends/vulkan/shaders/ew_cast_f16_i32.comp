#version 450
#include "common.glsl"
// ew_cast_f16_i32: CAST from f16 to i32 (see ew_copy.glsl).
#define EW_SDT EW_F16
#define EW_DDT EW_I32
#define EW_SRC16
#include "ew_copy.glsl"
