#version 450
#include "common.glsl"
// ew_binary_f16: binary ops on f16, computed in f32 (see ew_binary.glsl).
#define EW_T16
#include "ew_binary.glsl"
