#version 450
#include "common.glsl"
// attn_fwd.glsl for any head size up to 256, read as floats.
#define HD 256
#define VW 1
#include "attn_fwd.glsl"
