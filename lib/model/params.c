/* params.c: the parameter table of a GPT model and its initialization (see params.h). */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mix.h"

static int add(struct mt_params *t, int *cap, enum mt_param_kind kind, int layer, const char *name,
	       int64_t rows, int64_t cols, int decay, int tp_dim, double std)
{
	struct mt_param *p;

	if (t->n == *cap) {
		struct mt_param *np = realloc(t->p, (size_t)(*cap = *cap ? *cap * 2 : 64) * sizeof(*np));
		if (!np)
			return -1;
		t->p = np;
	}
	p = &t->p[t->n];
	memset(p, 0, sizeof(*p));
	if (layer >= 0)
		snprintf(p->name, sizeof(p->name), "decoder.layers.%d.%s", layer, name);
	else
		snprintf(p->name, sizeof(p->name), "%s", name);
	p->kind = kind;
	p->layer = layer;
	p->ndim = cols > 0 ? 2 : 1;
	p->shape[0] = rows;
	p->shape[1] = cols > 0 ? cols : 1;
	p->numel = rows * (cols > 0 ? cols : 1);
	p->offset = t->total;
	p->weight_decay = decay;
	p->tp_dim = tp_dim;
	p->init_std = std;
	t->total += p->numel;
	if (layer >= 0)
		t->idx[layer * MT_P_NKINDS + kind] = t->n;
	else
		t->glob[kind] = t->n;
	t->n++;
	return 0;
}

int mt_params_build(struct mt_params *t, const struct mt_config *c, struct mt_err *err)
{
	int cap = 0, L = c->num_layers, ln = c->normalization == MT_NORM_LAYERNORM, bias = c->add_bias_linear;
	int64_t h = c->hidden_size, q = (int64_t)c->num_attention_heads * c->kv_channels;
	int64_t kv = (int64_t)c->num_query_groups * c->kv_channels, f = c->ffn_hidden_size;
	int64_t fc1 = c->swiglu ? 2 * f : f;
	double std = c->init_method_std, out_std = std / sqrt(2.0 * L);
	int rc = 0;

	memset(t, 0, sizeof(*t));
	t->num_layers = L;
	t->idx = malloc((size_t)(L > 0 ? L : 1) * MT_P_NKINDS * sizeof(int));
	if (!t->idx)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	for (int i = 0; i < L * MT_P_NKINDS; i++)
		t->idx[i] = -1;
	for (int k = 0; k < MT_P_NKINDS; k++)
		t->glob[k] = -1;
	/* Megatron-core's names (local layer spec); linear weights [out, in] */
	rc |= add(t, &cap, MT_P_WORD_EMB, -1, "embedding.word_embeddings.weight", c->padded_vocab_size, h, 1, 0, std);
	if (c->position_embedding_type == MT_POS_LEARNED)
		rc |= add(t, &cap, MT_P_POS_EMB, -1, "embedding.position_embeddings.weight", c->max_position_embeddings, h, 1, -1, std);
	for (int l = 0; l < L && !rc; l++) {
		rc |= add(t, &cap, MT_P_LN1_W, l, "input_layernorm.weight", h, 0, 0, -1, -1);
		if (ln)
			rc |= add(t, &cap, MT_P_LN1_B, l, "input_layernorm.bias", h, 0, 0, -1, 0);
		rc |= add(t, &cap, MT_P_QKV_W, l, "self_attention.linear_qkv.weight", q + 2 * kv, h, 1, 0, std);
		if (bias)
			rc |= add(t, &cap, MT_P_QKV_B, l, "self_attention.linear_qkv.bias", q + 2 * kv, 0, 0, 0, 0);
		rc |= add(t, &cap, MT_P_PROJ_W, l, "self_attention.linear_proj.weight", h, q, 1, 1, out_std);
		if (bias)
			rc |= add(t, &cap, MT_P_PROJ_B, l, "self_attention.linear_proj.bias", h, 0, 0, -1, 0);
		rc |= add(t, &cap, MT_P_LN2_W, l, "pre_mlp_layernorm.weight", h, 0, 0, -1, -1);
		if (ln)
			rc |= add(t, &cap, MT_P_LN2_B, l, "pre_mlp_layernorm.bias", h, 0, 0, -1, 0);
		rc |= add(t, &cap, MT_P_FC1_W, l, "mlp.linear_fc1.weight", fc1, h, 1, 0, std);
		if (bias)
			rc |= add(t, &cap, MT_P_FC1_B, l, "mlp.linear_fc1.bias", fc1, 0, 0, 0, 0);
		rc |= add(t, &cap, MT_P_FC2_W, l, "mlp.linear_fc2.weight", h, f, 1, 1, out_std);
		if (bias)
			rc |= add(t, &cap, MT_P_FC2_B, l, "mlp.linear_fc2.bias", h, 0, 0, -1, 0);
	}
	rc |= add(t, &cap, MT_P_FINAL_W, -1, "decoder.final_layernorm.weight", h, 0, 0, -1, -1);
	if (ln)
		rc |= add(t, &cap, MT_P_FINAL_B, -1, "decoder.final_layernorm.bias", h, 0, 0, -1, 0);
	if (c->untie_embeddings_and_output_weights)
		rc |= add(t, &cap, MT_P_OUTPUT, -1, "output_layer.weight", c->padded_vocab_size, h, 1, 0, std);
	if (rc) {
		mt_params_free(t);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	return 0;
}

void mt_params_free(struct mt_params *t)
{
	free(t->p);
	free(t->idx);
	memset(t, 0, sizeof(*t));
}

const struct mt_param *mt_params_find(const struct mt_params *t, const char *name)
{
	for (int i = 0; i < t->n; i++)
		if (!strcmp(t->p[i].name, name))
			return &t->p[i];
	return NULL;
}

const struct mt_param *mt_params_get(const struct mt_params *t, int layer, enum mt_param_kind kind)
{
	int i = layer >= 0 ? (layer < t->num_layers ? t->idx[layer * MT_P_NKINDS + kind] : -1) : t->glob[kind];

	return i >= 0 ? &t->p[i] : NULL;
}

/* splitmix64 keyed by (seed, parameter index, element): every element's draw is fixed,
 * so initialization does not depend on threads or on the order parameters are filled */
static double unit(uint64_t x) { return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

void mt_params_init(const struct mt_params *t, float *w, uint64_t seed)
{
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		float *x = w + p->offset;
		uint64_t key = mt_mix64(seed ^ mt_mix64((uint64_t)i + 1));

		if (p->init_std == 0) {
			memset(x, 0, (size_t)p->numel * sizeof(float));
			continue;
		}
		if (p->init_std < 0) {
			for (int64_t k = 0; k < p->numel; k++)
				x[k] = 1.0f;
			continue;
		}
		#pragma omp parallel for schedule(static)
		for (int64_t k = 0; k < p->numel; k += 2) {
			/* Box-Muller: two normals from two uniforms */
			double u1 = unit(mt_mix64(key + 2 * (uint64_t)k)), u2 = unit(mt_mix64(key + 2 * (uint64_t)k + 1));
			double r = sqrt(-2.0 * log(u1)) * p->init_std;
			x[k] = (float)(r * cos(2 * M_PI * u2));
			if (k + 1 < p->numel)
				x[k + 1] = (float)(r * sin(2 * M_PI * u2));
		}
	}
}
