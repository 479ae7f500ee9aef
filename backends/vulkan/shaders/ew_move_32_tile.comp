#version 450
#include "common.glsl"
// ew_move_32_tile: CONTIGUOUS of a transpose of 32-bit elements, 4x4 blocks (see ew_move_tile.glsl).
#include "ew_move_tile.glsl"
