#version 450
#include "common.glsl"
// attn_fwd.glsl for head sizes up to 128.
#define HD 128
#include "attn_fwd.glsl"
