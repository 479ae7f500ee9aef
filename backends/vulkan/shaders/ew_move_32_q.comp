#version 450
#include "common.glsl"
// ew_move_32_q: CONTIGUOUS of 32-bit elements, four an invocation (see ew_copy.glsl).
#define EW_MOVE
#define EW_QUAD
#include "ew_copy.glsl"
