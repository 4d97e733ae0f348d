/* hf.c: mt parameters <-> Hugging Face GPT-2 and Llama tensors and configs (see hf.h). */
#include "ckpt/hf.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mt_hf_format_parse(const char *s, enum mt_hf_format *f)
{
	if (!strcmp(s, "hf-gpt2"))
		*f = MT_HF_GPT2;
	else if (!strcmp(s, "hf-llama"))
		*f = MT_HF_LLAMA;
	else
		return -1;
	return 0;
}

const char *mt_hf_format_name(enum mt_hf_format f)
{
	return f == MT_HF_GPT2 ? "hf-gpt2" : "hf-llama";
}

int mt_hf_check(const struct mt_config *c, enum mt_hf_format f, struct mt_err *err)
{
#define REFUSE(cond, ...) \
	do { if (cond) return mt_err_set(err, MT_EXIT_USAGE, __VA_ARGS__); } while (0)
	if (f == MT_HF_GPT2) {
		const char *why = "--format hf-gpt2 cannot express this model";
		REFUSE(c->normalization != MT_NORM_LAYERNORM, "%s: it uses --normalization RMSNorm (try --format hf-llama)", why);
		REFUSE(c->position_embedding_type != MT_POS_LEARNED,
		       "%s: it uses --position-embedding-type rope (try --format hf-llama)", why);
		REFUSE(c->swiglu, "%s: it uses --swiglu (try --format hf-llama)", why);
		REFUSE(!c->add_bias_linear, "%s: it uses --disable-bias-linear", why);
		REFUSE(c->untie_embeddings_and_output_weights, "%s: it uses --untie-embeddings-and-output-weights", why);
		REFUSE(c->num_query_groups != c->num_attention_heads,
		       "%s: it uses --group-query-attention (--num-query-groups %d)", why, c->num_query_groups);
		REFUSE((int64_t)c->kv_channels * c->num_attention_heads != c->hidden_size,
		       "%s: --kv-channels %d times --num-attention-heads %d is not --hidden-size %d", why, c->kv_channels,
		       c->num_attention_heads, c->hidden_size);
	} else {
		const char *why = "--format hf-llama cannot express this model";
		REFUSE(c->normalization != MT_NORM_RMSNORM, "%s: it uses --normalization LayerNorm (try --format hf-gpt2)", why);
		REFUSE(c->position_embedding_type != MT_POS_ROPE,
		       "%s: it uses --position-embedding-type learned_absolute (try --format hf-gpt2)", why);
		REFUSE(!c->swiglu, "%s: it does not use --swiglu (try --format hf-gpt2)", why);
	}
#undef REFUSE
	return 0;
}

/* ---- the mapping, element by element ---- */

struct piece {
	char name[128];
	int ndim;
	int64_t shape[2];
};

struct plan {
	int n;
	struct piece pc[3];
};

static void piece(struct plan *pl, int ndim, int64_t r, int64_t c, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));
static void piece(struct plan *pl, int ndim, int64_t r, int64_t c, const char *fmt, ...)
{
	struct piece *p = &pl->pc[pl->n++];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(p->name, sizeof(p->name), fmt, ap);
	va_end(ap);
	p->ndim = ndim;
	p->shape[0] = r;
	p->shape[1] = ndim == 2 ? c : 1;
}

struct dims {
	int64_t h, np, ng, hd, q, kv, per, f, V;
};

static struct dims dims_of(const struct mt_config *c)
{
	struct dims d;

	d.h = c->hidden_size;
	d.np = c->num_attention_heads;
	d.ng = c->num_query_groups;
	d.hd = c->kv_channels;
	d.q = d.np * d.hd;
	d.kv = d.ng * d.hd;
	d.per = d.np / d.ng;
	d.f = c->ffn_hidden_size;
	d.V = c->vocab_size;
	return d;
}

