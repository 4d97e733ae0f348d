/* megatron_args.c: Megatron-LM's args read into mt's configuration (megatron_args.h). */
#include "ckpt/megatron_args.h"

#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct mt_pk *arg(const struct mt_pk *ns, const char *name)
{
	struct mt_pk *v = mt_pk_attr(ns, name);

	return v && v->kind != MT_PK_NONE ? v : NULL;
}

int mt_meg_arg_int(const struct mt_pk *ns, const char *name, int64_t def, int64_t *out, const char *path,
		   struct mt_err *err)
{
	struct mt_pk *v = arg(ns, name);

	if (!v) {
		if (def == INT64_MIN)
			return mt_err_set(err, MT_EXIT_DATA, "'%s': args.%s is missing", path, name);
		*out = def;
		return 0;
	}
	if (mt_pk_as_int(v, out))
		return mt_err_set(err, MT_EXIT_DATA, "'%s': args.%s is not an integer", path, name);
	return 0;
}

static int arg_bool(const struct mt_pk *ns, const char *name, int def)
{
	struct mt_pk *v = arg(ns, name);
	int64_t x;

	return v && !mt_pk_as_int(v, &x) ? x != 0 : def;
}

static double arg_real(const struct mt_pk *ns, const char *name, double def)
{
	struct mt_pk *v = arg(ns, name);
	double x;

	return v && !mt_pk_as_double(v, &x) ? x : def;
}

static const char *arg_str(const struct mt_pk *ns, const char *name)
{
	struct mt_pk *v = arg(ns, name);

	return v && v->kind == MT_PK_STR ? v->s : NULL;
}

/* mt's config and the pipeline split from Megatron's args. */
int mt_meg_args_config(const struct mt_pk *ns, const char *path, const struct mt_meg_import_opts *o,
			    struct mt_config *c, struct mt_pp_split *sp, int *tp, struct mt_err *err)
{
	int64_t L, h, heads, ffn, kv, groups = 0, seq, maxpos, padded, div, vocab, t, p, vp, first, last, experts;
	const char *pos, *norm;

	memset(c, 0, sizeof(*c));
	memset(sp, 0, sizeof(*sp));
	if (!ns || ns->kind != MT_PK_OBJECT || strcmp(ns->s, "argparse.Namespace") || !ns->state)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': no args (an argparse.Namespace) in the checkpoint: mt needs "
				  "Megatron's arguments to know the model", path);
	if (mt_meg_arg_int(ns, "num_layers", INT64_MIN, &L, path, err) ||
	    mt_meg_arg_int(ns, "hidden_size", INT64_MIN, &h, path, err) ||
	    mt_meg_arg_int(ns, "num_attention_heads", INT64_MIN, &heads, path, err) ||
	    mt_meg_arg_int(ns, "ffn_hidden_size", 0, &ffn, path, err) || mt_meg_arg_int(ns, "kv_channels", 0, &kv, path, err) ||
	    mt_meg_arg_int(ns, "seq_length", INT64_MIN, &seq, path, err) ||
	    mt_meg_arg_int(ns, "max_position_embeddings", seq, &maxpos, path, err) ||
	    mt_meg_arg_int(ns, "padded_vocab_size", INT64_MIN, &padded, path, err) ||
	    mt_meg_arg_int(ns, "make_vocab_size_divisible_by", 128, &div, path, err) ||
	    mt_meg_arg_int(ns, "vocab_size", 0, &vocab, path, err) ||
	    mt_meg_arg_int(ns, "tensor_model_parallel_size", 1, &t, path, err) ||
	    mt_meg_arg_int(ns, "pipeline_model_parallel_size", 1, &p, path, err) ||
	    mt_meg_arg_int(ns, "virtual_pipeline_model_parallel_size", 1, &vp, path, err) ||
	    mt_meg_arg_int(ns, "decoder_first_pipeline_num_layers", 0, &first, path, err) ||
	    mt_meg_arg_int(ns, "decoder_last_pipeline_num_layers", 0, &last, path, err) ||
	    mt_meg_arg_int(ns, "num_experts", 0, &experts, path, err))
		return -1;
	if (arg_bool(ns, "group_query_attention", 0) && mt_meg_arg_int(ns, "num_query_groups", heads, &groups, path, err))
		return -1;
	if (L <= 0 || h <= 0 || heads <= 0 || seq <= 0 || padded <= 0 || t <= 0 || p <= 0 || vp <= 0 || L > INT32_MAX ||
	    h > INT32_MAX || heads > INT32_MAX || ffn > INT32_MAX || kv > INT32_MAX || seq > INT32_MAX ||
	    maxpos > INT32_MAX || t > 4096 || p > 4096 || vp > 4096 || div <= 0 || div > INT32_MAX)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': args hold sizes out of range (num_layers %lld, hidden_size %lld, "
				  "num_attention_heads %lld, padded_vocab_size %lld, TP %lld, PP %lld)", path, (long long)L,
				  (long long)h, (long long)heads, (long long)padded, (long long)t, (long long)p);
