/* kiln_files.h — files in and out: IDX data sets, safetensors, JSON
 * configuration, GGUF (read and write), and checkpoints of parameters and
 * optimizer state. Every parser is bounds-checked and every save is
 * atomic (a run killed mid-save keeps the old file). Part of kiln.h.
 *
 * Usage — save a model's parameters and optimizer, and resume:
 *
 *     if (kiln_checkpoint_save(opt, "run.ckpt"))
 *         fprintf(stderr, "%s\n", kiln_last_error());
 *     ...
 *     kiln_checkpoint_load(opt, "run.ckpt");   // a failed load changes nothing
 */
#ifndef KILN_FILES_H
#define KILN_FILES_H

#include "kiln_optim.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- data files -------------------------------------------------------- */

/* Read an IDX file (MNIST's format), gzipped or plain, into a new leaf:
 * u8 data become f32 scaled by 'scale' (e.g. 1/255), or i32 when as_labels
 * is true. Every header field and length is bounds-checked, and a gzipped
 * file whose header claims over 64 times its own size (and over 1 MiB) is
 * refused as a likely gzip bomb before anything is inflated (real data
 * sets inflate 2-5x; gunzip such a file to load it). */
kiln_tensor *kiln_idx_load(kiln_ctx *ctx, const char *path, bool as_labels, float scale);

/* ---- files: safetensors, checkpoints ---------------------------------- */
/* safetensors (Hugging Face's format, read by safetensors.torch.load_file):
 * 8 bytes little-endian header length N, N bytes of JSON header
 * {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
 * {string: string}} padded with spaces, then the tensors' bytes,
 * contiguous and little-endian. Opening a file checks everything (header
 * length, JSON, dtypes, shapes against byte counts, offsets covering the
 * data without holes or overlaps, duplicate names) before any tensor is
 * read; a bad file is KILN_ERR_FORMAT naming the file and what is wrong.
 * safetensors has no block dtypes: a quantized tensor is written as U8
 * [bytes] of its raw blocks, with the metadata entry "kiln.quantized.<name>"
 * = {"dtype": "nf4", "shape": [out, in]} (as bitsandbytes stores its 4-bit
 * weights as uint8 plus their quantization state); opening restores the
 * dtype and shape, checked against the block bytes, and the info, load and
 * read_into see the quantized tensor (info's dtype stays "U8"). */
typedef struct kiln_safetensors kiln_safetensors;

/* One tensor of an open file. dtype is the file's name for it ("F32",
 * "BF16", "I64", ...); kiln_dtype is the kiln dtype or -1 when kiln has
 * none (loading it is KILN_ERR_DTYPE). Pointers live until close. */
typedef struct kiln_safetensors_info {
    const char *name;
    const char *dtype;
    int kiln_dtype;
    int ndim;
    const int64_t *shape;
    size_t nbytes;
} kiln_safetensors_info;

/* Open and validate a file (mapped read-only). NULL with the error set. */
kiln_safetensors *kiln_safetensors_open(const char *path);
void kiln_safetensors_close(kiln_safetensors *st);
/* Tensors in the file, in the order of their data. */
int kiln_safetensors_count(const kiln_safetensors *st);
kiln_status kiln_safetensors_info_at(const kiln_safetensors *st, int i, kiln_safetensors_info *out);
/* The index of the tensor called name, or -1. */
int kiln_safetensors_find(const kiln_safetensors *st, const char *name);
/* The "__metadata__" value of key, or NULL. */
const char *kiln_safetensors_metadata(const kiln_safetensors *st, const char *key);
/* The tensor called name as a new leaf of ctx (named name). */
kiln_tensor *kiln_safetensors_load(kiln_safetensors *st, kiln_ctx *ctx, const char *name);
/* Into an existing leaf of the same dtype and shape (on a device backend
 * the device copy is replaced too). */
kiln_status kiln_safetensors_read_into(kiln_safetensors *st, const char *name, kiln_tensor *dst);

