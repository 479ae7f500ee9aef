/* chat_template.h — the chat template an example renders a conversation
 * with (chat, serve): --chat-template's value (a family's name, or a file
 * holding the template), else the model's own (a GGUF's
 * tokenizer.chat_template, a Hugging Face directory's
 * tokenizer_config.json chat_template), else ChatML, as llama.cpp chooses.
 * kiln_chat_template_name says whether kiln renders the result.
 *
 *     bool own;
 *     char *tmpl = chat_template_pick(arg, "model.gguf", &own);   // malloc'd; NULL: out of memory
 *     const char *family = tmpl ? kiln_chat_template_name(tmpl) : NULL;
 *     free(tmpl);
 */
#ifndef CHAT_TEMPLATE_H
#define CHAT_TEMPLATE_H

#include <stdbool.h>

/* arg: --chat-template (NULL: none given); model: a GGUF file or a
 * directory. *own: whether the model's files held the template picked. */
char *chat_template_pick(const char *arg, const char *model, bool *own);

#endif
