#version 450
#include "common.glsl"
// mm_f16: f16 matmul, accumulated in f32 (mm_tile.glsl).
#define MM_F16
#include "mm_tile.glsl"