/* The Hugging Face tensors one mt parameter becomes. */
static void plan_of(const struct mt_config *c, enum mt_hf_format f, const struct mt_param *p, struct plan *pl)
{
	struct dims d = dims_of(c);
	int l = p->layer, g2 = f == MT_HF_GPT2;
	const char *lp = g2 ? "transformer.h" : "model.layers";

	pl->n = 0;
	switch (p->kind) {
	case MT_P_WORD_EMB:
		piece(pl, 2, d.V, d.h, "%s", g2 ? "transformer.wte.weight" : "model.embed_tokens.weight");
		break;
	case MT_P_POS_EMB:
		piece(pl, 2, p->shape[0], d.h, "transformer.wpe.weight");
		break;
	case MT_P_OUTPUT:
		piece(pl, 2, d.V, d.h, "lm_head.weight");
		break;
	case MT_P_LN1_W:
	case MT_P_LN1_B:
		piece(pl, 1, d.h, 0, "%s.%d.%s.%s", lp, l, g2 ? "ln_1" : "input_layernorm",
		      p->kind == MT_P_LN1_W ? "weight" : "bias");
		break;
	case MT_P_LN2_W:
	case MT_P_LN2_B:
		piece(pl, 1, d.h, 0, "%s.%d.%s.%s", lp, l, g2 ? "ln_2" : "post_attention_layernorm",
		      p->kind == MT_P_LN2_W ? "weight" : "bias");
		break;
	case MT_P_FINAL_W:
	case MT_P_FINAL_B:
		piece(pl, 1, d.h, 0, "%s.%s", g2 ? "transformer.ln_f" : "model.norm", p->kind == MT_P_FINAL_W ? "weight" : "bias");
		break;
	case MT_P_QKV_W:
	case MT_P_QKV_B: {
		int w = p->kind == MT_P_QKV_W;
		const char *s = w ? "weight" : "bias";
		if (g2)
			piece(pl, w ? 2 : 1, w ? d.h : d.q + 2 * d.kv, d.q + 2 * d.kv, "%s.%d.attn.c_attn.%s", lp, l, s);
		else {
			piece(pl, w ? 2 : 1, d.q, d.h, "%s.%d.self_attn.q_proj.%s", lp, l, s);
			piece(pl, w ? 2 : 1, d.kv, d.h, "%s.%d.self_attn.k_proj.%s", lp, l, s);
			piece(pl, w ? 2 : 1, d.kv, d.h, "%s.%d.self_attn.v_proj.%s", lp, l, s);
		}
		break;
	}
	case MT_P_PROJ_W:
		piece(pl, 2, g2 ? d.q : d.h, g2 ? d.h : d.q, "%s.%d.%s.weight", lp, l, g2 ? "attn.c_proj" : "self_attn.o_proj");
		break;
	case MT_P_PROJ_B:
		piece(pl, 1, d.h, 0, "%s.%d.%s.bias", lp, l, g2 ? "attn.c_proj" : "self_attn.o_proj");
		break;
	case MT_P_FC1_W:
	case MT_P_FC1_B: {
		int w = p->kind == MT_P_FC1_W;
		const char *s = w ? "weight" : "bias";
		if (g2)
			piece(pl, w ? 2 : 1, w ? d.h : d.f, d.f, "%s.%d.mlp.c_fc.%s", lp, l, s);
		else {
			piece(pl, w ? 2 : 1, d.f, d.h, "%s.%d.mlp.gate_proj.%s", lp, l, s);
			piece(pl, w ? 2 : 1, d.f, d.h, "%s.%d.mlp.up_proj.%s", lp, l, s);
		}
		break;
	}
	case MT_P_FC2_W:
		piece(pl, 2, g2 ? d.f : d.h, g2 ? d.h : d.f, "%s.%d.%s.weight", lp, l, g2 ? "mlp.c_proj" : "mlp.down_proj");
		break;
	case MT_P_FC2_B:
		piece(pl, 1, d.h, 0, "%s.%d.%s.bias", lp, l, g2 ? "mlp.c_proj" : "mlp.down_proj");
		break;
	default:
		break;
	}
}

/* Where element (r, col) of an mt parameter lives: piece *k, offset *off. *pad is set for
 * a vocabulary padding row, which has no place of its own (the last real row's is given). */
