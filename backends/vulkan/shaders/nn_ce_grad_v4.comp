#version 450
#include "common.glsl"
// cross_entropy backward, pass 2 of 2, vec4 (nn_ce_grad.glsl)
#define CE_V4
#include "nn_ce_grad.glsl"
