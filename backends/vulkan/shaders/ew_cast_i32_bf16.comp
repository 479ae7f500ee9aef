#version 450
#include "common.glsl"
// ew_cast_i32_bf16: CAST from i32 to bf16 (see ew_copy.glsl).
#define EW_SDT EW_I32
#define EW_DDT EW_BF16
#define EW_DST16
#include "ew_copy.glsl"
