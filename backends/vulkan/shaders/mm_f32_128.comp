#version 450
#include "common.glsl"
// mm_f32_128: f32 matmul (mm_tile.glsl) in 128 x 128 tiles, 256 invocations
// of 8 x 8 outputs: for big outputs.
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#include "mm_tile.glsl"
