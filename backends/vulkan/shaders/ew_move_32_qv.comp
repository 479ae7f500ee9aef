#version 450
#include "common.glsl"
// ew_move_32_qv: CONTIGUOUS of 32-bit elements contiguous along the innermost dim, one uvec4 an invocation (see ew_copy.glsl).
#define EW_MOVE
#define EW_QUAD
#define EW_VLOAD
#include "ew_copy.glsl"
