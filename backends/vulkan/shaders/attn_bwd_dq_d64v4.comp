#version 450
#include "common.glsl"
// attn_bwd_dq.glsl for head sizes up to 64, multiples of 4 read as vec4.
#define HD 64
#define VW 4
#include "attn_bwd_dq.glsl"
