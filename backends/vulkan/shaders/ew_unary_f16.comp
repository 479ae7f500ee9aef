#version 450
#include "common.glsl"
// ew_unary_f16: unary ops on f16, computed in f32 (see ew_unary.glsl).
#define EW_T16
#include "ew_unary.glsl"
