#version 450
#include "common.glsl"
// ew_move_32: CONTIGUOUS of 32-bit elements (see ew_copy.glsl).
#define EW_MOVE
#include "ew_copy.glsl"
