/* output.h — what the examples write: their output paths checked before
 * any work, and generated text made safe for a terminal.
 *
 * A run must not train for minutes and then fail to save: output_file and
 * output_dir try, at start-up, to create a file where the output will go
 * (and remove it again), so a missing directory, a read-only place or a
 * path that is a directory is said at once, naming the option and path.
 *
 * Generated text (a model's sample) may hold any byte. Written raw, an ESC
 * or a C1 control would drive the terminal; text_put/text_write pass
 * printable UTF-8, newlines and tabs, and write every other byte as \xNN.
 *
 *     if (save && !output_file("gpt", "--save", save)) return 2;
 *     text_stream ts = {0};
 *     for (...) text_put(&ts, stdout, byte);   // a byte at a time, as sampled
 *     text_end(&ts, stdout);                   // an unfinished UTF-8 sequence, escaped
 */
#ifndef OUTPUT_H
#define OUTPUT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* Can a file be written at path (a file of that name created in its
 * directory, replacing any there)? If not, says why on stderr as
 * "PROG: OPTION PATH: cannot write there: REASON" and returns false. */
bool output_file(const char *prog, const char *option, const char *path);

/* The directory dir, made if missing (as mkdir -p), can take new files?
 * If not, says why on stderr as output_file does and returns false. */
bool output_dir(const char *prog, const char *option, const char *dir);

/* Bytes held back until a UTF-8 sequence is complete. */
typedef struct text_stream {
    unsigned char held[4];
    int n, want;
} text_stream;

/* Write one byte of generated text to f: as it is when it is part of
 * printable UTF-8, a newline or a tab, else as \xNN. */
void text_put(text_stream *t, FILE *f, unsigned char byte);
/* Write the bytes of an unfinished sequence, escaped. */
void text_end(text_stream *t, FILE *f);
/* text_put of n bytes, then text_end. */
void text_write(FILE *f, const char *s, size_t n);

#endif
