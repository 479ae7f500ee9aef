#version 450
#include "common.glsl"
// ew_u_pow_h: pow on f16, computed in f32 (see ew_unary_s.glsl).
#define EW_OPS 0x200
#define EW_T16
#include "ew_unary_s.glsl"
