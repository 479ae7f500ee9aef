#version 450
#include "common.glsl"
// ew_copy_32_32: CONTIGUOUS/CAST from 32-bit to 32-bit elements (see ew_copy.glsl).
#include "ew_copy.glsl"
