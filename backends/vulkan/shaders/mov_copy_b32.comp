#version 450
#include "common.glsl"
// mov_copy_b32: mov_copy.glsl for 32-bit elements.
#define MOV_BITS 32
#include "mov_elem.glsl"
#include "mov_copy.glsl"
