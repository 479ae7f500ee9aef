/* test_llama_util.h — helpers shared by the llama file and inference tests
 * (test_llama_files.c, test_llama_infer.c): logits of a token sequence
 * through a llama's full forward, their largest difference, and random
 * weights.
 *
 *     llama_test_randomize(m, 30, 0.08);
 *     float *logits = llama_test_logits(m, tokens, 7);   // [7, vocab], free()
 */
#ifndef TEST_LLAMA_UTIL_H
#define TEST_LLAMA_UTIL_H

#include "llama.h"

/* Logits [n, vocab] of tokens[0..n) through m (no cache), malloc'd; NULL
 * on failure. */
float *llama_test_logits(llama *m, const int32_t *tokens, int64_t n);

/* max |a - b| over n values (b NULL: max |a|) */
double llama_test_max_diff(const float *a, const float *b, int64_t n);

/* Norm weights N(1, 0.1), every other parameter N(0, sd); parameter i
 * drawn with seed + i. */
void llama_test_randomize(llama *m, uint64_t seed, double sd);

#endif