static void locate(const struct dims *d, enum mt_hf_format f, const struct mt_param *p, int64_t r, int64_t col, int *k,
		   int64_t *off, int *pad)
{
	int g2 = f == MT_HF_GPT2;
	int64_t cols = p->shape[1];

	*k = 0;
	*pad = 0;
	switch (p->kind) {
	case MT_P_WORD_EMB:
	case MT_P_OUTPUT:
		if (r >= d->V) {
			*pad = 1;
			r = d->V - 1;
		}
		*off = r * cols + col;
		return;
	case MT_P_QKV_W:
	case MT_P_QKV_B: {
		int64_t g = r / ((d->per + 2) * d->hd), s = (r / d->hd) % (d->per + 2), i = r % d->hd, x;
		if (s < d->per)
			x = (g * d->per + s) * d->hd + i;        /* query head g*per+s */
		else
			x = g * d->hd + i;                       /* key or value head g */
		if (g2) {
			if (s >= d->per)                         /* GPT-2: [q | k | v] columns */
				x += d->q + (s == d->per ? 0 : d->kv);
			*off = p->kind == MT_P_QKV_W ? col * (d->q + 2 * d->kv) + x : x;
		} else {
			*k = s < d->per ? 0 : s == d->per ? 1 : 2;
			*off = p->kind == MT_P_QKV_W ? x * d->h + col : x;
		}
		return;
	}
	case MT_P_PROJ_W:
	case MT_P_FC2_W:
		*off = g2 ? col * p->shape[0] + r : r * cols + col;
		return;
	case MT_P_FC1_W:
	case MT_P_FC1_B:
		if (g2)
			*off = p->kind == MT_P_FC1_W ? col * p->shape[0] + r : r;
		else {
			*k = r >= d->f;
			*off = (r % d->f) * (p->kind == MT_P_FC1_W ? cols : 1) + (p->kind == MT_P_FC1_W ? col : 0);
		}
		return;
	default:
		*off = r * cols + col;
		return;
	}
}

void mt_hf_tensors_free(struct mt_hf_tensors *h)
{
	for (int i = 0; i < h->n; i++) {
		free(h->names[i]);
		free(h->data[i]);
	}
	free(h->names);
	free(h->data);
	free(h->t);
	memset(h, 0, sizeof(*h));
}

int mt_hf_export_tensors(const struct mt_config *c, const struct mt_params *p, const float *w, enum mt_hf_format f,
			 struct mt_hf_tensors *out, struct mt_err *err)
{
	struct dims d = dims_of(c);
	int cap = 3 * p->n + 1;

	memset(out, 0, sizeof(*out));
	if (mt_hf_check(c, f, err))
		return -1;
	out->t = calloc((size_t)cap, sizeof(*out->t));
	out->names = calloc((size_t)cap, sizeof(char *));
	out->data = calloc((size_t)cap, sizeof(float *));
	if (!out->t || !out->names || !out->data)
		goto oom;
	for (int i = 0; i < p->n; i++) {
		const struct mt_param *pp = &p->p[i];
		const float *src = w + pp->offset;
		struct plan pl;
		int first = out->n;

		plan_of(c, f, pp, &pl);
		for (int k = 0; k < pl.n; k++) {
			struct mt_st_out *o = &out->t[out->n];
			out->names[out->n] = strdup(pl.pc[k].name);
			out->data[out->n] = malloc((size_t)(pl.pc[k].shape[0] * pl.pc[k].shape[1]) * sizeof(float));
			if (!out->names[out->n] || !out->data[out->n]) {
				out->n++;
				goto oom;
			}
			o->name = out->names[out->n];
			o->dtype = MT_ST_F32;
			o->ndim = pl.pc[k].ndim;
			o->shape[0] = pl.pc[k].shape[0];
			o->shape[1] = pl.pc[k].shape[1];
			o->data = out->data[out->n];
			out->n++;
		}
		for (int64_t r = 0; r < pp->shape[0]; r++)
			for (int64_t col = 0; col < pp->shape[1]; col++) {
				int k, pad;
				int64_t off;
				locate(&d, f, pp, r, col, &k, &off, &pad);
				if (!pad)
					out->data[first + k][off] = src[r * pp->shape[1] + col];
			}
	}
	return 0;
oom:
	mt_hf_tensors_free(out);
	return mt_err_set(err, MT_EXIT_IO, "out of memory exporting the weights");
}

static int ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* Tensors of published checkpoints that hold no weights of the model. */
static int known_buffer(const char *name, enum mt_hf_format f)
{
	if (f == MT_HF_GPT2)
		return ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias");
	return ends_with(name, ".rotary_emb.inv_freq");
}