#define REFUSE(cond, ...) \
	do { if (cond) return mt_err_set(err, MT_EXIT_USAGE, __VA_ARGS__); } while (0)
	REFUSE(experts > 0, "'%s': a mixture-of-experts model (args.num_experts %lld) is not supported", path,
	       (long long)experts);
	REFUSE(arg_bool(ns, "qk_layernorm", 0), "'%s': --qk-layernorm is not supported", path);
	REFUSE(arg_bool(ns, "squared_relu", 0), "'%s': --squared-relu is not supported", path);
	REFUSE(arg_bool(ns, "apply_residual_connection_post_layernorm", 0),
	       "'%s': --apply-residual-connection-post-layernorm is not supported", path);
	REFUSE(arg_bool(ns, "rotary_interleaved", 0), "'%s': --rotary-interleaved is not supported", path);
	REFUSE(arg_bool(ns, "use_rope_scaling", 0), "'%s': --use-rope-scaling is not supported", path);
	REFUSE(arg_real(ns, "rotary_percent", 1.0) != 1.0, "'%s': --rotary-percent %g is not supported (1.0 only)", path,
	       arg_real(ns, "rotary_percent", 1.0));
	REFUSE(arg_bool(ns, "standalone_embedding_stage", 0), "'%s': --standalone-embedding-stage is not supported", path);
	REFUSE(arg_bool(ns, "account_for_embedding_in_pipeline_split", 0) ||
	       arg_bool(ns, "account_for_loss_in_pipeline_split", 0),
	       "'%s': --account-for-embedding/loss-in-pipeline-split is not supported", path);
	pos = arg_str(ns, "position_embedding_type");
	if (!pos)
		pos = arg_bool(ns, "use_rotary_position_embeddings", 0) ? "rope" : "learned_absolute";
	REFUSE(strcmp(pos, "learned_absolute") && strcmp(pos, "rope"),
	       "'%s': --position-embedding-type %s is not supported (learned_absolute or rope)", path, pos);
	norm = arg_str(ns, "normalization");
	if (!norm)
		norm = "LayerNorm";
	REFUSE(strcmp(norm, "LayerNorm") && strcmp(norm, "RMSNorm"), "'%s': --normalization %s is not supported", path,
	       norm);
	c->add_bias_linear = arg_bool(ns, "add_bias_linear", 1);
	REFUSE(!c->add_bias_linear && arg_bool(ns, "add_qkv_bias", 0),
	       "'%s': --add-qkv-bias without linear biases is not supported (mt has one switch, --disable-bias-linear)",
	       path);
#undef REFUSE
	c->num_layers = (int)L;
	c->hidden_size = (int)h;
	c->num_attention_heads = (int)heads;
	c->num_query_groups = (int)groups;
	c->kv_channels = (int)kv;
	c->ffn_hidden_size = (int)ffn;
	c->seq_length = (int)seq;
	c->max_position_embeddings = (int)maxpos;
	c->make_vocab_size_divisible_by = (int)div;
	c->padded_vocab_size = padded;
	if (o->vocab_size > 0)
		vocab = o->vocab_size;
	else if (vocab > 0 && arg_str(ns, "tokenizer_type") && !strcmp(arg_str(ns, "tokenizer_type"), "NullTokenizer"))
		vocab += 1; /* ids below N and the end-of-document id N */
	c->vocab_size = vocab > 0 ? vocab : padded;
	if (c->vocab_size > padded)
		return mt_err_set(err, MT_EXIT_USAGE, "'%s': the vocabulary %lld is larger than args.padded_vocab_size %lld",
				  path, (long long)c->vocab_size, (long long)padded);
	c->position_embedding_type = !strcmp(pos, "rope") ? MT_POS_ROPE : MT_POS_LEARNED;
	c->rotary_base = arg_real(ns, "rotary_base", 10000);
	c->normalization = !strcmp(norm, "RMSNorm") ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	c->norm_epsilon = arg_real(ns, "norm_epsilon", arg_real(ns, "layernorm_epsilon", 1e-5));
	c->swiglu = arg_bool(ns, "swiglu", 0);
	c->untie_embeddings_and_output_weights = arg_bool(ns, "untie_embeddings_and_output_weights", 0);
	c->init_method_std = arg_real(ns, "init_method_std", 0.02);
	mt_config_defaults(c);
	if (mt_config_validate(c, err))
		return mt_err_prefix(err, "'%s': args", path);
	sp->size = (int)p;
	sp->vp = (int)vp;
	sp->first = (int)first;
	sp->last = (int)last;
	if (mt_pp_split_check(c, sp, err))
		return mt_err_prefix(err, "'%s': args", path);
	*tp = (int)t;
	return 0;
}

