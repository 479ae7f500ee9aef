#version 450
#include "common.glsl"
// ew_copy_32_16: CONTIGUOUS/CAST from 32-bit to 16-bit elements (see ew_copy.glsl).
#define EW_DST16
#include "ew_copy.glsl"