/* GPT-2 files saved from GPT2Model (as the original release is) lack "transformer.". */
static const struct mt_st_tensor *find(const struct mt_st_set *s, enum mt_hf_format f, const char *name, const char **path)
{
	const struct mt_st_tensor *t = mt_st_set_find(s, name, path);

	if (!t && f == MT_HF_GPT2 && !strncmp(name, "transformer.", 12))
		t = mt_st_set_find(s, name + 12, path);
	return t;
}

static int used_name(const struct mt_hf_tensors *names, int n, const char *name, enum mt_hf_format f)
{
	for (int i = 0; i < n; i++)
		if (!strcmp(names->names[i], name) ||
		    (f == MT_HF_GPT2 && !strncmp(names->names[i], "transformer.", 12) && !strcmp(names->names[i] + 12, name)))
			return 1;
	return 0;
}

/* A stored lm_head.weight of a tied model: 0 when it equals the embedding just read. */
static int tied_copy_differs(const struct mt_config *c, const struct mt_params *p, const struct mt_st_tensor *t,
			     const char *path, const float *w, struct mt_err *err)
{
	const struct mt_param *emb = mt_params_get(p, -1, MT_P_WORD_EMB);
	int64_t n = c->vocab_size * c->hidden_size;
	float *x;
	int rc = 0;

	if (t->ndim != 2 || t->shape[0] != c->vocab_size || t->shape[1] != c->hidden_size)
		return mt_err_set(err, MT_EXIT_DATA, "'%s': tensor 'lm_head.weight' is not shaped as the embedding", path);
	x = malloc((size_t)n * sizeof(float));
	if (!x)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	if (mt_st_to_f32(t, x, n, path, err))
		rc = -1;
	else if (memcmp(x, w + emb->offset, (size_t)n * sizeof(float)) != 0)
		rc = mt_err_set(err, MT_EXIT_DATA, "'%s': tensor 'lm_head.weight' differs from the word embedding, but the "
				"config ties them (tie_word_embeddings)", path);
	free(x);
	return rc;
}

int mt_hf_import_tensors(const struct mt_config *c, const struct mt_params *p, const struct mt_st_set *s,
			 enum mt_hf_format f, float *w, struct mt_err *err)
{
	struct dims d = dims_of(c);
	struct mt_hf_tensors used = { 0 };
	float *buf[3] = { 0 };
	int rc = -1;

	if (mt_hf_check(c, f, err))
		return -1;
	used.names = calloc((size_t)(3 * p->n + 1), sizeof(char *));
	if (!used.names)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int i = 0; i < p->n; i++) {
		const struct mt_param *pp = &p->p[i];
		struct plan pl;

		plan_of(c, f, pp, &pl);
		for (int k = 0; k < pl.n; k++) {
			const char *path = NULL;
			const struct mt_st_tensor *t = find(s, f, pl.pc[k].name, &path);
			int64_t want = pl.pc[k].shape[0] * pl.pc[k].shape[1];
			if (!t) {
				mt_err_set(err, MT_EXIT_DATA, "'%s': no tensor '%s' (mt's %s)", s->dir, pl.pc[k].name, pp->name);
				goto out;
			}
			if (t->ndim != pl.pc[k].ndim || t->shape[0] != pl.pc[k].shape[0] ||
			    (t->ndim == 2 && t->shape[1] != pl.pc[k].shape[1])) {
				char got[96] = "[", *q = got + 1;
				for (int j = 0; j < t->ndim && q < got + sizeof(got) - 24; j++)
					q += sprintf(q, "%s%lld", j ? ", " : "", (long long)t->shape[j]);
				strcpy(q, "]");
				if (pl.pc[k].ndim == 2)
					mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' has shape %s, the config says [%lld, %lld]",
						   path, t->name, got, (long long)pl.pc[k].shape[0], (long long)pl.pc[k].shape[1]);
				else
					mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' has shape %s, the config says [%lld]", path,
						   t->name, got, (long long)pl.pc[k].shape[0]);
				goto out;
			}
			buf[k] = malloc((size_t)want * sizeof(float));
			if (!buf[k]) {
				mt_err_set(err, MT_EXIT_IO, "out of memory");
				goto out;
			}
			if (mt_st_to_f32(t, buf[k], want, path, err))
				goto out;
			used.names[used.n++] = t->name;
		}
		for (int64_t r = 0; r < pp->shape[0]; r++)
			for (int64_t col = 0; col < pp->shape[1]; col++) {
				int k, pad;
				int64_t off;
				locate(&d, f, pp, r, col, &k, &off, &pad);
				w[pp->offset + r * pp->shape[1] + col] = buf[k][off];
			}
		for (int k = 0; k < 3; k++) {
			free(buf[k]);
			buf[k] = NULL;
		}
	}
	/* nothing of the files may go unused, lest a weight be dropped silently */
	for (int i = 0; i < s->nfiles; i++)
		for (int j = 0; j < s->f[i].n; j++) {
			const char *name = s->f[i].t[j].name;
			if (used_name(&used, used.n, name, f) || known_buffer(name, f))
				continue;
			if (!c->untie_embeddings_and_output_weights && !strcmp(name, "lm_head.weight")) {
				/* tied: a copy of the embedding, which it must be */
				if (tied_copy_differs(c, p, &s->f[i].t[j], s->f[i].path, w, err))
					goto out;
				continue;
			}
			mt_err_set(err, MT_EXIT_DATA, "'%s': tensor '%s' has no place in a %s model with this config", s->f[i].path,
				   name, mt_hf_format_name(f));
			goto out;
		}
	rc = 0;
