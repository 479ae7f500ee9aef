#version 450
#include "common.glsl"
// mm_f32: f32 matmul (mm_tile.glsl).
#include "mm_tile.glsl"
