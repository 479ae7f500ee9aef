#version 450
#include "common.glsl"
// rows_get_f16: get_rows from an f16 table, widened to f32 (exact).
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#define TELEM float16_t
#define TLOAD(e) float(e)
#include "rows_get.glsl"
