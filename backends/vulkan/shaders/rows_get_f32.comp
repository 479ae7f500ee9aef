#version 450
#include "common.glsl"
// rows_get_f32: get_rows from an f32 table; the bits are moved as they are.
#define TELEM uint
#define TLOAD(e) uintBitsToFloat(e)
#include "rows_get.glsl"
