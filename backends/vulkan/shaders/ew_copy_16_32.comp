#version 450
#include "common.glsl"
// ew_copy_16_32: CONTIGUOUS/CAST from 16-bit to 32-bit elements (see ew_copy.glsl).
#define EW_SRC16
#include "ew_copy.glsl"