/* Write n tensors (leaves or computed outputs; names[i], or each tensor's
 * own name when names is NULL; unique and non-empty) and n_meta metadata
 * pairs (meta[2k] = key, meta[2k + 1] = value; meta may be NULL) to path,
 * atomically: a temporary file in the same directory is written, flushed,
 * synced and renamed over path, then the directory is synced. On any error
 * the temporary file is removed and an existing file at path is left as it
 * was (KILN_ERR_IO names the cause: a full disk, a read-only directory; if
 * only the directory sync fails, path is the new file and the error says
 * it may not survive a crash). A process killed mid-save leaves the old
 * file intact and may leave its path.tmp.XXXXXX beside it, never read as
 * path and removed by the next save of path (which leaves alone the
 * temporary file of a save still under way: each writer holds a flock(2)
 * on its own). Tensors on a device are copied back first. */
kiln_status kiln_safetensors_save(const char *path, kiln_tensor *const *tensors, const char *const *names, int n,
                                  const char *const *meta, int n_meta);

/* A small JSON reader for configuration files (config.json): the file is
 * read whole and parsed strictly (RFC 8259, bounded depth and size); a
 * value is looked up by key in the top-level object (obj NULL) or in the
 * object that is the top-level member obj. Numbers are doubles; true and
 * false read as 1 and 0.
 *
 *     kiln_json_file *j = kiln_json_file_open("config.json");
 *     double layers;
 *     if (kiln_json_file_number(j, NULL, "num_hidden_layers", &layers)) ...
 *     const char *file = kiln_json_file_string(j, "weight_map", "lm_head.weight");
 *     kiln_json_file_close(j);
 */
typedef struct kiln_json_file kiln_json_file;
kiln_json_file *kiln_json_file_open(const char *path);
void kiln_json_file_close(kiln_json_file *j);
/* Present and not null. */
bool kiln_json_file_has(const kiln_json_file *j, const char *obj, const char *key);
/* KILN_ERR_FORMAT when missing or not a number/bool. */
kiln_status kiln_json_file_number(const kiln_json_file *j, const char *obj, const char *key, double *out);
/* NULL when missing or not a string. */
const char *kiln_json_file_string(const kiln_json_file *j, const char *obj, const char *key);

/* GGUF (ggml's model format, as llama.cpp reads it; versions 2 and 3,
 * little-endian): "GGUF", u32 version, u64 tensor count, u64 metadata
 * count, the metadata (string key, u32 value type, value; strings are u64
 * length + bytes, arrays u32 element type + u64 count + elements), the
 * tensor infos (name, u32 dims, u64 ne[dims] innermost first, u32 ggml
 * type, u64 offset into the data) and, at the next multiple of
 * general.alignment (u32, default 32), the data. Opening maps the file and
 * checks every count, size and offset against the file before anything is
 * allocated from it: a bad file is KILN_ERR_FORMAT naming what is wrong.
 * kiln shapes are ggml's ne reversed: ne [dim, vocab] is kiln [vocab, dim].
 *
 *     kiln_gguf *g = kiln_gguf_open("model.gguf");
 *     int64_t layers;
 *     kiln_gguf_get_int(g, "llama.block_count", &layers);
 *     kiln_tensor *w = kiln_gguf_load(g, ctx, "blk.0.attn_q.weight");
 *     kiln_gguf_close(g);
 *
 *     kiln_gguf_writer *w = kiln_gguf_writer_new();
 *     kiln_gguf_set_string(w, "general.architecture", "llama");
 *     kiln_gguf_add_tensor(w, "token_embd.weight", emb);
 *     kiln_gguf_writer_save(w, "model.gguf");   // atomic, as safetensors
 *     kiln_gguf_writer_free(w);
 */
typedef enum kiln_gguf_type {
    KILN_GGUF_UINT8 = 0, KILN_GGUF_INT8, KILN_GGUF_UINT16, KILN_GGUF_INT16, KILN_GGUF_UINT32, KILN_GGUF_INT32,
    KILN_GGUF_FLOAT32, KILN_GGUF_BOOL, KILN_GGUF_STRING, KILN_GGUF_ARRAY, KILN_GGUF_UINT64, KILN_GGUF_INT64,
    KILN_GGUF_FLOAT64, KILN_GGUF_TYPE_COUNT
} kiln_gguf_type;

