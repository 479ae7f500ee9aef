#version 450
#include "common.glsl"
// mov_embed_b64: mov_embed.glsl for 64-bit elements.
#define MOV_BITS 64
#include "mov_elem.glsl"
#include "mov_embed.glsl"
