/* megatron_export.c: mt checkpoints written as Megatron-LM legacy checkpoints (megatron.h's
 * export): megatron-core's local-layer state dict of each stage (or the legacy model's
 * nested one), args as a Namespace, each
 * rank's model_optim_rng.pt at the target TP x PP in the chosen dtype. Reading them is
 * megatron.c. */
#include "ckpt/megatron.h"

#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/atomic.h"
#include "base/files.h"
#include "ckpt/ckpt.h"
#include "ckpt/megatron_shard.h"
#include "ckpt/torchdist_write.h"
#include "ckpt/torchzip.h"

/* ---- float32 to the 16-bit types ---- */

/* round to nearest even, as torch's .to(torch.bfloat16) */
static uint16_t f32_to_bf16(float f)
{
	uint32_t u;

	memcpy(&u, &f, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
	u += 0x7fffu + ((u >> 16) & 1);
	return (uint16_t)(u >> 16);
}

/* IEEE binary16, round to nearest even (subnormals, overflow to infinity) */
static uint16_t f32_to_f16(float f)
{
	uint32_t u, s, a;

	memcpy(&u, &f, 4);
	s = (u >> 16) & 0x8000u;
	a = u & 0x7fffffffu;
	if (a > 0x7f800000u)
		return (uint16_t)(s | 0x7e00u);
	if (a >= 0x477ff000u) /* rounds to 65520 or above: infinity */
		return (uint16_t)(s | 0x7c00u);
	if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
		float x;
		memcpy(&x, &a, 4);
		/* the value in units of 2^-24, rounded to nearest even by the FPU */
		return (uint16_t)(s | (uint32_t)nearbyintf(x * 16777216.0f));
	}
	{
		uint32_t e = ((a >> 23) - 127 + 15), m = a & 0x7fffffu, h = e << 10 | m >> 13, rest = m & 0x1fffu;
		if (rest > 0x1000u || (rest == 0x1000u && (h & 1)))
			h++;
		return (uint16_t)(s | h);
	}
}

/* ---- export ---- */

/* Where an entry goes in the saved `model`: megatron-core's flat state dict, or one of the
 * legacy model's nested state dicts (megatron.legacy.model.GPTModel's
 * state_dict_for_save_checkpoint, as Megatron-LM core_v0.12.3 writes it): model =
 * {language_model: {embedding: {word_embeddings: {weight}, position_embeddings: {weight}},
 * encoder: {layers.N...., final_norm.*}, output_layer: {weight, _extra_state}},
 * word_embeddings_for_head: {weight}} (plain dicts outside, OrderedDicts of tensors). */
enum group { G_CORE, G_WORD, G_POS, G_ENCODER, G_OUTPUT, G_HEAD, G_NGROUPS };

struct entry {
	char name[160];
	const struct mt_param *p;   /* NULL: an _extra_state (None) */
	enum group grp;
	int key;                    /* the storage's key (data/N), in the order of the entries */
};

/* The legacy model's names of a layer's parameters and of its linear layers' extra state. */
static const struct {
	const char *name;
	enum mt_param_kind kind;
	int extra_after;
} legacy_layer[] = {
	{ "input_norm.weight", MT_P_LN1_W, 0 },
	{ "input_norm.bias", MT_P_LN1_B, 0 },
	{ "self_attention.query_key_value.weight", MT_P_QKV_W, 0 },
	{ "self_attention.query_key_value.bias", MT_P_QKV_B, 0 },
	{ "self_attention.query_key_value._extra_state", MT_P_NKINDS, 1 },
	{ "self_attention.dense.weight", MT_P_PROJ_W, 0 },
	{ "self_attention.dense.bias", MT_P_PROJ_B, 0 },
	{ "self_attention.dense._extra_state", MT_P_NKINDS, 1 },
	{ "post_attention_norm.weight", MT_P_LN2_W, 0 },
	{ "post_attention_norm.bias", MT_P_LN2_B, 0 },
	{ "mlp.dense_h_to_4h.weight", MT_P_FC1_W, 0 },
	{ "mlp.dense_h_to_4h.bias", MT_P_FC1_B, 0 },
	{ "mlp.dense_h_to_4h._extra_state", MT_P_NKINDS, 1 },
	{ "mlp.dense_4h_to_h.weight", MT_P_FC2_W, 0 },
	{ "mlp.dense_4h_to_h.bias", MT_P_FC2_B, 0 },
	{ "mlp.dense_4h_to_h._extra_state", MT_P_NKINDS, 1 },
};

