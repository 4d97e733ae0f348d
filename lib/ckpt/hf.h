/* hf.h: the correspondence between mt's parameters and Hugging Face's GPT-2 and Llama
 * checkpoints (transformers' GPT2LMHeadModel and LlamaForCausalLM).
 *
 * One mapping, element by element, serves both directions, so export and import are
 * exact inverses of each other by construction: every element of an mt parameter has
 * one place in one Hugging Face tensor (docs/mt-ckpt-reshard.md has the table):
 *
 *   - GPT-2 stores its linear weights as Conv1D, [in, out]: transposed against mt's
 *     [out, in]. Its fused c_attn holds [all query heads | all key heads | all value
 *     heads] in its columns, where mt's fused QKV holds, for each query group, its query
 *     heads, then its key head, then its value head (params.h).
 *   - Llama splits the QKV into q/k/v_proj and mt's SwiGLU fc1 into gate_proj (mt's first
 *     half, the one that goes through SiLU) and up_proj (the second half). Rotary
 *     embeddings need no permutation: mt rotates the two halves of each head (x[i] with
 *     x[i + d/2]), as Megatron-core does by default and as transformers' rotate_half does.
 *   - The vocabulary padding (rows padded_vocab_size - vocab_size of the embedding and of
 *     an untied output layer) is not exported; an import pads again, each padding row a
 *     copy of the last real row (as Megatron's own checkpoint converter does: a zero row
 *     would give those ids logit 0, far above a trained model's usual logits).
 *
 * The configuration is translated too (config.json both ways). What a format cannot
 * express (GPT-2 with RMSNorm, rotary positions, SwiGLU, no biases, an untied output
 * layer, grouped-query attention; Llama with LayerNorm or learned positions or GELU) is
 * refused, naming mt's option. This module does no file I/O beyond what it is handed:
 * hfio.c writes and reads the directories. */
#ifndef MT_HF_H
#define MT_HF_H

#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "model/params.h"
#include "ckpt/safetensors.h"

enum mt_hf_format { MT_HF_GPT2, MT_HF_LLAMA };

/* "hf-gpt2", "hf-llama" */
int mt_hf_format_parse(const char *s, enum mt_hf_format *f);
const char *mt_hf_format_name(enum mt_hf_format f);

/* 0 when the format can express the model; else -1 naming the option (MT_EXIT_USAGE). */
int mt_hf_check(const struct mt_config *c, enum mt_hf_format f, struct mt_err *err);

/* The Hugging Face tensors of a model, fp32, in the file's order. */
struct mt_hf_tensors {
	struct mt_st_out *t;
	int n;
	char **names;
	float **data;
};
int mt_hf_export_tensors(const struct mt_config *c, const struct mt_params *p, const float *w, enum mt_hf_format f,
			 struct mt_hf_tensors *out, struct mt_err *err);
void mt_hf_tensors_free(struct mt_hf_tensors *h);

/* Special token ids for config.json (-1: none known). */
struct mt_hf_tokens {
	int64_t bos, eos;
};
/* config.json's text for the model (malloc'ed). */
char *mt_hf_config_json(const struct mt_config *c, enum mt_hf_format f, const struct mt_hf_tokens *tok);

/* An mt config from config.json's text (path names the file in messages): the
 * vocabulary padded to a multiple of divisible_by; seq_length = max_position_embeddings
 * unless seq_length > 0 is given. */
int mt_hf_config_parse(const char *json, const char *path, enum mt_hf_format f, int divisible_by, int seq_length,
		       struct mt_config *c, struct mt_err *err);

/* Fill the flat buffer w (laid out by p, for config c) from the tensors of s, converted
 * to fp32. Every tensor the mapping needs must be there with its shape; a tensor of the
 * files that the mapping does not use is an error unless it is a known buffer
 * (attention masks, rotary frequencies) or a tied output layer. */
int mt_hf_import_tensors(const struct mt_config *c, const struct mt_params *p, const struct mt_st_set *s,
			 enum mt_hf_format f, float *w, struct mt_err *err);

#endif
