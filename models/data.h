/* data.h — the data sets of the examples and a seeded batch iterator.
 *
 * Two data sets, both from Debian packages (`scripts/deps.sh data`, which
 * `make demo` runs):
 *
 *  - Fashion-MNIST (package dataset-fashion-mnist): 60,000 training and
 *    10,000 test images of 28x28 grey pixels scaled to [0, 1], with labels
 *    0..9. data_fashion_load() reads one split into leaves of a context.
 *  - A byte-level English corpus: the plain-text files of the `fortunes`
 *    package (every file without an extension directly in its directory,
 *    sorted by name, concatenated; ~2.5 MB). The split is fixed: the
 *    fortunes (records ending in a "%" line) are numbered 0, 1, 2, ...
 *    across the whole corpus and every tenth one (number % 10 == 9) is
 *    validation text, the rest training text. So validation text comes from
 *    every file in proportion, no fortune is in both, and the two splits
 *    together hold every byte of the corpus exactly once.
 *
 * Batches are copied into tensors the caller made for its graph (with
 * kiln_tensor_set_f32 / kiln_tensor_set_i32, so device backends see the
 * new bytes). Rows of a batch that no sample fills (a kept last partial
 * batch, the tail of the validation text) get zero inputs and the label
 * DATA_IGNORE, which kiln_cross_entropy(..., DATA_IGNORE) skips.
 *
 * Errors are values: a loader returns a status or NULL, and
 * data_last_error() says why (for a missing file: the path, and which
 * package to install).
 *
 * Usage — one epoch of shuffled Fashion-MNIST batches:
 *
 *     data_images train;
 *     if (data_fashion_load(ctx, NULL, DATA_TRAIN, DATA_FLAT, &train))
 *         fprintf(stderr, "%s\n", data_last_error());
 *     kiln_tensor *x = kiln_new_2d(ctx, KILN_F32, 64, 784), *y = kiln_new_1d(ctx, KILN_I32, 64);
 *     data_loader *dl = data_loader_new(train.images, train.labels, 64, seed, true, true);
 *     while (data_loader_next(dl, x, y) > 0) { compute, step ... }
 *     data_loader_free(dl);
 *
 * and random windows of the fortunes text for a language model:
 *
 *     data_corpus c;
 *     data_fortunes_load(NULL, &c);
 *     data_text_sampler *s = data_text_sampler_new(&c.train, 32, 128, seed);
 *     data_text_sampler_next(s, x, y);        // x, y: i32 [32, 128]
 */
#ifndef DATA_H
#define DATA_H

#include "kiln.h"

#include <stdbool.h>
#include <stdint.h>

/* The label of rows no sample fills: PyTorch's default ignore_index, which
 * the models' loss graphs pass to kiln_cross_entropy. */
#define DATA_IGNORE (-100)

/* The message of the last failed call of this module on this thread. */
const char *data_last_error(void);

/* ---- Fashion-MNIST ------------------------------------------------------ */

#define DATA_FASHION_DIR "/usr/share/datasets/fashion-mnist"
#define DATA_FASHION_CLASSES 10
#define DATA_FASHION_SIDE 28
/* Mean and standard deviation of the training pixels (in [0, 1]), for a
 * caller who standardizes as torchvision's Normalize((0.2860,), (0.3530,)). */
#define DATA_FASHION_MEAN 0.2860f
#define DATA_FASHION_STD 0.3530f

typedef enum data_split { DATA_TRAIN = 0, DATA_TEST } data_split;
/* The shape of the image tensor: [N, 784] for an MLP, [N, 1, 28, 28] for
 * a convolutional net. */
typedef enum data_layout { DATA_FLAT = 0, DATA_NCHW } data_layout;

typedef struct data_images {
    kiln_tensor *images; /* f32 [N, 784] or [N, 1, 28, 28], values in [0, 1] */
    kiln_tensor *labels; /* i32 [N], 0..9 */
    int64_t n;           /* N */
} data_images;

/* Read one split from dir (NULL: DATA_FASHION_DIR): train-* or t10k-*
 * images and labels (.gz, or plain when the .gz is absent) into new leaves
 * of ctx. Only those two leaves stay in ctx. */
kiln_status data_fashion_load(kiln_ctx *ctx, const char *dir, data_split split, data_layout layout,
                              data_images *out);

/* Human-readable class names, "T-shirt/top" .. "Ankle boot". */
const char *data_fashion_class_name(int label);

