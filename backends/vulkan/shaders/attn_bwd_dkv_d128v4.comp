#version 450
#include "common.glsl"
// attn_bwd_dkv.glsl for head sizes up to 128, multiples of 4 read as vec4.
#define HD 128
#define VW 4
#include "attn_bwd_dkv.glsl"
