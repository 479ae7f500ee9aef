#version 450
#include "common.glsl"
// opt_sgd: the SGD step without momentum.
#define MOMENTUM 0
#include "opt_sgd.glsl"
