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
    kiln_tensor *orig[256];  /* their f32 tensors */
    float *values[256];      /* and values, to restore between formats */
    int n_lin;
    int64_t context;
    void *model;
    kiln_status (*quantize)(void *model, model_quant_method method, const kiln_gptq_config *cfg,
                            const int32_t *tokens, int64_t n_seqs, int64_t seq, int64_t batch);
    kiln_tensor *(*forward)(void *model, kiln_tensor *idx);
} qmodel;

/* What a format made of the linear weights. */
typedef struct fmt_result {
    int64_t weights;       /* elements of the linear weights */
    double weight_bytes;   /* their bytes in the format (scales, zeros, codes) */
    int64_t file_bytes;    /* the file's size: written, or computed */
    bool computed;         /* the file size is from the layout's formula */
    int fused, dequantized; /* FMT_BLOCK: weights run by the fused matmul / dequantized per pass */
} fmt_result;

/* Bytes of a [rows, cols] weight in the GPTQ layout's packed form: one
 * block per group of a row (group 0 or >= cols: the row), an f16 scale, a
 * u8 zero and the codes bit-packed, ceil(n bits / 8) bytes for n columns,
 * so bits + 24 / group bits per weight; act-order adds g_idx, i32 per
 * column, when a row has more than one group. Computed from the layout until the packed dtypes (KILN_GQ*) are
 * on main: then it is kiln_tensor_nbytes of the packed tensor. */
int64_t gptq_packed_bytes(int64_t rows, int64_t cols, int bits, int64_t group, bool act_order);

/* Save every f32 value of the linear weights (once, after loading). */
kiln_status qmodel_snapshot(qmodel *q);
/* Put the linear weights back to f32 as loaded. */
kiln_status qmodel_restore(qmodel *q);

/* Put q's linear weights into format f; file: where FMT_F32 and
 * FMT_BLOCK write the model (the linear weights in the format, the rest
 * f32) and read the weights back from. calib: i32 [n_calib, seq] for
 * GPTQ, run batch sequences at a time. */
kiln_status format_apply(qmodel *q, const format *f, const kiln_gptq_config *cfg, const char *file,
                         const int32_t *calib, int64_t n_calib, int64_t seq, int64_t batch, fmt_result *out);

#endif
