#version 450
#include "common.glsl"
// ew_copy_16_16: CONTIGUOUS/CAST from 16-bit to 16-bit elements (see ew_copy.glsl).
#define EW_SRC16
#define EW_DST16
#include "ew_copy.glsl"
