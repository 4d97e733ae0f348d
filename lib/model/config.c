/* config.c: model architecture defaults, checks, JSON and counts (see config.h). */
#include "model/config.h"

#include <jansson.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

void mt_config_defaults(struct mt_config *c)
{
	if (!c->num_query_groups)
		c->num_query_groups = c->num_attention_heads;
	if (!c->kv_channels && c->num_attention_heads)
		c->kv_channels = c->hidden_size / c->num_attention_heads;
	if (!c->ffn_hidden_size) {
		/* Megatron: with SwiGLU, 2/3 of 4h rounded down to a multiple of 64; computed in
		 * 64 bits, and left 0 (refused by mt_config_validate) when it does not fit an int */
		int64_t f = c->swiglu ? (int64_t)((4.0 * c->hidden_size * 2 / 3) / 64) * 64 : 4 * (int64_t)c->hidden_size;
		c->ffn_hidden_size = f > 0 && f <= INT_MAX ? (int)f : 0;
	}
	if (!c->max_position_embeddings)
		c->max_position_embeddings = c->seq_length;
	if (!c->make_vocab_size_divisible_by)
		c->make_vocab_size_divisible_by = 128;
	if (c->rotary_base == 0)
		c->rotary_base = 10000;
	if (c->norm_epsilon == 0)
		c->norm_epsilon = 1e-5;
	if (c->init_method_std == 0)
		c->init_method_std = 0.02;
	if (c->vocab_size && !c->padded_vocab_size)
		c->padded_vocab_size = mt_config_padded_vocab(c->vocab_size, c->make_vocab_size_divisible_by, 1);
}

int64_t mt_config_padded_vocab(int64_t vocab, int divisible_by, int tp)
{
	int64_t m = (int64_t)divisible_by * (tp > 0 ? tp : 1);

	return m > 0 ? (vocab + m - 1) / m * m : vocab;
}

int mt_config_validate(const struct mt_config *c, struct mt_err *err)
{
#define NEED(cond, ...) \
	do { if (!(cond)) return mt_err_set(err, MT_EXIT_USAGE, __VA_ARGS__); } while (0)
	/* 0 is a flag never given; below 0 can only come from a stored config */
	NEED(c->num_layers != 0, "--num-layers is required");
	NEED(c->num_layers > 0, "--num-layers must be positive");
	NEED(c->hidden_size != 0, "--hidden-size is required");
	NEED(c->hidden_size > 0, "--hidden-size must be positive");
	NEED(c->num_attention_heads != 0, "--num-attention-heads is required");
	NEED(c->num_attention_heads > 0, "--num-attention-heads must be positive");
	NEED(c->num_query_groups > 0 && c->num_attention_heads % c->num_query_groups == 0,
	     "--num-query-groups %d must divide --num-attention-heads %d", c->num_query_groups, c->num_attention_heads);
	NEED(c->ffn_hidden_size > 0 || c->hidden_size <= INT_MAX / 4,
	     "--hidden-size %d: the default --ffn-hidden-size (4 x --hidden-size) does not fit in 32 bits", c->hidden_size);
	NEED(c->ffn_hidden_size > 0, "--ffn-hidden-size must be positive");
	NEED(c->seq_length != 0, "--seq-length is required");
	NEED(c->seq_length > 0, "--seq-length must be positive");
	NEED(c->max_position_embeddings > 0, "--max-position-embeddings must be positive");
	NEED(c->make_vocab_size_divisible_by > 0, "--make-vocab-size-divisible-by must be positive");
	NEED((int64_t)c->num_attention_heads * c->kv_channels <= INT_MAX &&
	     (int64_t)c->num_query_groups * c->kv_channels <= INT_MAX,
	     "--num-attention-heads %d x --kv-channels %d does not fit in 32 bits", c->num_attention_heads, c->kv_channels);
	NEED(c->position_embedding_type != MT_POS_LEARNED || c->max_position_embeddings >= c->seq_length,
	     "--max-position-embeddings %d is below --seq-length %d", c->max_position_embeddings, c->seq_length);
	NEED(c->position_embedding_type != MT_POS_ROPE || c->kv_channels % 2 == 0,
	     "rotary embeddings need an even head size, not %d", c->kv_channels);
	NEED(c->vocab_size > 0, "the vocabulary size is unknown: give a tokenizer or --vocab-size");
	NEED(c->padded_vocab_size >= c->vocab_size, "padded vocabulary below the vocabulary size");
	NEED(c->attention_dropout == 0 && c->hidden_dropout == 0,
	     "dropout is not implemented: --attention-dropout and --hidden-dropout must be 0");
	NEED(c->norm_epsilon > 0, "--norm-epsilon must be positive");
	NEED(c->init_method_std > 0 && c->init_method_std < 1e30, "--init-method-std must be positive");
	NEED(c->rotary_base > 0, "--rotary-base must be positive");
	/* every size product below in 64 bits: the parameter count, in floating point so
	 * that it cannot wrap, must leave room for weights, gradients and AdamW's state */
	NEED(mt_config_params_estimate(c) < 0x1p56, "the model is too large: %.3g parameters (the sizes multiply past 2^56)",
	     mt_config_params_estimate(c));
#undef NEED
	return 0;
}

