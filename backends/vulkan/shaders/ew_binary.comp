#version 450
#include "common.glsl"
// ew_binary: binary ops on f32 (see ew_binary.glsl).
#include "ew_binary.glsl"