char *mt_meg_args_provenance(const struct mt_pk *ns, const char *src, const struct mt_meg_report *r, int64_t ckv)
{
	json_t *ta = json_object(), *from = json_object();
	const char *tt = arg_str(ns, "tokenizer_type");
	char abs[PATH_MAX];
	char *s;

	if (!realpath(src, abs))
		snprintf(abs, sizeof(abs), "%s", src);
	json_object_set_new(ta, "argv", json_array());
	json_object_set_new(from, "path", json_string(abs));
	json_object_set_new(from, "format", json_string("megatron"));
	json_object_set_new(from, "tensor_model_parallel_size", json_integer(r->tp));
	json_object_set_new(from, "pipeline_model_parallel_size", json_integer(r->pp));
	json_object_set_new(from, "virtual_pipeline_model_parallel_size", json_integer(r->vp));
	json_object_set_new(from, "iteration", json_integer(r->iteration));
	json_object_set_new(from, "checkpoint_version", json_real((double)ckv / 10));
	json_object_set_new(from, "names", json_string(r->legacy_names ? "legacy" : "megatron-core"));
	json_object_set_new(from, "optimizer", json_boolean(r->optimizer));
	json_object_set_new(from, "vocab_size", json_integer(r->cfg.vocab_size));
	json_object_set_new(from, "padded_vocab_size", json_integer(r->cfg.padded_vocab_size));
	if (tt)
		json_object_set_new(from, "tokenizer_type", json_string(tt));
	json_object_set_new(ta, "imported_from", from);
	{
		int64_t mbs, gbs;
		struct mt_err e = { 0 };
		if (!mt_meg_arg_int(ns, "micro_batch_size", 0, &mbs, "", &e) && mbs > 0)
			json_object_set_new(ta, "micro_batch_size", json_integer(mbs));
		if (!mt_meg_arg_int(ns, "global_batch_size", 0, &gbs, "", &e) && gbs > 0)
			json_object_set_new(ta, "global_batch_size", json_integer(gbs));
	}
	/* the tokenizer, where its files are on this machine, so that mt-eval and
	 * mt-generate default to it (model.h) */
	if (tt) {
		const char *vf = arg_str(ns, "vocab_file"), *mf = arg_str(ns, "merge_file"), *tm = arg_str(ns, "tokenizer_model");
		int ok = (!vf || access(vf, R_OK) == 0) && (!mf || access(mf, R_OK) == 0) && (!tm || access(tm, R_OK) == 0);
		if (ok) {
			json_t *tk = json_object();
			json_object_set_new(tk, "type", json_string(tt));
			if (vf)
				json_object_set_new(tk, "vocab_file", json_string(vf));
			if (mf)
				json_object_set_new(tk, "merge_file", json_string(mf));
			if (tm)
				json_object_set_new(tk, "tokenizer_model", json_string(tm));
			json_object_set_new(ta, "tokenizer", tk);
		}
	}
	s = json_dumps(ta, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
	json_decref(ta);
	return s;
}

/* ---- the names of a layer's tensors ---- */

/* Every name a layer's tensor goes by in the files Megatron writes: megatron-core's, Transformer
 * Engine's (the norms fused into the next linear layer, which torch_dist files always use) and
 * the legacy model's; a norm's Transformer Engine name before its linear layer's prefix. */
static const struct {
	const char *prefix;
	enum mt_param_kind w, b;
} layer_names[] = {
	{ "input_layernorm.", MT_P_LN1_W, MT_P_LN1_B },
	{ "input_norm.", MT_P_LN1_W, MT_P_LN1_B },
	{ "self_attention.linear_qkv.layer_norm_", MT_P_LN1_W, MT_P_LN1_B }, /* Transformer Engine */
	{ "self_attention.linear_qkv.", MT_P_QKV_W, MT_P_QKV_B },
	{ "self_attention.query_key_value.", MT_P_QKV_W, MT_P_QKV_B },
	{ "attention.query_key_value.", MT_P_QKV_W, MT_P_QKV_B },
	{ "self_attention.linear_proj.", MT_P_PROJ_W, MT_P_PROJ_B },
	{ "self_attention.dense.", MT_P_PROJ_W, MT_P_PROJ_B },
	{ "attention.dense.", MT_P_PROJ_W, MT_P_PROJ_B },
	{ "pre_mlp_layernorm.", MT_P_LN2_W, MT_P_LN2_B },
	{ "post_attention_norm.", MT_P_LN2_W, MT_P_LN2_B },
	{ "post_attention_layernorm.", MT_P_LN2_W, MT_P_LN2_B },
	{ "mlp.linear_fc1.layer_norm_", MT_P_LN2_W, MT_P_LN2_B },            /* Transformer Engine */
	{ "mlp.linear_fc1.", MT_P_FC1_W, MT_P_FC1_B },
	{ "mlp.dense_h_to_4h.", MT_P_FC1_W, MT_P_FC1_B },
	{ "mlp.linear_fc2.", MT_P_FC2_W, MT_P_FC2_B },
	{ "mlp.dense_4h_to_h.", MT_P_FC2_W, MT_P_FC2_B },
};

int mt_meg_layer_kind(const char *rest, int *kind)
{
	for (size_t k = 0; k < sizeof(layer_names) / sizeof(layer_names[0]); k++) {
		size_t n = strlen(layer_names[k].prefix);
		if (strncmp(rest, layer_names[k].prefix, n))
			continue;
		if (!strcmp(rest + n, "weight"))
			*kind = (int)layer_names[k].w;
		else if (!strcmp(rest + n, "bias"))
			*kind = (int)layer_names[k].b;
		else
			continue;
		return 0;
	}
	return -1;
}
