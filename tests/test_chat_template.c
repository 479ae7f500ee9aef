/* test_chat_template.c — kiln_chat_render on the real chat templates of
 * each family (tests/fixtures/chat/, one .jinja file each, as the models' tokenizer
 * configs publish them) against the text their Jinja renders for one
 * conversation, worked out by hand from each template (and equal to
 * llama.cpp's Jinja results where its tests have the same template). */
#include "kt.h"
#include "kiln_tokenizer.h"

#include <time.h>

static const kiln_chat_msg CHAT[6] = {
    {"system", "You are a helpful assistant"}, {"user", "Hello"}, {"assistant", "Hi there"},
    {"user", "Who are you"}, {"assistant", "   I am an assistant   "}, {"user", "Another question"},
};

static char *slurp(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/chat/%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *s = calloc(1, 1 << 16);
    fread(s, 1, (1 << 16) - 1, f);
    fclose(f);
    return s;
}

/* Render msgs[0..n) with tmpl (a fixture's name, or a family's) and compare. */
static void expect(const char *file, const char *family, const kiln_chat_msg *msgs, int n, bool gen, const char *bos,
                   const char *want, int line) {
    char *tmpl = strchr(file, '.') ? slurp(file) : strdup(file);
    if (!tmpl) return kt_fail(__FILE__, line, "no fixture %s", file);
    const char *fam = kiln_chat_template_name(tmpl);
    char out[2048];
    size_t len = 0;
    kiln_status s = kiln_chat_render(tmpl, msgs, n, gen, bos, "</s>", out, sizeof out, &len);
    if (!fam || strcmp(fam, family))
        kt_fail(__FILE__, line, "%s: family %s, want %s", file, fam ? fam : kiln_last_error(), family);
    else if (s) kt_fail(__FILE__, line, "%s: %s", file, kiln_last_error());
    else if (len != strlen(want) || memcmp(out, want, len))
        kt_fail(__FILE__, line, "%s:\n got  '%.*s'\n want '%s'", file, (int)len, out, want);
    free(tmpl);
}
#define EXPECT(file, family, bos, want) expect(file, family, CHAT, 6, true, bos, want, __LINE__)

#define CHATML_TURNS                                                                                              \
    "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>\n<|im_start|>" \
    "assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_start|>assistant\n   I am an "  \
    "assistant   <|im_end|>\n<|im_start|>user\nAnother question<|im_end|>\n<|im_start|>assistant\n"

KT_TEST(chat_template_chatml_and_qwen) {
    EXPECT("openhermes-2.5-mistral-7b.jinja", "chatml", "<s>", CHATML_TURNS);
    EXPECT("qwen2.5-7b-instruct.jinja", "chatml", "<s>", CHATML_TURNS);
    EXPECT("chatml", "chatml", "<s>", CHATML_TURNS);
    /* no system message: Qwen 2.5 writes its own */
    expect("qwen2.5-7b-instruct.jinja", "chatml", CHAT + 1, 1, true, "<s>",
           "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
           "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\n", __LINE__);
    expect("openhermes-2.5-mistral-7b.jinja", "chatml", CHAT + 1, 2, false, "<s>",
           "<|im_start|>user\nHello<|im_end|>\n<|im_start|>assistant\nHi there<|im_end|>\n", __LINE__);
}

#define LLAMA3_TURNS                                                                                              \
    "<|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n" \
    "Hi there<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nWho are you<|eot_id|><|start_header_id|>"       \
    "assistant<|end_header_id|>\n\nI am an assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"        \
    "Another question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"

KT_TEST(chat_template_llama3) {
    const char *b = "<|begin_of_text|>";
    EXPECT("llama-3-8b-instruct.jinja", "llama3", b,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are a helpful assistant<|eot_id|>"
           LLAMA3_TURNS);
    EXPECT("llama-3.1-8b-instruct.jinja", "llama3.1", b,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
           "Today Date: 26 Jul 2024\n\nYou are a helpful assistant<|eot_id|>" LLAMA3_TURNS);
    /* 3.2 dates its system header today (transformers' strftime_now); no system message: an empty one */
    char want[1024], date[32];
    time_t now = time(NULL);
    strftime(date, sizeof date, "%d %b %Y", localtime(&now));
    snprintf(want, sizeof want, "%s<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December "
             "2023\nToday Date: %s\n\n<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|>", b, date);
    expect("llama-3.2-3b-instruct.jinja", "llama3.1", CHAT + 1, 1, false, b, want, __LINE__);
}

#define PHI3_TURNS                                                                                                 \
    "<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am " \
    "an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"

