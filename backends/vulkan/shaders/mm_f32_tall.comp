#version 450
#include "common.glsl"
// mm_f32_tall: f32 matmul (mm_tile.glsl) in 256 x 16 tiles, 128
// invocations of 8 x 4 outputs: for outputs of a few columns.
#define BM 256
#define BN 16
#define BK 8
#define TM 8
#define TN 4
#include "mm_tile.glsl"