/* The state dict of stage `stage` (local layers), in its modules' order: megatron-core's
 * names, or the legacy model's (legacy). */
static int stage_entries(const struct mt_config *c, const struct mt_params *tab, int P, int stage, int legacy,
			 struct entry **out, int *n)
{
	struct mt_pp_split sp = { P, 1, 0, 0 };
	int lo, hi, cap = 64, k = 0, nkeys = 0, first = stage == 0, last = stage == P - 1;
	struct entry *e = malloc((size_t)cap * sizeof(*e));
	static const struct {
		const char *name;
		enum mt_param_kind kind;
		int extra_after;
	} layer[] = {
		{ "input_layernorm.weight", MT_P_LN1_W, 0 },           { "input_layernorm.bias", MT_P_LN1_B, 0 },
		{ "self_attention.linear_proj.weight", MT_P_PROJ_W, 0 }, { "self_attention.linear_proj.bias", MT_P_PROJ_B, 0 },
		{ "self_attention.linear_proj._extra_state", MT_P_NKINDS, 1 },
		{ "self_attention.linear_qkv.weight", MT_P_QKV_W, 0 }, { "self_attention.linear_qkv.bias", MT_P_QKV_B, 0 },
		{ "self_attention.linear_qkv._extra_state", MT_P_NKINDS, 1 },
		{ "pre_mlp_layernorm.weight", MT_P_LN2_W, 0 },         { "pre_mlp_layernorm.bias", MT_P_LN2_B, 0 },
		{ "mlp.linear_fc1.weight", MT_P_FC1_W, 0 },            { "mlp.linear_fc1.bias", MT_P_FC1_B, 0 },
		{ "mlp.linear_fc1._extra_state", MT_P_NKINDS, 1 },
		{ "mlp.linear_fc2.weight", MT_P_FC2_W, 0 },            { "mlp.linear_fc2.bias", MT_P_FC2_B, 0 },
		{ "mlp.linear_fc2._extra_state", MT_P_NKINDS, 1 },
	};

	if (!e)
		return -1;
#define ADDG(G_, P_, ...) \
	do { \
		if (k == cap) { \
			struct entry *x_ = realloc(e, (size_t)(cap *= 2) * sizeof(*e)); \
			if (!x_) { free(e); return -1; } \
			e = x_; \
		} \
		snprintf(e[k].name, sizeof(e[k].name), __VA_ARGS__); \
		e[k].grp = (G_); \
		e[k].key = (P_) ? nkeys++ : -1; \
		e[k++].p = (P_); \
	} while (0)
#define ADD(P_, ...) ADDG(G_CORE, P_, __VA_ARGS__)
	mt_pp_split_layers(c, &sp, stage, 0, &lo, &hi);
	if (legacy) {
		if (first) {
			ADDG(G_WORD, mt_params_get(tab, -1, MT_P_WORD_EMB), "weight");
			if (mt_params_get(tab, -1, MT_P_POS_EMB))
				ADDG(G_POS, mt_params_get(tab, -1, MT_P_POS_EMB), "weight");
		}
		for (int l = lo; l < hi; l++)
			for (size_t j = 0; j < sizeof(legacy_layer) / sizeof(legacy_layer[0]); j++) {
				if (legacy_layer[j].extra_after)
					ADDG(G_ENCODER, NULL, "layers.%d.%s", l - lo, legacy_layer[j].name);
				else if (mt_params_get(tab, l, legacy_layer[j].kind))
					ADDG(G_ENCODER, mt_params_get(tab, l, legacy_layer[j].kind), "layers.%d.%s", l - lo,
					     legacy_layer[j].name);
			}
		if (last) {
			ADDG(G_ENCODER, mt_params_get(tab, -1, MT_P_FINAL_W), "final_norm.weight");
			if (mt_params_get(tab, -1, MT_P_FINAL_B))
				ADDG(G_ENCODER, mt_params_get(tab, -1, MT_P_FINAL_B), "final_norm.bias");
			if (c->untie_embeddings_and_output_weights) {
				ADDG(G_OUTPUT, mt_params_get(tab, -1, MT_P_OUTPUT), "weight");
				ADDG(G_OUTPUT, NULL, "_extra_state");
			} else if (!first) {
				ADDG(G_HEAD, mt_params_get(tab, -1, MT_P_WORD_EMB), "weight"); /* the tied copy */
			}
		}
		*out = e;
		*n = k;
		return 0;
	}
	if (first) {
		ADD(mt_params_get(tab, -1, MT_P_WORD_EMB), "embedding.word_embeddings.weight");
		if (mt_params_get(tab, -1, MT_P_POS_EMB))
			ADD(mt_params_get(tab, -1, MT_P_POS_EMB), "embedding.position_embeddings.weight");
	}
	for (int l = lo; l < hi; l++)
		for (size_t j = 0; j < sizeof(layer) / sizeof(layer[0]); j++) {
			if (layer[j].extra_after) {
				ADD(NULL, "decoder.layers.%d.%s", l - lo, layer[j].name);
				continue;
			}
			if (mt_params_get(tab, l, layer[j].kind))
				ADD(mt_params_get(tab, l, layer[j].kind), "decoder.layers.%d.%s", l - lo, layer[j].name);
		}
	if (last) {
		ADD(mt_params_get(tab, -1, MT_P_FINAL_W), "decoder.final_layernorm.weight");
		if (mt_params_get(tab, -1, MT_P_FINAL_B))
			ADD(mt_params_get(tab, -1, MT_P_FINAL_B), "decoder.final_layernorm.bias");
		if (c->untie_embeddings_and_output_weights)
			ADD(mt_params_get(tab, -1, MT_P_OUTPUT), "output_layer.weight");
		else if (!first)
			ADD(mt_params_get(tab, -1, MT_P_WORD_EMB), "output_layer.weight"); /* the tied copy */
		ADD(NULL, "output_layer._extra_state");
	}
#undef ADD
#undef ADDG
	*out = e;
	*n = k;
	return 0;
}

