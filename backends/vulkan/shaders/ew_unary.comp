#version 450
#include "common.glsl"
// ew_unary: unary ops on f32 (see ew_unary.glsl).
#include "ew_unary.glsl"
