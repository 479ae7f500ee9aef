#version 450
#include "common.glsl"
// mm_f32_splitk: f32 matmul split along K (mm_splitk.glsl): 4 x 4
// blocks of C, each summed by 64 invocations.
#define TM 4
#define TN 4
#define NT 64
#include "mm_splitk.glsl"
