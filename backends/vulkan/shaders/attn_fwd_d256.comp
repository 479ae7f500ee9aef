#version 450
#include "common.glsl"
// attn_fwd.glsl for head sizes up to 256.
#define HD 256
#include "attn_fwd.glsl"