/* ggml tensor types kiln names (the file may hold any of ggml's). */
enum {
    KILN_GGML_F32 = 0, KILN_GGML_F16 = 1, KILN_GGML_Q4_0 = 2, KILN_GGML_Q4_1 = 3, KILN_GGML_Q5_0 = 6,
    KILN_GGML_Q5_1 = 7, KILN_GGML_Q8_0 = 8, KILN_GGML_Q8_1 = 9, KILN_GGML_Q2_K = 10, KILN_GGML_Q3_K = 11,
    KILN_GGML_Q4_K = 12, KILN_GGML_Q5_K = 13, KILN_GGML_Q6_K = 14, KILN_GGML_Q8_K = 15, KILN_GGML_IQ4_NL = 20,
    KILN_GGML_IQ4_XS = 23, KILN_GGML_BF16 = 30
};

typedef struct kiln_gguf kiln_gguf;

typedef struct kiln_gguf_tensor_info {
    const char *name;
    int ndim;              /* 1..4 */
    int64_t ne[4];         /* ggml order, innermost first; 1 past ndim */
    int64_t shape[4];      /* kiln order: ne reversed */
    uint32_t ggml_type;
    const char *type_name; /* "F32", "Q4_0", ... */
    int kiln_dtype;        /* kiln's dtype for it, -1 if none (kiln_gguf_dtype) */
    uint64_t offset;       /* into the data section */
    size_t nbytes;
    const void *data;      /* in the mapped file, valid until close */
} kiln_gguf_tensor_info;

kiln_gguf *kiln_gguf_open(const char *path);
void kiln_gguf_close(kiln_gguf *g);
uint32_t kiln_gguf_version(const kiln_gguf *g);
uint32_t kiln_gguf_alignment(const kiln_gguf *g);
/* ggml type -> kiln dtype, -1 where kiln has none. */
int kiln_gguf_dtype(uint32_t ggml_type);
const char *kiln_gguf_type_name(uint32_t ggml_type); /* NULL if unknown */

/* Metadata: keys are indexed 0..count-1 in file order. */
int kiln_gguf_kv_count(const kiln_gguf *g);
const char *kiln_gguf_kv_key(const kiln_gguf *g, int i);
int kiln_gguf_find_key(const kiln_gguf *g, const char *key); /* index or -1 */
kiln_gguf_type kiln_gguf_kv_type(const kiln_gguf *g, int i);
/* The value of key: any integer type or bool (get_int), any number
 * (get_float), a string (get_string: NUL-terminated, *len its bytes when
 * len is not NULL; NULL if absent or not a string). A missing key or another
 * type is KILN_ERR_FORMAT. */
kiln_status kiln_gguf_get_int(const kiln_gguf *g, const char *key, int64_t *out);
kiln_status kiln_gguf_get_float(const kiln_gguf *g, const char *key, double *out);
const char *kiln_gguf_get_string(const kiln_gguf *g, const char *key, size_t *len);
/* An array's element type and length (KILN_ERR_FORMAT if not an array),
 * then its elements by index, converted as above. Arrays of arrays are
 * read and checked but their elements are not reachable. */
kiln_status kiln_gguf_get_array(const kiln_gguf *g, const char *key, kiln_gguf_type *elem, uint64_t *n);
kiln_status kiln_gguf_array_int(const kiln_gguf *g, const char *key, uint64_t i, int64_t *out);
kiln_status kiln_gguf_array_float(const kiln_gguf *g, const char *key, uint64_t i, double *out);
const char *kiln_gguf_array_string(const kiln_gguf *g, const char *key, uint64_t i, size_t *len);

/* Tensors, in file order. */
int kiln_gguf_tensor_count(const kiln_gguf *g);
int kiln_gguf_find_tensor(const kiln_gguf *g, const char *name); /* index or -1 */
kiln_status kiln_gguf_tensor_info_at(const kiln_gguf *g, int i, kiln_gguf_tensor_info *out);
/* The tensor called name as a new leaf of ctx, in its own dtype
 * (KILN_ERR_DTYPE where kiln has none). */
kiln_tensor *kiln_gguf_load(kiln_gguf *g, kiln_ctx *ctx, const char *name);
/* The same without a copy: a leaf of ctx whose storage is the file's own
 * bytes, mapped copy-on-write (writing to it changes this process's copy,
 * never the file). The mapping lives until ctx is freed, so g may be
 * closed first; its pages are read from the file as they are first used.
 * _rows: n tensors of one type and width that follow each other in the
 * file with no gap, as one [their rows, width] leaf (a model's q|k|v);
 * KILN_ERR_UNSUPPORTED where they do not, or where the data do not start
 * on 32 bytes (a general.alignment under 32): load those instead. */
