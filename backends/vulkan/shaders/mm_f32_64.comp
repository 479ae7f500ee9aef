#version 450
#include "common.glsl"
// mm_f32_64: f32 matmul (mm_tile.glsl) in 64 x 64 tiles,
// 64 invocations of 8 x 8 outputs: for small outputs and many small
// batch matrices (lavapipe pays per invocation of a workgroup with barriers).
#define BM 64
#define BN 64
#define BK 8
#define TM 8
#define TN 8
#include "mm_tile.glsl"
