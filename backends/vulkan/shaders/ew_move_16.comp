#version 450
#include "common.glsl"
// ew_move_16: CONTIGUOUS of 16-bit elements (see ew_copy.glsl).
#define EW_MOVE
#define EW_SRC16
#define EW_DST16
#include "ew_copy.glsl"
