#version 450
#include "common.glsl"
// mov_copy_b16: mov_copy.glsl for 16-bit elements.
#define MOV_BITS 16
#include "mov_elem.glsl"
#include "mov_copy.glsl"
