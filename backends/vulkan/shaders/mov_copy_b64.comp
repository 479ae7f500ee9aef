#version 450
#include "common.glsl"
// mov_copy_b64: mov_copy.glsl for 64-bit elements.
#define MOV_BITS 64
#include "mov_elem.glsl"
#include "mov_copy.glsl"
