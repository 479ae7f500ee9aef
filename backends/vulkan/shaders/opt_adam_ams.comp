#version 450
#include "common.glsl"
// opt_adam_ams: the Adam/AdamW step with AMSGrad.
#define AMS 1
#include "opt_exact.glsl"
#include "opt_adam.glsl"
