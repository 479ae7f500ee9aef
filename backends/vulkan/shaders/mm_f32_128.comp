#version 450
#include "common.glsl"
// mm_f32_128: f32 matmul, 128 x 128 tiles, 8 x 8 per invocation (big matrices) (mm_tile.glsl).
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#include "mm_tile.glsl"