static void ns_int(struct mt_pkw *w, const char *k, int64_t v) { mt_pkw_str(w, k); mt_pkw_int(w, v); }
static void ns_bool(struct mt_pkw *w, const char *k, int v) { mt_pkw_str(w, k); mt_pkw_bool(w, v); }
static void ns_real(struct mt_pkw *w, const char *k, double v) { mt_pkw_str(w, k); mt_pkw_float(w, v); }
static void ns_str(struct mt_pkw *w, const char *k, const char *v)
{
	mt_pkw_str(w, k);
	if (v)
		mt_pkw_str(w, v);
	else
		mt_pkw_none(w);
}
static void ns_none(struct mt_pkw *w, const char *k) { mt_pkw_str(w, k); mt_pkw_none(w); }

/* args: Megatron's names, plain values only */
static void write_args(struct mt_pkw *w, const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded,
		       int rank)
{
	const struct mt_config *c = &m->cfg;

	mt_pkw_namespace_begin(w);
	ns_int(w, "num_layers", c->num_layers);
	ns_int(w, "hidden_size", c->hidden_size);
	ns_int(w, "ffn_hidden_size", c->ffn_hidden_size);
	ns_int(w, "num_attention_heads", c->num_attention_heads);
	ns_int(w, "kv_channels", c->kv_channels);
	ns_bool(w, "group_query_attention", c->num_query_groups != c->num_attention_heads);
	ns_int(w, "num_query_groups", c->num_query_groups != c->num_attention_heads ? c->num_query_groups : 1);
	ns_int(w, "seq_length", c->seq_length);
	ns_int(w, "max_position_embeddings", c->max_position_embeddings);
	ns_str(w, "position_embedding_type", c->position_embedding_type == MT_POS_ROPE ? "rope" : "learned_absolute");
	ns_bool(w, "add_position_embedding", c->position_embedding_type == MT_POS_LEARNED);
	if (c->rotary_base == (double)(int64_t)c->rotary_base)
		ns_int(w, "rotary_base", (int64_t)c->rotary_base); /* Megatron's --rotary-base is an int */
	else
		ns_real(w, "rotary_base", c->rotary_base);
	ns_real(w, "rotary_percent", 1.0);
	ns_bool(w, "rotary_interleaved", 0);
	ns_str(w, "normalization", c->normalization == MT_NORM_RMSNORM ? "RMSNorm" : "LayerNorm");
	ns_real(w, "norm_epsilon", c->norm_epsilon);
	ns_bool(w, "swiglu", c->swiglu);
	ns_bool(w, "add_bias_linear", c->add_bias_linear);
	ns_bool(w, "add_qkv_bias", c->add_bias_linear);
	ns_bool(w, "untie_embeddings_and_output_weights", c->untie_embeddings_and_output_weights);
	ns_int(w, "make_vocab_size_divisible_by", c->make_vocab_size_divisible_by);
	ns_int(w, "padded_vocab_size", padded);
	/* Megatron's --vocab-size: a NullTokenizer's N counts the ids below its end-of-document
	 * id N, which mt's vocabulary includes (the import adds it back) */
	ns_int(w, "vocab_size", m->tok_type && !strcmp(m->tok_type, "NullTokenizer") && c->vocab_size > 1 ?
		c->vocab_size - 1 : c->vocab_size);
	ns_real(w, "init_method_std", c->init_method_std);
	ns_real(w, "attention_dropout", 0);
	ns_real(w, "hidden_dropout", 0);
	ns_int(w, "tensor_model_parallel_size", o->tp);
	ns_int(w, "pipeline_model_parallel_size", o->pp);
	ns_none(w, "virtual_pipeline_model_parallel_size");
	ns_int(w, "data_parallel_size", 1);
	ns_int(w, "world_size", o->tp * o->pp);
	ns_int(w, "rank", rank);
	ns_bool(w, "bf16", o->dtype == MT_PKD_BF16);
	ns_bool(w, "fp16", o->dtype == MT_PKD_F16);
	mt_pkw_str(w, "params_dtype");
	mt_pkw_dtype(w, o->dtype);
	ns_int(w, "iteration", m->iteration);
	ns_int(w, "consumed_train_samples", m->state.consumed_train_samples);
	ns_int(w, "consumed_valid_samples", m->state.consumed_valid_samples);
	ns_str(w, "tokenizer_type", m->tok_type);
	ns_str(w, "vocab_file", m->tok_vocab_file);
	ns_str(w, "merge_file", m->tok_merge_file);
	ns_str(w, "tokenizer_model", m->tok_model);
	ns_str(w, "transformer_impl", "local");
	ns_bool(w, "use_legacy_models", o->legacy_names);
	ns_bool(w, "use_distributed_optimizer", 0);
	ns_str(w, "ckpt_format", o->torch_dist ? "torch_dist" : "torch");
	ns_bool(w, "data_parallel_random_init", 0);
	mt_pkw_namespace_end(w);
}

