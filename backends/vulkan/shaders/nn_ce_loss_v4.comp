#version 450
#include "common.glsl"
// cross_entropy forward, pass 1 of 2, logits read as vec4 (nn_ce_loss.glsl)
#define CE_V4
#include "nn_ce_loss.glsl"
