/* quantize.h — what the files of examples/quantize share: the weight
 * formats, and putting a model's linear weights into one of them. */
#ifndef QUANTIZE_H
#define QUANTIZE_H

#include "kiln.h"
#include "model_quant.h"

typedef enum fmt_kind { FMT_F32 = 0, FMT_BLOCK, FMT_RTN, FMT_GPTQ } fmt_kind;

typedef struct format {
    char name[24];
    fmt_kind kind;
    kiln_dtype dtype; /* FMT_BLOCK */
    int bits;         /* FMT_RTN, FMT_GPTQ */
} format;

/* A model as the example sees it: every parameter, which of them are the
 * linear weights a format quantizes (slot[k] points at the model's own
 * pointer, so a weight can be swapped for a quantized tensor), and how to
 * run GPTQ / RTN over it and build its logits. */
typedef struct qmodel {
    kiln_ctx *ctx;
    kiln_tensor **params;
    int n_params;
    kiln_tensor **slot[256]; /* the linear weights, in the model's order */
    kiln_tensor **perm[256]; /* their column permutations (model.h's model_linear; NULL as loaded) */
    kiln_tensor *orig[256];  /* their f32 tensors */
    float *values[256];      /* and values, to restore between formats */
    int n_lin;
    int64_t context;
    void *model;
    /* model_quantize over the model; out: n_lin results, in slot order */
    kiln_status (*quantize)(void *model, model_quant_method method, const kiln_gptq_config *cfg,
                            const int32_t *tokens, int64_t n_seqs, int64_t seq, int64_t batch,
                            kiln_gptq_result **out);
    kiln_tensor *(*forward)(void *model, kiln_tensor *idx);
} qmodel;

/* What a format made of the linear weights. */
typedef struct fmt_result {
    int64_t weights;       /* elements of the linear weights */
    double weight_bytes;   /* their bytes in the format (scales, zeros, codes; act order's perms) */
    int64_t file_bytes;    /* the file's size as written */
    int fused, dequantized; /* weights run by the fused matmul / dequantized per pass (FMT_BLOCK) */
    int block, block_max;  /* FMT_RTN, FMT_GPTQ: the GQ dtypes' blocks, smallest and largest */
    int permuted;          /* weights with a column permutation (act order) */
} fmt_result;

/* Save every f32 value of the linear weights (once, after loading). */
kiln_status qmodel_snapshot(qmodel *q);
/* Put the linear weights back to f32 as loaded. */
kiln_status qmodel_restore(qmodel *q);

/* Put q's linear weights into format f; file: where the model is written
 * (the linear weights in the format, the rest f32; RTN / GPTQ pack into
 * the GQ dtype of their bits and the largest block of 128, 64, 32 that
 * divides the group and the row, with an i32 "<weight>.perm" tensor beside
 * each act-order weight of two groups or more to a row) and the weights are read back from. calib: i32
 * [n_calib, seq] for GPTQ, run batch sequences at a time. */
kiln_status format_apply(qmodel *q, const format *f, const kiln_gptq_config *cfg, const char *file,
                         const int32_t *calib, int64_t n_calib, int64_t seq, int64_t batch, fmt_result *out);

#endif
