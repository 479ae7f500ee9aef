#version 450
#include "common.glsl"
// mm_f16_splitk: f16 matmul accumulated in f32 split along K (mm_splitk.glsl): 4 x 4
// blocks of C, each summed by 64 invocations.
#define MM_F16
#define TM 4
#define TN 4
#define NT 64
#include "mm_splitk.glsl"
