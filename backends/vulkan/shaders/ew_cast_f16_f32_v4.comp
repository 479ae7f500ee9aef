#version 450
#include "common.glsl"
// ew_cast_f16_f32_v4: CAST from f16 to f32, contiguous, four an invocation (see ew_copy.glsl).
#define EW_SDT EW_F16
#define EW_DDT EW_F32
#define EW_SRC16
#define EW_CASTV
#include "ew_copy.glsl"
