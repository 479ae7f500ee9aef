#version 450
#include "common.glsl"
// opt_sgd_mom: the SGD step with a momentum buffer.
#define MOMENTUM 1
#include "opt_sgd.glsl"
