#version 450
#include "common.glsl"
// attn_bwd_dq.glsl for head sizes up to 32, multiples of 4 read as vec4.
#define HD 32
#define VW 4
#include "attn_bwd_dq.glsl"
