/* finetune.h — what examples/finetune's files share: the token stream made
 * from the data file (corpus.c), the windows a batch is cut from and the
 * losses over them (batches.c), the checkpoint's run state
 * (checkpoint.c), and the merge over a quantized base (merge.c). */
#ifndef FINETUNE_H
#define FINETUNE_H

#include "kiln.h"
#include "lora.h"

#include <stdbool.h>
#include <stdint.h>

/* The data as one stream of tokens; train[i] says whether token i is a
 * label the loss counts (every token of plain text; in a chat, the
 * assistant's replies and their end-of-turn marks, as TRL's
 * assistant_only_loss). Conversations follow one another (packed). */
typedef struct corpus {
    int32_t *ids;
    uint8_t *train;
    int64_t n, cap;
    int64_t docs; /* lines of a JSONL file; 1 for plain text */
    bool chat;
} corpus;

/* Read path as plain text or as chat JSONL ({"messages": [{"role": ...,
 * "content": ...}, ...]} per line, rendered with tmpl: a template's text or
 * one of kiln_chat_render's names). false after printing why to stderr,
 * naming the file (and line). */
bool corpus_load(corpus *c, const char *path, bool chat, const kiln_tokenizer *tok, const char *tmpl);
void corpus_free(corpus *c);

/* Windows of seq + 1 tokens starting at seq-spaced offsets of
 * [first, first + n): the training part or the held-out part. */
typedef struct windows {
    const corpus *c;
    int64_t first, n, seq, count;
} windows;
windows windows_of(const corpus *c, int64_t first, int64_t n, int64_t seq);

/* The order of the training windows in epoch e: a permutation drawn from
 * (seed, e) alone, so a run resumed at (epoch, position) continues it. */
void windows_order(int64_t *order, int64_t count, uint64_t seed, int64_t epoch);

/* g's input and labels [batch, seq] from the windows at idx[0..k) (the
 * rows from k on hold no label: -100); the labels the loss counts. */
int64_t fill_batch(const model_graph *g, const windows *w, const int64_t *idx, int64_t k, int64_t batch);

/* The mean loss of g over the first max (0: all) windows of w, batch at a
 * time, weighted by their labels. NaN with kiln's error set on failure. */
double mean_loss(const model_graph *g, const windows *w, int64_t batch, int64_t max);

/* Where a run is: saved with the adapters and the optimizer's state. */
typedef struct run_state {
    int64_t step, epoch, pos; /* steps done; the epoch and the next window of its order */
    uint64_t seed;
    int64_t batch, seq;
    char optim[16];
    char base[16]; /* the base and its compute: lora-f32, qlora-bf16, ... */
} run_state;

/* dir/adapter_model.safetensors and adapter_config.json (PEFT's), dir/
 * optimizer.safetensors, then dir/trainer_state.txt last (atomically: a
 * checkpoint without it is incomplete). */
bool checkpoint_save(const char *dir, const lora *l, const kiln_optim *opt, const run_state *rs);
/* Load them back into l and opt; rs's seed, batch, seq and optim must be
 * the run's. false after printing why. */
bool checkpoint_load(const char *dir, lora *l, kiln_optim *opt, run_state *rs);

/* --merge-to for a quantized base (--qlora): an f32 copy of m, every
 * tensor dequantized, with l's adapters merged into it (l is merged
 * after). NULL with kiln's error set. */
llama *merge_dequantized(const llama *m, lora *l);

#endif