out:
	for (int k = 0; k < 3; k++)
		free(buf[k]);
	free(used.names); /* the names belong to the files */
	return rc;
}

/* ---- config.json ---- */

char *mt_hf_config_json(const struct mt_config *c, enum mt_hf_format f, const struct mt_hf_tokens *tok)
{
	json_t *o = json_object(), *mt = json_object();
	char *s;

#define SET(k, v) json_object_set_new(o, k, v)
	if (f == MT_HF_GPT2) {
		SET("architectures", json_pack("[s]", "GPT2LMHeadModel"));
		SET("model_type", json_string("gpt2"));
		SET("vocab_size", json_integer(c->vocab_size));
		SET("n_positions", json_integer(c->max_position_embeddings));
		SET("n_ctx", json_integer(c->max_position_embeddings));
		SET("n_embd", json_integer(c->hidden_size));
		SET("n_layer", json_integer(c->num_layers));
		SET("n_head", json_integer(c->num_attention_heads));
		SET("n_inner", json_integer(c->ffn_hidden_size));
		SET("activation_function", json_string("gelu_new"));
		SET("layer_norm_epsilon", json_real(c->norm_epsilon));
		SET("resid_pdrop", json_real(0));
		SET("embd_pdrop", json_real(0));
		SET("attn_pdrop", json_real(0));
		SET("scale_attn_weights", json_true());
		SET("scale_attn_by_inverse_layer_idx", json_false());
		SET("reorder_and_upcast_attn", json_false());
	} else {
		SET("architectures", json_pack("[s]", "LlamaForCausalLM"));
		SET("model_type", json_string("llama"));
		SET("vocab_size", json_integer(c->vocab_size));
		SET("hidden_size", json_integer(c->hidden_size));
		SET("intermediate_size", json_integer(c->ffn_hidden_size));
		SET("num_hidden_layers", json_integer(c->num_layers));
		SET("num_attention_heads", json_integer(c->num_attention_heads));
		SET("num_key_value_heads", json_integer(c->num_query_groups));
		SET("head_dim", json_integer(c->kv_channels));
		SET("hidden_act", json_string("silu"));
		SET("max_position_embeddings", json_integer(c->max_position_embeddings));
		SET("rms_norm_eps", json_real(c->norm_epsilon));
		SET("rope_theta", json_real(c->rotary_base));
		SET("rope_scaling", json_null());
		SET("attention_bias", json_boolean(c->add_bias_linear));
		SET("mlp_bias", json_boolean(c->add_bias_linear));
		SET("attention_dropout", json_real(0));
		SET("pretraining_tp", json_integer(1));
	}
	SET("tie_word_embeddings", json_boolean(!c->untie_embeddings_and_output_weights));
	SET("initializer_range", json_real(c->init_method_std));
	SET("bos_token_id", tok && tok->bos >= 0 ? json_integer(tok->bos) : json_null());
	SET("eos_token_id", tok && tok->eos >= 0 ? json_integer(tok->eos) : json_null());
	SET("use_cache", json_true());
	SET("torch_dtype", json_string("float32"));
	/* what the export dropped, for the way back */
	json_object_set_new(mt, "padded_vocab_size", json_integer(c->padded_vocab_size));
	json_object_set_new(mt, "make_vocab_size_divisible_by", json_integer(c->make_vocab_size_divisible_by));
	json_object_set_new(mt, "seq_length", json_integer(c->seq_length));
	SET("mt", mt);
#undef SET
	s = json_dumps(o, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o);
	return s;
}

