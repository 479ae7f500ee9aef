#version 450
#include "common.glsl"
// opt_adam: the Adam/AdamW step without AMSGrad.
#define AMS 0
#include "opt_exact.glsl"
#include "opt_adam.glsl"
