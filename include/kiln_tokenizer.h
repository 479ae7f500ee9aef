/* kiln_tokenizer.h — tokenizers: byte-level BPE (GPT-2, Llama 3) from a
 * Hugging Face tokenizer.json or a GGUF file, and SentencePiece-style
 * vocabularies from GGUF. Part of kiln.h.
 *
 * Usage:
 *
 *     kiln_tokenizer *tok = kiln_tokenizer_from_json("tokenizer.json");
 *     int32_t ids[256];
 *     int64_t n = 0;
 *     if (!tok || kiln_tokenizer_encode(tok, "Hello world", 11, false, ids, 256, &n))
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *     kiln_tokenizer_free(tok);
 */
#ifndef KILN_TOKENIZER_H
#define KILN_TOKENIZER_H

#include "kiln_files.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tokenizers ----------------------------------------------------- */
/* Byte-level BPE as GPT-2 and Llama 3 use it, from a Hugging Face
 * tokenizer.json (model "BPE": vocab, merges, added_tokens) or from GGUF's
 * tokenizer.ggml.* metadata (model "gpt2": tokens, merges, token_type,
 * bos/eos ids). Encoding splits the text as the pre-tokenizer's regex does
 * (GPT-2's, Llama 3's, Qwen 2's; from GGUF also Mistral's Tekken, and
 * llama.cpp's "default" for a file that names none; written out by hand
 * as llama.cpp reads them), maps each byte to
 * GPT-2's printable stand-in character and applies the merges by rank;
 * decoding maps back to bytes, so decode(encode(s)) == s for any bytes,
 * invalid UTF-8 included. Letters and numbers are Unicode's (15.0)
 * general categories L* and N*, as in llama.cpp.
 * GGUF's "llama" model (SentencePiece BPE with scores, Llama 1/2) works
 * as llama.cpp's: '\u2581' for spaces, one in front of the text and after
 * each special token (add_space_prefix), merges by highest score, <0xXX>
 * byte fallback; decode drops the spaces encode put in, so the round trip
 * holds too, except that a U+2581 in the text comes back as a space.
 * tokenizer.json's SentencePiece form (Llama 2 on Hugging Face: BPE with
 * byte_fallback, Prepend/Replace normalizer or Metaspace pre-tokenizer) is
 * read too, its merges applied by rank over characters.
 * Not supported (an error that says so): other pre-tokenizer regexes and
 * normalizers, Metaspace with split, WordPiece/Unigram models.
 * No BOS is added: put kiln_tokenizer_bos() in front yourself when the
 * model wants one (kiln_tokenizer_add_bos).
 *
 *     kiln_tokenizer *tok = kiln_tokenizer_from_json("tokenizer.json");
 *     int32_t ids[256];
 *     int64_t n;
 *     kiln_tokenizer_encode(tok, "Hello world", 11, false, ids, 256, &n);
 *     char text[1024];
 *     size_t len;
 *     kiln_tokenizer_decode(tok, ids, n, text, sizeof text, &len);
 *     kiln_tokenizer_free(tok);
 */
typedef struct kiln_tokenizer kiln_tokenizer;
kiln_tokenizer *kiln_tokenizer_from_json(const char *path);
kiln_tokenizer *kiln_tokenizer_from_gguf(const kiln_gguf *g);
void kiln_tokenizer_free(kiln_tokenizer *t);
int64_t kiln_tokenizer_vocab_size(const kiln_tokenizer *t); /* largest id + 1 */
/* -1 when the file does not say (tokenizer.json never does: set them). */
int32_t kiln_tokenizer_bos(const kiln_tokenizer *t);
int32_t kiln_tokenizer_eos(const kiln_tokenizer *t);
void kiln_tokenizer_set_bos_eos(kiln_tokenizer *t, int32_t bos, int32_t eos);
/* The token's text as the vocabulary writes it (NULL for an unused id). */
/* The special ids GGUF names (tokenizer.ggml.*_token_id), -1 for none.
 * EOT, where the file names none, is the token spelled as a chat template
 * ends a turn (<|eot_id|>, <|im_end|>, <|end|>, <end_of_turn>, ...). */
typedef enum { KILN_TOK_BOS, KILN_TOK_EOS, KILN_TOK_EOT, KILN_TOK_UNK, KILN_TOK_PAD } kiln_tok_special;
int32_t kiln_tokenizer_special(const kiln_tokenizer *t, kiln_tok_special which);
/* Whether id ends a generation, as llama.cpp decides it: the eos, eot and
 * eom ids and the tokens spelled <|eot_id|>, <|im_end|>, <|end|>,
 * <end_of_turn>, <|endoftext|>, <|eom_id|>, <EOT>. */
bool kiln_tokenizer_is_eog(const kiln_tokenizer *t, int32_t id);
/* Whether the model wants BOS in front of a prompt, EOS after it
 * (tokenizer.ggml.add_bos_token / add_eos_token; llama.cpp's defaults: BOS
 * for SentencePiece and Llama 3). encode adds neither: the caller does. */
