#version 450
#include "common.glsl"
// attn_bwd_dkv.glsl for head sizes up to 128.
#define HD 128
#include "attn_bwd_dkv.glsl"