/* The tensor (or None) of entry x: a reference to its storage, of its shard's shape. */
static void write_value(struct mt_pkw *w, const struct entry *x, const struct mt_meg_export_opts *o, int64_t padded)
{
	int64_t shape[2];
	char key[24];

	if (!x->p) {
		mt_pkw_none(w);
		return;
	}
	mt_meg_shard_shape(x->p, o->tp, &shape[0], &shape[1]);
	if (x->p->split == MT_SPLIT_VOCAB)
		shape[0] = padded / o->tp;
	snprintf(key, sizeof(key), "%d", x->key);
	mt_pkw_tensor(w, o->dtype, key, x->p->ndim, shape);
}

/* One state dict (an OrderedDict) of the entries of group g. */
static void write_group(struct mt_pkw *w, const struct entry *e, int n, enum group g,
			const struct mt_meg_export_opts *o, int64_t padded)
{
	mt_pkw_odict_begin(w);
	for (int i = 0; i < n; i++)
		if (e[i].grp == g) {
			mt_pkw_str(w, e[i].name);
			write_value(w, &e[i], o, padded);
		}
	mt_pkw_dict_end(w);
}

/* The saved `model`: megatron-core's flat OrderedDict, or the legacy model's nesting
 * (struct entry's groups). */
static void write_model(struct mt_pkw *w, const struct entry *e, int n, const struct mt_meg_export_opts *o,
			int64_t padded)
{
	int has[G_NGROUPS] = { 0 };

	if (!o->legacy_names) {
		write_group(w, e, n, G_CORE, o, padded);
		return;
	}
	for (int i = 0; i < n; i++)
		has[e[i].grp] = 1;
	mt_pkw_dict_begin(w);
	mt_pkw_str(w, "language_model");
	mt_pkw_dict_begin(w);
	if (has[G_WORD] || has[G_POS]) {
		mt_pkw_str(w, "embedding");
		mt_pkw_dict_begin(w);
		if (has[G_WORD]) {
			mt_pkw_str(w, "word_embeddings");
			write_group(w, e, n, G_WORD, o, padded);
		}
		if (has[G_POS]) {
			mt_pkw_str(w, "position_embeddings");
			write_group(w, e, n, G_POS, o, padded);
		}
		mt_pkw_dict_end(w);
	}
	mt_pkw_str(w, "encoder");
	write_group(w, e, n, G_ENCODER, o, padded);
	if (has[G_OUTPUT]) {
		mt_pkw_str(w, "output_layer");
		write_group(w, e, n, G_OUTPUT, o, padded);
	}
	mt_pkw_dict_end(w);
	if (has[G_HEAD]) {
		mt_pkw_str(w, "word_embeddings_for_head");
		write_group(w, e, n, G_HEAD, o, padded);
	}
	mt_pkw_dict_end(w);
}