kiln_tensor *kiln_gguf_map(kiln_gguf *g, kiln_ctx *ctx, const char *name);
kiln_tensor *kiln_gguf_map_rows(kiln_gguf *g, kiln_ctx *ctx, const char *const *names, int n);
/* Into an existing contiguous leaf of the same shape: the same dtype is
 * copied; F32/F16/BF16/Q8_0/Q4_0 into a plain float dtype are converted
 * (quantized blocks dequantized). */
kiln_status kiln_gguf_read_into(kiln_gguf *g, const char *name, kiln_tensor *dst);

/* The writer: metadata in the order set (a key set twice is an error),
 * tensors in the order added, each at a multiple of the alignment
 * (general.alignment when set as a u32 power of two, else 32). Tensors and
 * raw data are read at save: keep them alive until then. Writes version 3. */
typedef struct kiln_gguf_writer kiln_gguf_writer;
kiln_gguf_writer *kiln_gguf_writer_new(void);
void kiln_gguf_writer_free(kiln_gguf_writer *w);
/* type: one of the integer types or BOOL / one of the float types. */
kiln_status kiln_gguf_set_int(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, int64_t v);
kiln_status kiln_gguf_set_float(kiln_gguf_writer *w, const char *key, kiln_gguf_type type, double v);
kiln_status kiln_gguf_set_string(kiln_gguf_writer *w, const char *key, const char *v);
/* n elements of elem type: a packed little-endian array of that type, or
 * for KILN_GGUF_STRING a const char *const * of NUL-terminated strings. */
kiln_status kiln_gguf_set_array(kiln_gguf_writer *w, const char *key, kiln_gguf_type elem, const void *elems,
                                uint64_t n);
/* A kiln tensor (F32, F16, BF16, Q8_0 or Q4_0; leaves or computed outputs). */
kiln_status kiln_gguf_add_tensor(kiln_gguf_writer *w, const char *name, kiln_tensor *t);
/* Raw bytes of any ggml type with kiln shape [ndim] (1..4): nbytes must be
 * what that type and shape take (for quantized blocks made elsewhere). */
kiln_status kiln_gguf_add_raw(kiln_gguf_writer *w, const char *name, uint32_t ggml_type, int ndim,
                              const int64_t *shape, const void *data, size_t nbytes);
kiln_status kiln_gguf_writer_save(kiln_gguf_writer *w, const char *path);

/* ---- checkpoints ------------------------------------------------------- */
/* Every parameter of ctx (kiln_param order), then every buffer
 * (kiln_buffer: batch norm's running statistics), under its name, with the
 * same atomic write. Loading needs exactly ctx's parameters and buffers in
 * the file (a name missing or extra, a dtype or shape that differs is an
 * error naming it) and checks all before writing any: a failed load
 * changes nothing. */
kiln_status kiln_save_params(kiln_ctx *ctx, const char *path);
kiln_status kiln_load_params(kiln_ctx *ctx, const char *path);

/* An optimizer's state: every state tensor as "state.<parameter index>.
 * <name>" ("state.0.exp_avg", ...) and in the metadata the optimizer's
 * kind, its parameters' names, the step count, base lr, skipped steps,
 * last gradient norm, schedule and clipping norm, so that a run stopped
 * after a save and resumed after a load steps bit for bit as if it had
 * never stopped. Load into an optimizer made the same way (same kind,
 * config and parameters, in order; parameter groups set again by the
 * caller): the kind, the parameter names, every state tensor's dtype and
 * shape, and the counts and settings (with the checks of the setters and
 * of kiln_optim_step) are checked first, and a failed load changes
 * nothing.
 * kiln_checkpoint_save/load put the parameters and buffers of opt's
 * context (by name, as kiln_save_params) and opt's state in one file. Saves are atomic as
 * kiln_safetensors_save: a run killed while saving resumes from the last
 * complete checkpoint. */
kiln_status kiln_optim_save(const kiln_optim *opt, const char *path);
kiln_status kiln_optim_load(kiln_optim *opt, const char *path);
kiln_status kiln_checkpoint_save(const kiln_optim *opt, const char *path);
kiln_status kiln_checkpoint_load(kiln_optim *opt, const char *path);

#ifdef __cplusplus
}
#endif
#endif /* KILN_FILES_H */
