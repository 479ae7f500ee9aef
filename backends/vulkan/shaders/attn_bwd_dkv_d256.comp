#version 450
#include "common.glsl"
// attn_bwd_dkv.glsl for head sizes up to 256.
#define HD 256
#include "attn_bwd_dkv.glsl"
