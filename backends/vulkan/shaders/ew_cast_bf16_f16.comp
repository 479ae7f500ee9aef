#version 450
#include "common.glsl"
// ew_cast_bf16_f16: CAST from bf16 to f16 (see ew_copy.glsl).
#define EW_SDT EW_BF16
#define EW_DDT EW_F16
#define EW_SRC16
#define EW_DST16
#include "ew_copy.glsl"
