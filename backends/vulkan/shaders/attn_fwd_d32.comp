#version 450
#include "common.glsl"
// attn_fwd.glsl for head sizes up to 32.
#define HD 32
#include "attn_fwd.glsl"
