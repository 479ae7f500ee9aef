#version 450
#include "common.glsl"
// rows_one_hot_f32: one_hot into f32.
#define YELEM float
#include "rows_one_hot.glsl"