static int get_int(json_t *o, const char *key, int64_t def, int64_t *out, const char *path, struct mt_err *err)
{
	json_t *v = json_object_get(o, key);

	if (!v || json_is_null(v)) {
		if (def < 0)
			return mt_err_set(err, MT_EXIT_DATA, "config '%s': \"%s\" is missing", path, key);
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > INT32_MAX)
		return mt_err_set(err, MT_EXIT_DATA, "config '%s': \"%s\" must be a positive integer", path, key);
	*out = json_integer_value(v);
	return 0;
}

static double get_real(json_t *o, const char *key, double def)
{
	json_t *v = json_object_get(o, key);

	return json_is_number(v) ? json_number_value(v) : def;
}

static int get_bool(json_t *o, const char *key, int def)
{
	json_t *v = json_object_get(o, key);

	return json_is_boolean(v) ? json_is_true(v) : def;
}

int mt_hf_config_parse(const char *text, const char *path, enum mt_hf_format f, int divisible_by, int seq_length,
		       struct mt_config *c, struct mt_err *err)
{
	json_error_t je;
	json_t *o = json_loads(text, 0, &je);
	const char *mtype, *act;
	json_t *rp = NULL;
	int64_t L, h, np, ng, hd, ffn, pos, V;
	int rc = -1;