static int write_rank(const struct mt_model *m, const struct mt_meg_export_opts *o, const char *file, int t, int p,
		      int64_t padded, struct mt_err *err)
{
	const struct mt_config *c = &m->cfg;
	struct entry *e = NULL;
	int n = 0, rc = -1;
	struct mt_pkw w;
	struct mt_tzw z;
	float *sh = NULL;
	void *out = NULL;
	int64_t shn = 0;
	size_t es = mt_pk_dtype_size(o->dtype);
	/* a copy of a vocabulary row for Megatron's padding past mt's: the last real row */
	int64_t fill = c->vocab_size - 1;

	if (stage_entries(c, &m->params, o->pp, p, o->legacy_names, &e, &n))
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	mt_pkw_init(&w);
	mt_pkw_dict_begin(&w);
	mt_pkw_str(&w, "args");
	write_args(&w, m, o, padded, t + o->tp * p);
	mt_pkw_str(&w, "checkpoint_version");
	mt_pkw_float(&w, 3.0);
	mt_pkw_str(&w, "iteration");
	mt_pkw_int(&w, m->iteration);
	mt_pkw_str(&w, "model");
	write_model(&w, e, n, o, padded);
	mt_pkw_str(&w, "num_floating_point_operations_so_far");
	mt_pkw_int(&w, 0);
	mt_pkw_dict_end(&w);
	mt_pkw_stop(&w);
	if (w.oom) {
		mt_err_set(err, MT_EXIT_IO, "out of memory");
		goto out;
	}
	if (mt_tzw_open(&z, file, "model_optim_rng", err))
		goto out;
	if (mt_tzw_add(&z, "data.pkl", w.b, w.n, err) || mt_tzw_add(&z, ".format_version", "1", 1, err) ||
	    mt_tzw_add(&z, ".storage_alignment", "64", 2, err) || mt_tzw_add(&z, "byteorder", "little", 6, err))
		goto out_z;
	for (int i = 0; i < n; i++) {
		const struct mt_param *q = e[i].p;
		int64_t r, cc, numel;
		char key[32];
		if (!q)
			continue;
		mt_meg_shard_shape(q, o->tp, &r, &cc);
		if (q->split == MT_SPLIT_VOCAB)
			r = padded / o->tp;
		numel = r * cc;
		if (numel > shn) {
			free(sh);
			free(out);
			sh = malloc((size_t)numel * sizeof(float));
			out = malloc((size_t)numel * es);
			shn = numel;
			if (!sh || !out) {
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out_z;
			}
		}
		if (q->split == MT_SPLIT_VOCAB) {
			/* rank t's rows of Megatron's padded vocabulary: mt's rows, then copies of the
			 * last real row where Megatron pads further */
			for (int64_t k = 0; k < r; k++) {
				int64_t g = (int64_t)t * r + k;
				memcpy(sh + k * cc, m->w + q->offset + (g < q->shape[0] ? g : fill) * cc, (size_t)cc * sizeof(float));
			}
		} else {
			mt_meg_shard_copy(q, o->tp, t, m->w + q->offset, sh, 0, 0, fill);
		}
		for (int64_t k = 0; k < numel; k++) {
			if (o->dtype == MT_PKD_F32)
				((float *)out)[k] = sh[k];
			else {
				uint16_t h = o->dtype == MT_PKD_BF16 ? f32_to_bf16(sh[k]) : f32_to_f16(sh[k]);
				((unsigned char *)out)[2 * k] = (unsigned char)h;
				((unsigned char *)out)[2 * k + 1] = (unsigned char)(h >> 8);
			}
		}
		snprintf(key, sizeof(key), "data/%d", e[i].key);
		if (mt_tzw_add(&z, key, out, (uint64_t)numel * es, err))
			goto out_z;
	}
	{
		char id[64];
		snprintf(id, sizeof(id), "%020lld%020d", (long long)m->iteration, t + o->tp * p);
		if (mt_tzw_add(&z, "version", "3\n", 2, err) || mt_tzw_add(&z, ".data/serialization_id", id, strlen(id), err))
			goto out_z;
	}
	if (mt_tzw_finish(&z, err))
		goto out_z;
	rc = 0;
	goto out;
out_z:
	mt_tzw_abort(&z);
out:
	mt_pkw_free(&w);
	free(e);
	free(sh);
	free(out);
	return rc;
}