KT_TEST(chat_template_phi3) {
    EXPECT("phi-3.5-mini-instruct.jinja", "phi3", "<s>", "<|system|>\nYou are a helpful assistant<|end|>\n" PHI3_TURNS);
    EXPECT("phi-3-small-8k-instruct.jinja", "phi3", "<s>",
           "<s><|system|>\nYou are a helpful assistant<|end|>\n" PHI3_TURNS);
    /* mini and medium have no system role: it goes in front of the first user message */
    EXPECT("phi-3-mini-4k-instruct.jinja", "phi3-mini", "<s>",
           "<s><|user|>\nYou are a helpful assistant\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n<|user|>\nWho are "
           "you<|end|>\n<|assistant|>\n   I am an assistant   <|end|>\n<|user|>\nAnother question<|end|>\n"
           "<|assistant|>\n");
    /* without the generation prompt, Phi-3.5 ends with eos_token */
    expect("phi-3.5-mini-instruct.jinja", "phi3", CHAT + 1, 2, false, "<s>",
           "<|user|>\nHello<|end|>\n<|assistant|>\nHi there<|end|>\n</s>", __LINE__);
}

#define GEMMA_TURNS                                                                                              \
    "<start_of_turn>user\nYou are a helpful assistant\nHello<end_of_turn>\n<start_of_turn>model\nHi there"       \
    "<end_of_turn>\n<start_of_turn>user\nWho are you<end_of_turn>\n<start_of_turn>model\nI am an assistant"       \
    "<end_of_turn>\n<start_of_turn>user\nAnother question<end_of_turn>\n<start_of_turn>model\n"

KT_TEST(chat_template_gemma) {
    EXPECT("gemma-7b-it.jinja", "gemma", "<bos>", GEMMA_TURNS);
    EXPECT("gemma-2-2b-it.jinja", "gemma", "<bos>", "<bos>" GEMMA_TURNS);
}

KT_TEST(chat_template_mistral) {
    EXPECT("mistral-7b-instruct-v0.2.jinja", "mistral-v0", "<s>",
           "<s>[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I am an "
           "assistant   </s>[INST] Another question [/INST]");
    EXPECT("mistral-7b-instruct-v0.2-system.jinja", "mistral-v1", "<s>",
           "<s> [INST] You are a helpful assistant\n\nHello [/INST] Hi there</s> [INST] Who are you [/INST]    I am "
           "an assistant   </s> [INST] Another question [/INST]");
    /* v3: the system message goes into the last user turn */
    EXPECT("mistral-large-instruct-2407.jinja", "mistral-v3", "<s>",
           "<s>[INST] Hello[/INST] Hi there</s>[INST] Who are you[/INST] I am an assistant</s>[INST] You are a "
           "helpful assistant\n\nAnother question[/INST]");
    EXPECT("mistral-nemo-instruct-2407.jinja", "mistral-v3-tekken", "<s>",
           "<s>[INST]Hello[/INST]Hi there</s>[INST]Who are you[/INST]   I am an assistant   </s>[INST]You are a "
           "helpful assistant\n\nAnother question[/INST]");
    EXPECT("mistral-large-instruct-2411.jinja", "mistral-v7", "<s>",
           "<s>[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi there</s>[INST] Who "
           "are you[/INST]    I am an assistant   </s>[INST] Another question[/INST]");
}

KT_TEST(chat_template_refusals) {
    char out[64];
    size_t len = 0;
    const char *llama2 = "{% for m in messages %}{{ '[INST] <<SYS>>' + m['content'] }}{% endfor %}";
    KT_EXPECT_ERR(kiln_chat_template_name("{{ messages }}"), KILN_ERR_UNSUPPORTED, "not one kiln recognizes");
    KT_CHECK(kiln_chat_render(llama2, CHAT, 2, true, "", "", out, sizeof out, &len) == KILN_ERR_UNSUPPORTED, "llama2");
    /* Gemma checks that the roles alternate */
    const kiln_chat_msg twice[2] = {{"user", "a"}, {"user", "b"}};
    KT_CHECK(kiln_chat_render("gemma", twice, 2, true, "", "", out, sizeof out, &len) == KILN_ERR_ARG &&
                 strstr(kiln_last_error(), "must alternate"), "%s", kiln_last_error());
    /* too small: the size it needs */
    KT_CHECK(kiln_chat_render("chatml", CHAT, 6, true, "", "", out, 10, &len) == KILN_ERR_ARG &&
                 len == strlen(CHATML_TURNS), "needs %zu", len);
}
