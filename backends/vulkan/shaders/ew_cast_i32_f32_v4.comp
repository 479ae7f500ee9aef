#version 450
#include "common.glsl"
// ew_cast_i32_f32_v4: CAST from i32 to f32, contiguous, four an invocation (see ew_copy.glsl).
#define EW_SDT EW_I32
#define EW_DDT EW_F32
#define EW_CASTV
#include "ew_copy.glsl"
