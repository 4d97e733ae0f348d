/* config.h: a GPT model's architecture, named as Megatron-LM's flags name it.
 *
 * One struct describes GPT-2 style and Llama style models alike (positions learned or
 * rotary, LayerNorm or RMSNorm, GELU or SwiGLU, biases or not, tied or separate output
 * embeddings, grouped-query attention). It is parsed from Megatron's flags (and
 * --config files of flags), validated, and stored in every checkpoint as JSON so that
 * mt-eval and mt-generate need no model flags. The parameters it implies are listed by
 * params.c; the arithmetic lives in gpt.c and the backends. */
#ifndef MT_CONFIG_H
#define MT_CONFIG_H

#include <stdint.h>

#include "base/err.h"

enum mt_pos_emb { MT_POS_LEARNED, MT_POS_ROPE };
enum mt_norm { MT_NORM_LAYERNORM, MT_NORM_RMSNORM };

struct mt_config {
	int num_layers;
	int hidden_size;
	int num_attention_heads;
	int num_query_groups;          /* = heads unless --group-query-attention */
	int kv_channels;               /* head size: hidden / heads */
	int ffn_hidden_size;           /* default 4 x hidden */
	int seq_length;
	int max_position_embeddings;   /* default seq_length */
	int64_t vocab_size;            /* the tokenizer's */
	int64_t padded_vocab_size;     /* rounded up to make_vocab_size_divisible_by */
	int make_vocab_size_divisible_by; /* 128 */
	enum mt_pos_emb position_embedding_type;
	double rotary_base;            /* 10000 */
	enum mt_norm normalization;
	double norm_epsilon;           /* 1e-5 */
	int swiglu;
	int add_bias_linear;           /* 1 unless --disable-bias-linear */
	int untie_embeddings_and_output_weights;
	double init_method_std;        /* 0.02 */
	double attention_dropout, hidden_dropout; /* accepted; 0 is the only value implemented */
};

/* Megatron's defaults for what a flag did not set (call after parsing). */
void mt_config_defaults(struct mt_config *c);
/* Check sizes and combinations; the message names the flag. */
int mt_config_validate(const struct mt_config *c, struct mt_err *err);
/* ceil(vocab / divisible_by) * divisible_by (tensor-parallel size 1). */
int64_t mt_config_padded_vocab(int64_t vocab, int divisible_by, int tp);

/* JSON with Megatron's flag names as keys (stored in checkpoints), and back. */
char *mt_config_to_json(const struct mt_config *c);
int mt_config_from_json(struct mt_config *c, const char *json, struct mt_err *err);

/* Parameters and floating-point operations per token (forward + backward = 3x forward,
 * attention included), for logs, MFU and --dry-run. */
/* An upper bound of the parameter count in floating point, which cannot wrap: what
 * mt_config_validate checks before anything is sized from the config. */
double mt_config_params_estimate(const struct mt_config *c);
int64_t mt_config_num_params(const struct mt_config *c);
double mt_config_flops_per_token(const struct mt_config *c);

#endif
