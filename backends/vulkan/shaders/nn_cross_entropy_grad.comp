#version 450
#include "common.glsl"
// cross_entropy backward, pass 2 of 2, floats (nn_ce_grad.glsl)
#include "nn_ce_grad.glsl"
