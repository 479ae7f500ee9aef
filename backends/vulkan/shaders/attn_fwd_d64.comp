#version 450
#include "common.glsl"
// attn_fwd.glsl for head sizes up to 64.
#define HD 64
#include "attn_fwd.glsl"
