#version 450
#include "common.glsl"
// attn_bwd_dq.glsl for head sizes up to 32.
#define HD 32
#include "attn_bwd_dq.glsl"