char *mt_config_to_json(const struct mt_config *c)
{
	json_t *o = json_object();
	char *s;

	json_object_set_new(o, "num-layers", json_integer(c->num_layers));
	json_object_set_new(o, "hidden-size", json_integer(c->hidden_size));
	json_object_set_new(o, "num-attention-heads", json_integer(c->num_attention_heads));
	json_object_set_new(o, "num-query-groups", json_integer(c->num_query_groups));
	json_object_set_new(o, "kv-channels", json_integer(c->kv_channels));
	json_object_set_new(o, "ffn-hidden-size", json_integer(c->ffn_hidden_size));
	json_object_set_new(o, "seq-length", json_integer(c->seq_length));
	json_object_set_new(o, "max-position-embeddings", json_integer(c->max_position_embeddings));
	json_object_set_new(o, "vocab-size", json_integer(c->vocab_size));
	json_object_set_new(o, "padded-vocab-size", json_integer(c->padded_vocab_size));
	json_object_set_new(o, "make-vocab-size-divisible-by", json_integer(c->make_vocab_size_divisible_by));
	json_object_set_new(o, "position-embedding-type",
			    json_string(c->position_embedding_type == MT_POS_ROPE ? "rope" : "learned_absolute"));
	json_object_set_new(o, "rotary-base", json_real(c->rotary_base));
	json_object_set_new(o, "normalization", json_string(c->normalization == MT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm"));
	json_object_set_new(o, "norm-epsilon", json_real(c->norm_epsilon));
	json_object_set_new(o, "swiglu", json_boolean(c->swiglu));
	json_object_set_new(o, "add-bias-linear", json_boolean(c->add_bias_linear));
	json_object_set_new(o, "untie-embeddings-and-output-weights", json_boolean(c->untie_embeddings_and_output_weights));
	json_object_set_new(o, "init-method-std", json_real(c->init_method_std));
	json_object_set_new(o, "attention-dropout", json_real(c->attention_dropout));
	json_object_set_new(o, "hidden-dropout", json_real(c->hidden_dropout));
	s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o);
	return s;
}

int mt_config_from_json(struct mt_config *c, const char *text, struct mt_err *err)
{
	json_error_t je;
	json_t *o = json_loads(text, 0, &je), *v;
	const char *s;

	memset(c, 0, sizeof(*c));
	if (!o || !json_is_object(o)) {
		json_decref(o);
		return mt_err_set(err, MT_EXIT_DATA, "model config is not a JSON object: %s", o ? "" : je.text);
	}
#define INT(key, field) do { if ((v = json_object_get(o, key))) c->field = (int)json_integer_value(v); } while (0)
#define I64(key, field) do { if ((v = json_object_get(o, key))) c->field = json_integer_value(v); } while (0)
#define DBL(key, field) do { if ((v = json_object_get(o, key))) c->field = json_number_value(v); } while (0)
#define BOOL(key, field) do { if ((v = json_object_get(o, key))) c->field = json_is_true(v); } while (0)
	INT("num-layers", num_layers);
	INT("hidden-size", hidden_size);
	INT("num-attention-heads", num_attention_heads);
	INT("num-query-groups", num_query_groups);
	INT("kv-channels", kv_channels);
	INT("ffn-hidden-size", ffn_hidden_size);
	INT("seq-length", seq_length);
	INT("max-position-embeddings", max_position_embeddings);
	I64("vocab-size", vocab_size);
	I64("padded-vocab-size", padded_vocab_size);
	INT("make-vocab-size-divisible-by", make_vocab_size_divisible_by);
	DBL("rotary-base", rotary_base);
	DBL("norm-epsilon", norm_epsilon);
	BOOL("swiglu", swiglu);
	BOOL("add-bias-linear", add_bias_linear);
	BOOL("untie-embeddings-and-output-weights", untie_embeddings_and_output_weights);
	DBL("init-method-std", init_method_std);
	DBL("attention-dropout", attention_dropout);
	DBL("hidden-dropout", hidden_dropout);
#undef INT
#undef I64
#undef DBL
#undef BOOL
	s = json_string_value(json_object_get(o, "position-embedding-type"));
	c->position_embedding_type = s && !strcmp(s, "rope") ? MT_POS_ROPE : MT_POS_LEARNED;
	s = json_string_value(json_object_get(o, "normalization"));
	c->normalization = s && !strcmp(s, "RMSNorm") ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	json_decref(o);
	mt_config_defaults(c);
	return mt_config_validate(c, err);
}

double mt_config_params_estimate(const struct mt_config *c)
{
	double h = c->hidden_size, f = c->ffn_hidden_size, v = (double)c->padded_vocab_size;
	double q = (double)c->num_attention_heads * c->kv_channels, kv = (double)c->num_query_groups * c->kv_channels;
	double layer = h * (q + 2 * kv) + q * h + h * f * (c->swiglu ? 2 : 1) + f * h + 4 * h + q + 2 * kv + 2 * f;

	return v * h * 2 + (double)c->max_position_embeddings * h + (double)c->num_layers * layer + 2 * h;
}

int64_t mt_config_num_params(const struct mt_config *c)
{
	int64_t h = c->hidden_size, f = c->ffn_hidden_size, v = c->padded_vocab_size;
	int64_t q = (int64_t)c->num_attention_heads * c->kv_channels, kv = (int64_t)c->num_query_groups * c->kv_channels;
	int64_t b = c->add_bias_linear, norm = c->normalization == MT_NORM_LAYERNORM ? 2 : 1;
	int64_t layer = h * (q + 2 * kv) + b * (q + 2 * kv)    /* qkv */
		      + q * h + b * h                            /* proj */
		      + h * f * (c->swiglu ? 2 : 1) + b * f * (c->swiglu ? 2 : 1) /* fc1 */
		      + f * h + b * h                            /* fc2 */
		      + 2 * norm * h;                            /* two norms */
	int64_t n = v * h + (c->position_embedding_type == MT_POS_LEARNED ? (int64_t)c->max_position_embeddings * h : 0)
		  + c->num_layers * layer + norm * h + (c->untie_embeddings_and_output_weights ? v * h : 0);
	return n;
}

double mt_config_flops_per_token(const struct mt_config *c)
{
	/* 6 x (matmul parameters) + 6 x attention (QK^T and AV, causal counted whole), as
	 * in the PaLM/Megatron MFU convention: forward 2N + 2*L*T*q, backward twice that */
	double h = c->hidden_size, f = c->ffn_hidden_size, v = (double)c->padded_vocab_size;
	double q = (double)c->num_attention_heads * c->kv_channels, kv = (double)c->num_query_groups * c->kv_channels;
	double mm = c->num_layers * (h * (q + 2 * kv) + q * h + h * f * (c->swiglu ? 2 : 1) + f * h) + v * h;
	double attn = (double)c->num_layers * c->seq_length * q * 2; /* QK^T and AV per token */
	return 6.0 * mm + 6.0 * attn;
}