/* Standardize the images in place with DATA_FASHION_MEAN and _STD
 * (inputs centred on 0 train faster). */
void data_fashion_standardize(data_images *d);

/* ---- batches of samples --------------------------------------------------- */

/* Walks a data set of N samples in epochs. With shuffle, each epoch is a
 * permutation of 0..N-1 that depends only on the seed and the epoch number
 * (so a run resumed at an epoch sees the same order); without, 0..N-1. */
typedef struct data_loader data_loader;

/* inputs: f32 (or any dtype) leaf whose first dimension is N, one sample
 * per row; labels: i32 leaf of N elements (NULL: none). The data are read
 * on the host; the loader keeps pointers, not copies. drop_last drops the
 * last batch of an epoch when it has fewer than batch samples. */
data_loader *data_loader_new(kiln_tensor *inputs, kiln_tensor *labels, int64_t batch, uint64_t seed, bool shuffle,
                             bool drop_last);
void data_loader_free(data_loader *l);

/* Copy the next batch into x (f32, batch * sample elements) and y (i32,
 * batch elements; may be NULL). Returns the samples in it: batch, or fewer
 * for a kept last partial batch (the other rows are zero with label
 * DATA_IGNORE); 0 at the end of an epoch — the next call starts the next
 * epoch; -1 on an error (data_last_error()). */
int64_t data_loader_next(data_loader *l, kiln_tensor *x, kiln_tensor *y);
/* Sample indices of the batch last returned (data_loader_next's count of
 * them). */
const int32_t *data_loader_indices(const data_loader *l);
int64_t data_loader_batches_per_epoch(const data_loader *l);
/* The epoch the next batch comes from, counting from 0. */
int64_t data_loader_epoch(const data_loader *l);
/* Continue from batch 'batch' of epoch 'epoch' (to resume a run). */
kiln_status data_loader_seek(data_loader *l, int64_t epoch, int64_t batch);

/* ---- the fortunes text -------------------------------------------------- */

#define DATA_FORTUNES_DIR "/usr/share/games/fortunes"
/* Tokens are bytes: a vocabulary of 256. A mean cross-entropy of L nats
 * per byte is L / ln 2 bits per byte. */
#define DATA_TEXT_VOCAB 256
/* Every DATA_FORTUNES_VAL_EVERY-th fortune is validation text. */
#define DATA_FORTUNES_VAL_EVERY 10

typedef struct data_text {
    uint8_t *bytes;
    int64_t n;
} data_text;

typedef struct data_corpus {
    data_text train, val;
    int64_t fortunes;     /* records in the whole corpus */
    int64_t total_bytes;  /* train.n + val.n */
    int files;            /* files read */
} data_corpus;

/* Read the corpus from dir (NULL: DATA_FORTUNES_DIR) and split it. */
kiln_status data_fortunes_load(const char *dir, data_corpus *out);
void data_corpus_free(data_corpus *c);

/* Random windows of a text for training: each row of a batch starts at an
 * offset drawn uniformly from [0, n - T - 1] by a generator seeded once;
 * x = bytes[o .. o+T), y = bytes[o+1 .. o+T] (the next byte of each). */
typedef struct data_text_sampler data_text_sampler;
data_text_sampler *data_text_sampler_new(const data_text *text, int64_t batch, int64_t seq, uint64_t seed);
void data_text_sampler_free(data_text_sampler *s);
/* x, y: i32 with batch * seq elements, e.g. [batch, seq]. */
kiln_status data_text_sampler_next(data_text_sampler *s, kiln_tensor *x, kiln_tensor *y);

/* A deterministic pass over a text for evaluation: consecutive,
 * non-overlapping windows starting at 0, T, 2T, ..., so that every byte
 * after the first is a target exactly once. data_text_eval_batches() says
 * how many batches of 'batch' windows that is; data_text_eval_batch()
 * copies batch i into x and y (i32, batch * seq elements) and returns the
 * number of targets in it (the last window may be short and the last
 * batch not full: the rest is label DATA_IGNORE), -1 on an error. Sum
 * mean-loss * targets over the batches and divide by n - 1. The text is in
 * file order, so for a quicker estimate take every k-th batch, not the
 * first few (those all come from the first files). */
int64_t data_text_eval_batches(const data_text *text, int64_t batch, int64_t seq);
int64_t data_text_eval_batch(const data_text *text, int64_t batch, int64_t seq, int64_t i, kiln_tensor *x,
                             kiln_tensor *y);

#endif