	memset(c, 0, sizeof(*c));
	if (!json_is_object(o)) {
		mt_err_set(err, MT_EXIT_DATA, "config '%s' is not a JSON object%s%s", path, o ? "" : ": ", o ? "" : je.text);
		goto out;
	}
	mtype = json_string_value(json_object_get(o, "model_type"));
	if (mtype && strcmp(mtype, f == MT_HF_GPT2 ? "gpt2" : "llama") && (f == MT_HF_GPT2 || strcmp(mtype, "mistral"))) {
		mt_err_set(err, MT_EXIT_USAGE, "config '%s': model_type \"%s\" is not what --format %s reads", path, mtype,
			   mt_hf_format_name(f));
		goto out;
	}
	if (f == MT_HF_GPT2) {
		if (get_int(o, "n_layer", -1, &L, path, err) || get_int(o, "n_embd", -1, &h, path, err) ||
		    get_int(o, "n_head", -1, &np, path, err) || get_int(o, "n_inner", 4 * h, &ffn, path, err) ||
		    get_int(o, "n_positions", -1, &pos, path, err) || get_int(o, "vocab_size", -1, &V, path, err))
			goto out;
		ng = np;
		hd = h / np;
		act = json_string_value(json_object_get(o, "activation_function"));
		if (act && strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh")) {
			mt_err_set(err, MT_EXIT_USAGE, "config '%s': activation_function \"%s\": mt's GELU is the tanh one (gelu_new)",
				   path, act);
			goto out;
		}
		if (get_bool(o, "scale_attn_by_inverse_layer_idx", 0) || !get_bool(o, "scale_attn_weights", 1) ||
		    !get_bool(o, "tie_word_embeddings", 1)) {
			mt_err_set(err, MT_EXIT_USAGE, "config '%s': scale_attn_by_inverse_layer_idx, scale_attn_weights false or "
				   "tie_word_embeddings false are not supported", path);
			goto out;
		}
		c->normalization = MT_NORM_LAYERNORM;
		c->position_embedding_type = MT_POS_LEARNED;
		c->norm_epsilon = get_real(o, "layer_norm_epsilon", 1e-5);
		c->add_bias_linear = 1;
	} else {
		json_t *rs = json_object_get(o, "rope_scaling");
		if (get_int(o, "num_hidden_layers", -1, &L, path, err) || get_int(o, "hidden_size", -1, &h, path, err) ||
		    get_int(o, "num_attention_heads", -1, &np, path, err) ||
		    get_int(o, "num_key_value_heads", np, &ng, path, err) || get_int(o, "head_dim", h / np, &hd, path, err) ||
		    get_int(o, "intermediate_size", -1, &ffn, path, err) ||
		    get_int(o, "max_position_embeddings", -1, &pos, path, err) || get_int(o, "vocab_size", -1, &V, path, err))
			goto out;
		act = json_string_value(json_object_get(o, "hidden_act"));
		if (act && strcmp(act, "silu")) {
			mt_err_set(err, MT_EXIT_USAGE, "config '%s': hidden_act \"%s\": mt's SwiGLU uses silu", path, act);
			goto out;
		}
		/* rotary scaling is not implemented; transformers may still write a "default" one,
		 * and newer versions keep rope_theta in {"rope_parameters": {"rope_type", "rope_theta"}} */
		rp = json_object_get(o, "rope_parameters");
		for (int k = 0; k < 2; k++) {
			json_t *x = k ? rp : rs;
			const char *rt;
			if (!x || json_is_null(x))
				continue;
			rt = json_string_value(json_object_get(x, "rope_type"));
			if (!rt)
				rt = json_string_value(json_object_get(x, "type"));
			if (!json_is_object(x) || !rt || strcmp(rt, "default")) {
				mt_err_set(err, MT_EXIT_USAGE, "config '%s': %s of type \"%s\" is not supported (rotary "
					   "scaling is not implemented)", path, k ? "rope_parameters" : "rope_scaling", rt ? rt : "?");
				goto out;
			}
			if (!json_is_number(json_object_get(o, "rope_theta")) && json_is_number(json_object_get(x, "rope_theta")))
				rp = x;
		}
		if (json_is_number(json_object_get(o, "sliding_window")) || get_bool(o, "use_sliding_window", 0)) {
			mt_err_set(err, MT_EXIT_USAGE, "config '%s': sliding-window attention is not supported", path);
			goto out;
		}
		if (get_bool(o, "attention_bias", 0) != get_bool(o, "mlp_bias", 0)) {
			mt_err_set(err, MT_EXIT_USAGE, "config '%s': attention_bias and mlp_bias differ; mt has one switch "
				   "(--disable-bias-linear)", path);
			goto out;
		}
		c->normalization = MT_NORM_RMSNORM;
		c->position_embedding_type = MT_POS_ROPE;
		c->norm_epsilon = get_real(o, "rms_norm_eps", 1e-6);
		c->rotary_base = get_real(o, "rope_theta", json_is_object(rp) ? get_real(rp, "rope_theta", 10000) : 10000);
		c->swiglu = 1;
		c->add_bias_linear = get_bool(o, "attention_bias", 0);
		c->untie_embeddings_and_output_weights = !get_bool(o, "tie_word_embeddings", 0);
	}
	c->num_layers = (int)L;
	c->hidden_size = (int)h;
	c->num_attention_heads = (int)np;
	c->num_query_groups = (int)ng;
	c->kv_channels = (int)hd;
	c->ffn_hidden_size = (int)ffn;
	c->max_position_embeddings = (int)pos;
	c->seq_length = seq_length > 0 ? seq_length : (int)pos;
	c->vocab_size = V;
	c->make_vocab_size_divisible_by = divisible_by > 0 ? divisible_by : 128;
	c->init_method_std = get_real(o, "initializer_range", 0.02);
	mt_config_defaults(c);
	if (mt_config_validate(c, err)) {
		mt_err_prefix(err, "config '%s'", path);
		goto out;
	}
	if (f == MT_HF_GPT2 && h % np) {
		mt_err_set(err, MT_EXIT_DATA, "config '%s': n_embd %lld is not a multiple of n_head %lld", path, (long long)h,
			   (long long)np);
		goto out;
	}
	rc = 0;
out:
	json_decref(o);
	return rc;
}
