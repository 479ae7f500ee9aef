#version 450
#include "common.glsl"
// attn_bwd_dq.glsl for any head size up to 256, read as floats.
#define HD 256
#define VW 1
#include "attn_bwd_dq.glsl"
