#version 450
#include "common.glsl"
// attn_fwd.glsl for head sizes up to 64, multiples of 4 read as vec4.
#define HD 64
#define VW 4
#include "attn_fwd.glsl"
