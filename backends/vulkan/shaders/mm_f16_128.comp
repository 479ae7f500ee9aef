#version 450
#include "common.glsl"
// mm_f16_128: f16 matmul accumulated in f32 (mm_tile.glsl) in 128 x 128 tiles, 256 invocations
// of 8 x 8 outputs: for big outputs.
#define MM_F16
#define BM 128
#define BN 128
#define BK 8
#define TM 8
#define TN 8
#include "mm_tile.glsl"
