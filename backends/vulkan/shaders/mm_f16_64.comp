#version 450
#include "common.glsl"
// mm_f16_64: f16 matmul accumulated in f32, 64 x 64 tiles, 4 x 4 per invocation (small or thin matrices) (mm_tile.glsl).
#define MM_F16
#define BM 64
#define BN 64
#define BK 16
#define TM 4
#define TN 4
#include "mm_tile.glsl"