int mt_meg_export(const struct mt_model *m, const char *outdir, const struct mt_meg_export_opts *o,
		  struct mt_meg_report *r, struct mt_err *err)
{
	const struct mt_config *c = &m->cfg;
	char tmp[PATH_MAX], iter[PATH_MAX + 32], sub[PATH_MAX + 64], file[PATH_MAX + 96], text[32];
	int64_t padded = mt_config_padded_vocab(c->vocab_size, c->make_vocab_size_divisible_by, o->tp);
	struct stat st;
	int rc = -1;

	memset(r, 0, sizeof(*r));
	/* what Megatron can split as asked (its divide() of each size by the TP size, the
	 * checks mt-train makes: params.c's check_tp, mt_pp_split_check); files it would refuse
	 * to load are not written */
	if (o->tp < 1 || o->pp < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "the target parallel sizes must be positive");
	if (padded < c->vocab_size)
		padded = c->vocab_size;
	if (c->num_attention_heads % o->tp)
		return mt_err_set(err, MT_EXIT_USAGE, "--target-tensor-parallel-size %d does not divide the %d attention heads",
				  o->tp, c->num_attention_heads);
	if (c->num_query_groups % o->tp)
		return mt_err_set(err, MT_EXIT_USAGE, "--target-tensor-parallel-size %d does not divide the %d query groups: "
				  "Megatron gives each tensor-parallel rank whole query groups and would not load the files",
				  o->tp, c->num_query_groups);
	if (c->ffn_hidden_size % o->tp)
		return mt_err_set(err, MT_EXIT_USAGE, "--target-tensor-parallel-size %d does not divide --ffn-hidden-size %d",
				  o->tp, c->ffn_hidden_size);
	if (padded % o->tp)
		return mt_err_set(err, MT_EXIT_USAGE, "--target-tensor-parallel-size %d does not divide the padded vocabulary "
				  "%lld", o->tp, (long long)padded);
	if (c->num_layers % o->pp)
		return mt_err_set(err, MT_EXIT_USAGE, "--target-pipeline-parallel-size %d does not divide the %d layers", o->pp,
				  c->num_layers);
	{
		/* and whatever else mt-train refuses at these sizes */
		struct mt_config tc = *c;
		struct mt_params pt;
		struct mt_pp_split sp = { o->pp, 1, 0, 0 };
		tc.padded_vocab_size = padded;
		if (mt_params_build_tp(&pt, &tc, o->tp, 0, 0, err))
			return mt_err_prefix(err, "export at --target-tensor-parallel-size %d", o->tp);
		mt_params_free(&pt);
		if (mt_pp_split_check(&tc, &sp, err))
			return mt_err_prefix(err, "export at --target-pipeline-parallel-size %d", o->pp);
	}
	if (o->dtype != MT_PKD_F32 && o->dtype != MT_PKD_BF16 && o->dtype != MT_PKD_F16)
		return mt_err_set(err, MT_EXIT_USAGE, "the export dtype must be fp32, bf16 or fp16");
	if (stat(outdir, &st) == 0) {
		DIR *d = opendir(outdir);
		struct dirent *e;
		int empty = 1;
		while (d && (e = readdir(d)))
			if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
				empty = 0;
		if (d)
			closedir(d);
		if (!d || !empty)
			return mt_err_set(err, MT_EXIT_USAGE, "'%s' exists and is not an empty directory", outdir);
	}
	{
		size_t n = strlen(outdir);
		while (n > 1 && outdir[n - 1] == '/')
			n--;
		if ((size_t)snprintf(tmp, sizeof(tmp), "%.*s.tmp.%d", (int)n, outdir, (int)getpid()) >= sizeof(tmp))
			return mt_err_set(err, MT_EXIT_USAGE, "path too long: '%s'", outdir);
	}
	if (mkdir(tmp, 0777) != 0)
		return mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", tmp);
	mt_ckpt_iter_dir(iter, sizeof(iter), tmp, m->iteration, NULL);
	if (mkdir(iter, 0777) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", iter);
		goto out;
	}
	if (o->torch_dist && mt_meg_torchdist_write(m, o, iter, padded, &r->files, err))
		goto out;
	for (int p = 0; !o->torch_dist && p < o->pp; p++)
		for (int t = 0; t < o->tp; t++) {
			if (o->pp == 1)
				snprintf(sub, sizeof(sub), "%s/mp_rank_%02d", iter, t);
			else
				snprintf(sub, sizeof(sub), "%s/mp_rank_%02d_%03d", iter, t, p);
			if (mkdir(sub, 0777) != 0) {
				mt_err_errno(err, MT_EXIT_IO, "cannot create '%s'", sub);
				goto out;
			}
			snprintf(file, sizeof(file), "%s/model_optim_rng.pt", sub);
			if (write_rank(m, o, file, t, p, padded, err))
				goto out;
			mt_fsync_path(sub, 1);
			r->files++;
		}
	mt_fsync_path(iter, 1);
	snprintf(file, sizeof(file), "%s/%s", tmp, MT_CKPT_MEGATRON_TRACKER);
	snprintf(text, sizeof(text), "%lld", (long long)m->iteration);
	if (mt_atomic_write_file(file, text, strlen(text), err))
		goto out;
	mt_fsync_path(tmp, 1);
	rmdir(outdir); /* an empty directory, checked above */
	if (rename(tmp, outdir) != 0) {
		mt_err_errno(err, MT_EXIT_IO, "cannot rename '%s' to '%s'", tmp, outdir);
		goto out;
	}
	{
		char parent[PATH_MAX], *slash;
		snprintf(parent, sizeof(parent), "%s", outdir);
		slash = strrchr(parent, '/');
		if (slash && slash != parent)
			*slash = 0;
		else
			strcpy(parent, slash ? "/" : ".");
		mt_fsync_path(parent, 1);
	}
	r->tp = o->tp;
	r->pp = o->pp;
	r->vp = 1;
	r->iteration = m->iteration;
	r->cfg = *c;
	r->cfg.padded_vocab_size = padded;
	r->tensors = m->params.n;
	rc = 0;
out:
	if (rc)
		mt_rm_tree(tmp);
	return rc;
}

/* ---- for the torch_dist export (torchdist_write.c) ---- */

void mt_meg_args_write(struct mt_pkw *w, const struct mt_model *m, const struct mt_meg_export_opts *o, int64_t padded,
		       int rank)
{
	write_args(w, m, o, padded, rank);
}

void mt_meg_to_dtype(enum mt_pk_dtype d, const float *in, void *out, int64_t n)
{
	/* one loop per dtype, not a test per element: the per-element test was a tenth of a
	 * torch_dist export's time (perf, bench/ckpt-megatron.sh) */
	unsigned char *o = out;
	if (d == MT_PKD_F32) {
		memcpy(out, in, (size_t)n * sizeof(float));
	} else if (d == MT_PKD_BF16) {
		for (int64_t k = 0; k < n; k++) {
			uint16_t h = f32_to_bf16(in[k]);
			o[2 * k] = (unsigned char)h;
			o[2 * k + 1] = (unsigned char)(h >> 8);
		}
	} else {
		for (int64_t k = 0; k < n; k++) {
			uint16_t h = f32_to_f16(in[k]);
			o[2 * k] = (unsigned char)h;
			o[2 * k + 1] = (unsigned char)(h >> 8);
		}
	}
}
