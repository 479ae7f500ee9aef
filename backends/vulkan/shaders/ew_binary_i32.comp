#version 450
#include "common.glsl"
// ew_binary_i32: CMP on i32 (see ew_binary.glsl).
#define EW_INT
#include "ew_binary.glsl"
