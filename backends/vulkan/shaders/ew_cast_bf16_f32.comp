#version 450
#include "common.glsl"
// ew_cast_bf16_f32: CAST from bf16 to f32 (see ew_copy.glsl).
#define EW_SDT EW_BF16
#define EW_DDT EW_F32
#define EW_SRC16
#include "ew_copy.glsl"
