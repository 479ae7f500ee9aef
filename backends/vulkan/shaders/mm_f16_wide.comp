#version 450
#include "common.glsl"
// mm_f16_wide: f16 matmul accumulated in f32 (mm_tile.glsl) in 16 x 256 tiles, 128
// invocations of 4 x 8 outputs: for outputs of a few rows (a 64-row tile
// would compute mostly padding).
#define MM_F16
#define BM 16
#define BN 256
#define BK 8
#define TM 4
#define TN 8
#include "mm_tile.glsl"