bool kiln_tokenizer_add_bos(const kiln_tokenizer *t);
bool kiln_tokenizer_add_eos(const kiln_tokenizer *t);
const char *kiln_tokenizer_token(const kiln_tokenizer *t, int32_t id);
int32_t kiln_tokenizer_find(const kiln_tokenizer *t, const char *token); /* id or -1 */
/* len bytes of text to ids. special: control tokens written in the text
 * ("<|endoftext|>") become their ids; otherwise they are plain text.
 * User-defined tokens (GGUF's type 4, tokenizer.json's added tokens not
 * marked special) always become their ids, as in llama.cpp.
 * *n is the number of ids; at most cap are written and more than cap is
 * KILN_ERR_ARG (kiln_tokenizer_max_ids(t, len) ids always suffice). */
/* The most ids encode can make of len bytes: len + 1 for byte-level BPE;
 * 4 * len + 3 for SentencePiece, whose byte fallback spells a space (the
 * one it puts in front too) as the three bytes of U+2581. */
int64_t kiln_tokenizer_max_ids(const kiln_tokenizer *t, size_t len);
kiln_status kiln_tokenizer_encode(const kiln_tokenizer *t, const char *text, size_t len, bool special, int32_t *ids,
                                  int64_t cap, int64_t *n);
/* ids to bytes (not NUL-terminated); *len as for encode, KILN_ERR_ARG when
 * it exceeds cap. An id out of range is KILN_ERR_ARG; an unused id (a
 * hole, or GGUF's type 5) spells nothing. */
kiln_status kiln_tokenizer_decode(const kiln_tokenizer *t, const int32_t *ids, int64_t n, char *out, size_t cap,
                                  size_t *len);
/* Put the tokenizer in w as GGUF's tokenizer.ggml.* keys ("gpt2" or
 * "llama"): tokens, token types, merges or scores, the special ids, the
 * add_bos / add_eos flags. _padded writes vocab tokens, the ids past the
 * tokenizer's as unused "[PAD<id>]" (as llama.cpp's converter: a model's
 * embedding often has more rows than its tokenizer has tokens, and
 * llama.cpp wants one token per row). */
kiln_status kiln_tokenizer_to_gguf(const kiln_tokenizer *t, kiln_gguf_writer *w);
kiln_status kiln_tokenizer_to_gguf_padded(const kiln_tokenizer *t, kiln_gguf_writer *w, int64_t vocab);
/* A SentencePiece vocabulary of bytes for a model that has no tokenizer
 * (a random one): <unk> 0, <s> 1 (BOS), </s> 2 (EOS), <0x00>..<0xFF> at
 * 3..258, U+2581 (a space) at 259, the ids past those unused; under 260
 * ids, the bytes that fit,
 * the others <unk> (llama.cpp wants <0x0A>: 14 ids at least). */
kiln_tokenizer *kiln_tokenizer_bytes(int64_t vocab);

/* ---- chat templates ------------------------------------------------- */
/* A conversation as the text a chat model was trained on, rendered as the
 * Jinja template in its GGUF (tokenizer.chat_template) renders it for
 * messages of role and content (no tools). kiln recognizes the templates
 * of the common families by their text rather than running Jinja:
 * Llama 3 ("llama3"; with the 3.1-3.3 system header and its date:
 * "llama3.1"), ChatML ("chatml": Qwen 2 and 2.5 with their default system
 * message, Hermes, ...), Phi-3 ("phi3": 3.5 and small; "phi3-mini": mini
 * and medium), Gemma ("gemma") and Mistral ("mistral-v0", "-v1", "-v3",
 * "-v3-tekken", "-v7"); tmpl may also be one of these names. A system
 * message where the template has no place for one goes in front of the
 * first user message with a newline, as llama.cpp does; roles that do not
 * alternate where the template requires it are KILN_ERR_ARG, a template
 * kiln does not recognize KILN_ERR_UNSUPPORTED (the message says which).
 * bos / eos: the tokenizer's texts, written where the template writes
 * them. *len and cap as for kiln_tokenizer_decode; the text is not
 * NUL-terminated. Encode it with special = true, and without another BOS
 * when it starts with one.
 *
 *     kiln_chat_msg chat[] = {{"system", "Be brief."}, {"user", "Hi"}};
 *     const char *tmpl = kiln_gguf_get_string(g, "tokenizer.chat_template", NULL);
 *     char text[4096];
 *     size_t len;
 *     kiln_chat_render(tmpl, chat, 2, true, "<s>", "</s>", text, sizeof text, &len);
 */
typedef struct kiln_chat_msg {
    const char *role, *content;
} kiln_chat_msg;
/* The family kiln renders tmpl as (one of the names above), or NULL. */
const char *kiln_chat_template_name(const char *tmpl);
kiln_status kiln_chat_render(const char *tmpl, const kiln_chat_msg *msgs, int n, bool add_generation_prompt,
                             const char *bos, const char *eos, char *text, size_t cap, size_t *len);

#ifdef __cplusplus
}
#endif
#endif /* KILN_TOKENIZER_H */
