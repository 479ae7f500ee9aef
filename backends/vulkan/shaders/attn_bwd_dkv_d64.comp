#version 450
#include "common.glsl"
// attn_bwd_dkv.glsl for head sizes up to 64.
#define HD 64
#include "attn_bwd_dkv.glsl"
