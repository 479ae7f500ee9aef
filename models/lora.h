/* lora.h — LoRA adapters (Hu et al. 2021, as Hugging Face's PEFT) on the
 * linear layers of the models in models/, and PEFT's adapter files.
 *
 * An adapted layer computes y = W x + (alpha / r) * B (A dropout(x)) with
 * A [r, in] drawn Kaiming-uniform as PEFT does (a = sqrt(5):
 * U(-1/sqrt(in), 1/sqrt(in))) and B [out, r] zeros, so a fresh adapter
 * changes nothing. A and B are parameters (kiln_param, named
 * "<kiln weight name minus .weight>.lora_A" / ".lora_B"); W stays as it is,
 * in any dtype (f32, bf16, f16, the block-quantized ones), and is frozen:
 * lora_attach_* turns its requires_grad off, so the backward pass computes
 * no gradient for it, and an optimizer made for l->params keeps no state
 * for it. (A model from llama_new_inference has no gradient storage for W
 * at all; llama_new's parameters keep the gradient tensors they were made
 * with.)
 *
 * Layers are chosen as PEFT's target_modules: a layer's module name, as
 * Hugging Face names it ("model.layers.0.self_attn.q_proj" for llama,
 * "transformer.h.0.attn.c_attn" for GPT-2), matches a target equal to it
 * or to its last dotted parts ("q_proj", "self_attn.q_proj"). PEFT's
 * other form, one string that must match a whole module name
 * (re.fullmatch), is target_regex, read as a POSIX extended regular
 * expression (glibc's regcomp) anchored at both ends. Whole-name matching
 * makes the two agree on what both accept (alternation, groups, classes,
 * repetition: ".*\.(q|v)_proj", "model[.]layers[.][0-9]+[.]mlp[.].*");
 * a lazy "*?" matches the same names as "*". POSIX has no (?:...),
 * lookaround or inline flags (refused with regcomp's message), and a
 * backslash before a letter or digit other than \w \W \s \S \b \B (which
 * glibc reads as Python does) is refused too: glibc would take "\d" for
 * "d" where Python takes a digit (write [0-9]). Phi-3's
 * fused qkv_proj / gate_up_proj are split in kiln and take Llama's names
 * (q_proj, ..., up_proj), so PEFT files made for Phi-3 do not load. The heads
 * (lm_head, GPT-2's tied wte) are not adapted. The adapters reach the
 * models through model.h's model_linear hook, so attach before building
 * the graphs; a llama so adapted runs one product per weight (m->fuse off).
 *
 *     lora_config c = lora_defaults();                 // r 8, alpha 16
 *     c.targets = (const char *[]){"q_proj", "v_proj"}, c.n_targets = 2;
 *     lora *l = lora_attach_llama(m, &c, 42);
 *     model_graph g;
 *     llama_train_graph(m, 4, 128, &g);
 *     kiln_optim *opt = kiln_adamw_new_for(ctx, l->params, l->n_params, NULL);
 *     ... steps ...
 *     lora_save_peft(l, "out");     // out/adapter_model.safetensors, adapter_config.json
 *     lora_merge(l);                // W += alpha/r B A, in W's dtype; adapters off
 *     llama_save_gguf(m, "merged.gguf", KILN_Q8_0);
 *     lora_free(l);
 */
#ifndef LORA_H
#define LORA_H

#include "gpt.h"
#include "llama.h"

typedef struct lora_config {
    int r;          /* rank >= 1 */
    double alpha;   /* lora_alpha: the update is scaled by alpha / r */
    double dropout; /* lora_dropout on the adapter's input, in [0, 1) */
    const char *const *targets; /* target_modules (copied) */
    int n_targets;
    const char *target_regex; /* or target_modules as one regex string (copied; n_targets 0) */
    const char *base_model; /* base_model_name_or_path in the config; NULL: null */
} lora_config;

/* r 8, alpha 16, dropout 0, no targets */
lora_config lora_defaults(void);

typedef struct lora_layer {
    char module[96]; /* Hugging Face's module name */
    kiln_tensor *w;  /* the frozen weight [out, in] */
    kiln_tensor *a, *b;
} lora_layer;

typedef struct lora {
    kiln_ctx *ctx;
    lora_config cfg; /* targets and base_model point at the lora's copies */
    bool fan_in_fan_out; /* GPT-2: Hugging Face stores its weights [in, out] (Conv1D) */
    bool merged;         /* lora_merge ran: the adapters add nothing now */
    uint64_t seed;
    lora_layer *layers;
    int n_layers;
    kiln_tensor **params; /* a, b of each layer in order */
    int n_params;
} lora;

/* Adapters on every linear layer of the blocks whose module name matches a
 * target. NULL on failure with kiln's error set: r < 1, alpha or dropout
 * out of range, no targets, a target that matches no layer (named), a
 * regex that does not compile or matches no layer, both forms at once. */
lora *lora_attach_llama(llama *m, const lora_config *cfg, uint64_t seed);
lora *lora_attach_gpt(gpt *m, const lora_config *cfg, uint64_t seed);
/* The same over any n weights [out, in] given with their module names. */
lora *lora_attach(kiln_ctx *ctx, int n, const char *const *modules, kiln_tensor *const *weights,
                  const lora_config *cfg, uint64_t seed);
/* Detach (graphs built from now on have no adapters) and free the struct;
 * the tensors live in the context. */
void lora_free(lora *l);

/* PEFT's adapter directory: dir/adapter_model.safetensors, tensors
 * "base_model.model.<module>.lora_A.weight" [r, in] and ".lora_B.weight"
 * [out, r] (f32), metadata {"format": "pt"}, and dir/adapter_config.json
 * as PEFT writes it (keys sorted, indent 2; target_modules a list, or the
 * regex string). dir must exist. */
kiln_status lora_save_peft(const lora *l, const char *dir);
/* Read such a directory into l's adapters: its config's r and lora_alpha
 * must be l's, its target_modules a list for a list or the same regex
 * string for a regex, and its tensors exactly l's (names and shapes), else an
 * error naming the file and the first difference, and l is unchanged. */
kiln_status lora_load_peft(lora *l, const char *dir);

/* Fold the adapters into the weights, W += alpha/r B A (computed in f32,
 * written back in W's dtype: requantized for a quantized W), and stop
 * adding them (graphs built afterwards; built ones still hold the
 * adapters' nodes). The model then saves through its own writers. A
 * failure (a layer named in the error) leaves the layers before it merged
 * and the adapters still on: start again from the base weights. */
kiln_status lora_merge(lora *l);

#endif
