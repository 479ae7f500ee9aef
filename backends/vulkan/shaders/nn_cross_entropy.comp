#version 450
#include "common.glsl"
// cross_entropy forward, pass 1 of 2, logits read as floats (nn_ce_loss.glsl)
#include "nn_ce_loss.glsl"
