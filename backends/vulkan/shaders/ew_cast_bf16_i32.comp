#version 450
#include "common.glsl"
// ew_cast_bf16_i32: CAST from bf16 to i32 (see ew_copy.glsl).
#define EW_SDT EW_BF16
#define EW_DDT EW_I32
#define EW_SRC16
#include "ew_copy.glsl"
