/* tokenizer.h — what core/tokenizer.c shares with its pre-tokenizers
 * (core/tokenizer_split.c); not installed. */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include "internal.h"

enum { KILN__SPLIT_GPT2, KILN__SPLIT_LLAMA3, KILN__SPLIT_QWEN2 };

/* Where the pre-token starting at byte i of s[0..n) ends (> i). */
size_t kiln__pretok_next(int mode, const unsigned char *s, size_t n, size_t i);

#endif
