/* nn_attention_flash.c — blocked (flash) attention forward and backward
 * for f32 and f64: the one template in nn_attention_flash.h, instantiated
 * for each type. */
#include "nn_attention_simd.h"

#include "pool.h"

#include <math.h>

#define FA_T float
#define FA_SUF f32
#define FA_EXP expf
#define FA_LOG logf
#define FA_TANH tanhf
#include "nn_attention_flash.h"
#undef FA_T
#undef FA_SUF
#undef FA_EXP
#undef FA_LOG
#undef FA_TANH

#define FA_T double
#define FA_SUF f64
#define FA_EXP exp
#define FA_LOG log
#define FA_TANH tanh
#include "nn_attention_flash.h"
