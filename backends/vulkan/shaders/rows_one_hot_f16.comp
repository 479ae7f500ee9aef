#version 450
#include "common.glsl"
// rows_one_hot_f16: one_hot into f16.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define YELEM float16_t
#include "rows_one_hot.glsl"
