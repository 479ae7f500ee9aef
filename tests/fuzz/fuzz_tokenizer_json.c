/* fuzz_tokenizer_json.c — kiln_tokenizer_from_json on the bytes (the
 * JSON reader, the BPE and SentencePiece forms, pre-tokenizers), then an
 * encode and decode of a line with what it accepted. */
#include "fuzz_util.h"

kiln_status kiln_fuzz_tokenizer_json(const uint8_t *data, size_t size) {
    const char *path = kiln_fuzz_file(0, data, size);
    if (!path) return KILN_ERR_IO;
    kiln_tokenizer *t = kiln_tokenizer_from_json(path);
    if (!t) return kiln_last_status();
    static const char text[] = "Hello world <|endoftext|> he llo \xe2\x96\x81x \xc3\xa9\xff\xc0 1234\n\n";
    int32_t ids[sizeof text + 1];
    int64_t n = 0;
    for (int special = 0; special < 2; special++)
        if (!kiln_tokenizer_encode(t, text, sizeof text - 1, special, ids, (int64_t)sizeof text + 1, &n)) {
            char out[8 * sizeof text + 64];
            size_t len;
            kiln_tokenizer_decode(t, ids, n, out, sizeof out, &len);
        }
    (void)kiln_tokenizer_token(t, 0);
    (void)kiln_tokenizer_find(t, "he");
    kiln_tokenizer_free(t);
    return KILN_OK;
}

KILN_FUZZ_ENTRY(kiln_fuzz_tokenizer_json)
