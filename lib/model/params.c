/* params.c: the parameter table of a GPT model, its tensor-parallel split, its pipeline
 * stages and its initialization (see params.h). The table of a tensor-parallel rank lists the same
 * parameters in the same order as the whole model's, each with its shard's shape; copying
 * between the two layouts and drawing a shard's initial values both go through one map
 * from a shard's row to its logical row. Which ranks talk to which is not here (dist/). */
#include "model/params.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/mix.h"

/* which rows a stage keeps: its layers, the embeddings on the first stage, the final
 * norm and the output layer on the last (a whole table keeps all) */
static int keeps(const struct mt_params *t, int layer, enum mt_param_kind kind)
{
	if (layer >= 0) {
		for (int c = 0; c < t->nchunks; c++)
			if (layer >= t->chunk_layers[2 * c] && layer < t->chunk_layers[2 * c + 1])
				return 1;
		return 0;
	}
	if (kind == MT_P_WORD_EMB || kind == MT_P_POS_EMB)
		return t->first_stage;
	return t->last_stage;
}

static int add(struct mt_params *t, int *cap, int *lidx, enum mt_param_kind kind, int layer, const char *name,
	       int64_t rows, int64_t cols, int decay, enum mt_split split, double std)
{
	struct mt_param *p;

	/* every row has its place in the whole model's table, kept or not */
	if (!keeps(t, layer, kind)) {
		++*lidx;
		return 0;
	}
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
	p->gshape[0] = rows;
	p->gshape[1] = cols > 0 ? cols : 1;
	p->shape[0] = p->gshape[0];
	p->shape[1] = p->gshape[1];
	/* the caller has checked that every split dimension divides by the group's size */
	if (split == MT_SPLIT_ROW)
		p->shape[1] /= t->tp_size;
	else if (split != MT_SPLIT_NONE)
		p->shape[0] /= t->tp_size;
	p->numel = p->shape[0] * p->shape[1];
	p->offset = t->total;
	p->weight_decay = decay;
	p->split = split;
	p->tp_dim = split == MT_SPLIT_NONE ? -1 : split == MT_SPLIT_ROW ? 1 : 0;
	p->norm_skip = split == MT_SPLIT_NONE && t->tp_rank != 0;
	p->tp_grad_reduce = split == MT_SPLIT_NONE && t->sequence_parallel;
	p->init_std = std;
	p->lidx = (*lidx)++;
	t->total += p->numel;
	if (layer >= 0)
		t->idx[layer * MT_P_NKINDS + kind] = t->n;
	else
		t->glob[kind] = t->n;
	t->n++;
	return 0;
}

/* Megatron's requirements for a tensor-parallel group of `size`, each naming its flags */
static int check_tp(const struct mt_config *c, int size, int rank, int sp, struct mt_err *err)
{
	const char *tp = "--tensor-model-parallel-size";

	if (size < 1 || rank < 0 || rank >= size)
		return mt_err_set(err, MT_EXIT_USAGE, "tensor-parallel rank %d is outside a group of %d ranks", rank, size);
	if (c->num_attention_heads % size)
		return mt_err_set(err, MT_EXIT_USAGE, "--num-attention-heads %d is not divisible by %s %d",
				  c->num_attention_heads, tp, size);
	if (c->num_query_groups % size)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--num-query-groups %d is not divisible by %s %d: each rank holds whole query groups",
				  c->num_query_groups, tp, size);
	if (c->ffn_hidden_size % size)
		return mt_err_set(err, MT_EXIT_USAGE, "--ffn-hidden-size %d is not divisible by %s %d",
				  c->ffn_hidden_size, tp, size);
	if (c->padded_vocab_size % size)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "the padded vocabulary %lld is not divisible by %s %d: pad it to a multiple of "
				  "--make-vocab-size-divisible-by x %s", (long long)c->padded_vocab_size, tp, size, tp);
	if (sp && size > 1 && c->seq_length % size)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--seq-length %d is not divisible by %s %d: --sequence-parallel splits the sequence",
				  c->seq_length, tp, size);
	return 0;
}

int mt_pp_split_check(const struct mt_config *c, const struct mt_pp_split *s, struct mt_err *err)
{
	const char *pp = "--pipeline-model-parallel-size";
	int L = c->num_layers, p = s->size, v = s->vp, mid = p - (s->first > 0) - (s->last > 0);
	int rest = L - s->first - s->last;

	if (p < 1 || v < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "%s %d with %d model chunks a stage: both must be at least 1", pp, p, v);
	if ((s->first || s->last) && p == 1)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers need %s above 1",
				  pp);
	if ((s->first || s->last) && v > 1)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers are not supported "
				  "with virtual pipeline stages (interleaving) yet");
	if (s->first < 0 || s->last < 0 || rest < 0 || (mid == 0 && rest != 0))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--num-layers %d cannot be cut into a first stage of %d, a last stage of %d and %d stages between",
				  L, s->first, s->last, mid);
	if (mid > 0 && (rest % mid || rest / mid < 1) && !s->first && !s->last)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--num-layers %d is not a multiple of %s %d: every stage holds L/p layers (or give "
				  "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers)", L, pp, p);
	if (mid > 0 && (rest % mid || rest / mid < 1))
		return mt_err_set(err, MT_EXIT_USAGE,
				  "--num-layers %d less the first and last stages' %d layers is not a positive multiple of "
				  "the %d other stages of %s %d", L, s->first + s->last, mid, pp, p);
	if (v > 1 && (L / p) % v)
		return mt_err_set(err, MT_EXIT_USAGE,
				  "%d layers a stage (--num-layers %d / %s %d) do not divide into %d virtual stages of equal "
				  "size (--num-layers-per-virtual-pipeline-stage)", L / p, L, pp, p, v);
	return 0;
}

void mt_pp_split_layers(const struct mt_config *c, const struct mt_pp_split *s, int stage, int chunk, int *lo, int *hi)
{
	int L = c->num_layers, p = s->size, v = s->vp;

	if (s->first || s->last) {
		int mid = p - (s->first > 0) - (s->last > 0), rest = L - s->first - s->last;
		int each = mid > 0 ? rest / mid : 0, f = s->first ? s->first : each, l = s->last ? s->last : each;
		if (stage == 0) {
			*lo = 0;
			*hi = f;
		} else if (stage == p - 1) {
			*lo = L - l;
			*hi = L;
		} else {
			*lo = f + (stage - 1) * each;
			*hi = *lo + each;
		}
		return;
	}
	{
		int per = L / (p * v), block = chunk * p + stage;
		*lo = block * per;
		*hi = *lo + per;
	}
}

static int build(struct mt_params *t, const struct mt_config *c, int size, int rank, int sequence_parallel,
		 const struct mt_pp_split *s, int stage, struct mt_err *err)
{
	int cap = 0, lidx = 0, L = c->num_layers, ln = c->normalization == MT_NORM_LAYERNORM, bias = c->add_bias_linear;
	int64_t h = c->hidden_size, q = (int64_t)c->num_attention_heads * c->kv_channels;
	int64_t kv = (int64_t)c->num_query_groups * c->kv_channels, f = c->ffn_hidden_size;
	int64_t fc1 = c->swiglu ? 2 * f : f;
	enum mt_split fc1_split = c->swiglu ? MT_SPLIT_COLUMN_HALVES : MT_SPLIT_COLUMN;
	double std = c->init_method_std, out_std = std / sqrt(2.0 * L);
	int rc = 0;

	memset(t, 0, sizeof(*t));
	if (check_tp(c, size, rank, sequence_parallel, err) || mt_pp_split_check(c, s, err))
		return -1;
	if (stage < 0 || stage >= s->size)
		return mt_err_set(err, MT_EXIT_USAGE, "pipeline stage %d is outside a pipeline of %d stages", stage, s->size);
	t->num_layers = L;
	t->tp_size = size;
	t->tp_rank = rank;
	/* Megatron turns sequence parallelism off without tensor parallelism */
	t->sequence_parallel = sequence_parallel && size > 1;
	t->pp_size = s->size;
	t->pp_rank = stage;
	t->nchunks = s->vp;
	t->first_stage = stage == 0;
	t->last_stage = stage == s->size - 1;
	t->idx = malloc((size_t)(L > 0 ? L : 1) * MT_P_NKINDS * sizeof(int));
	t->chunk_layers = malloc((size_t)s->vp * 2 * sizeof(int));
	if (!t->idx || !t->chunk_layers) {
		mt_params_free(t);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	for (int k = 0; k < s->vp; k++)
		mt_pp_split_layers(c, s, stage, k, &t->chunk_layers[2 * k], &t->chunk_layers[2 * k + 1]);
	for (int i = 0; i < L * MT_P_NKINDS; i++)
		t->idx[i] = -1;
	for (int k = 0; k < MT_P_NKINDS; k++)
		t->glob[k] = -1;
	/* Megatron-core's names (local layer spec); linear weights [out, in]; the splits of
	 * VocabParallelEmbedding, ColumnParallelLinear and RowParallelLinear */
	rc |= add(t, &cap, &lidx, MT_P_WORD_EMB, -1, "embedding.word_embeddings.weight", c->padded_vocab_size, h, 1,
		  MT_SPLIT_VOCAB, std);
	if (c->position_embedding_type == MT_POS_LEARNED)
		rc |= add(t, &cap, &lidx, MT_P_POS_EMB, -1, "embedding.position_embeddings.weight", c->max_position_embeddings,
			  h, 1, MT_SPLIT_NONE, std);
	for (int l = 0; l < L && !rc; l++) {
		rc |= add(t, &cap, &lidx, MT_P_LN1_W, l, "input_layernorm.weight", h, 0, 0, MT_SPLIT_NONE, -1);
		if (ln)
			rc |= add(t, &cap, &lidx, MT_P_LN1_B, l, "input_layernorm.bias", h, 0, 0, MT_SPLIT_NONE, 0);
		/* whole query groups per rank: contiguous rows in Megatron's group-by-group layout */
		rc |= add(t, &cap, &lidx, MT_P_QKV_W, l, "self_attention.linear_qkv.weight", q + 2 * kv, h, 1,
			  MT_SPLIT_COLUMN, std);
		if (bias)
			rc |= add(t, &cap, &lidx, MT_P_QKV_B, l, "self_attention.linear_qkv.bias", q + 2 * kv, 0, 0,
				  MT_SPLIT_COLUMN, 0);
		rc |= add(t, &cap, &lidx, MT_P_PROJ_W, l, "self_attention.linear_proj.weight", h, q, 1, MT_SPLIT_ROW, out_std);
		if (bias)
			rc |= add(t, &cap, &lidx, MT_P_PROJ_B, l, "self_attention.linear_proj.bias", h, 0, 0, MT_SPLIT_NONE, 0);
		rc |= add(t, &cap, &lidx, MT_P_LN2_W, l, "pre_mlp_layernorm.weight", h, 0, 0, MT_SPLIT_NONE, -1);
		if (ln)
			rc |= add(t, &cap, &lidx, MT_P_LN2_B, l, "pre_mlp_layernorm.bias", h, 0, 0, MT_SPLIT_NONE, 0);
		rc |= add(t, &cap, &lidx, MT_P_FC1_W, l, "mlp.linear_fc1.weight", fc1, h, 1, fc1_split, std);
		if (bias)
			rc |= add(t, &cap, &lidx, MT_P_FC1_B, l, "mlp.linear_fc1.bias", fc1, 0, 0, fc1_split, 0);
		rc |= add(t, &cap, &lidx, MT_P_FC2_W, l, "mlp.linear_fc2.weight", h, f, 1, MT_SPLIT_ROW, out_std);
		if (bias)
			rc |= add(t, &cap, &lidx, MT_P_FC2_B, l, "mlp.linear_fc2.bias", h, 0, 0, MT_SPLIT_NONE, 0);
	}
	rc |= add(t, &cap, &lidx, MT_P_FINAL_W, -1, "decoder.final_layernorm.weight", h, 0, 0, MT_SPLIT_NONE, -1);
	if (ln)
		rc |= add(t, &cap, &lidx, MT_P_FINAL_B, -1, "decoder.final_layernorm.bias", h, 0, 0, MT_SPLIT_NONE, 0);
	if (c->untie_embeddings_and_output_weights) {
		rc |= add(t, &cap, &lidx, MT_P_OUTPUT, -1, "output_layer.weight", c->padded_vocab_size, h, 1, MT_SPLIT_VOCAB,
			  std);
	} else if (t->last_stage && !t->first_stage && !rc) {
		/* the last stage's own copy of the tied word embedding, drawn as row 0 of the
		 * whole table (the first stage's) so the two start equal */
		int zero = 0, first = t->first_stage;
		struct mt_param *p;
		t->first_stage = 1;
		rc |= add(t, &cap, &zero, MT_P_WORD_EMB, -1, "embedding.word_embeddings.weight", c->padded_vocab_size, h, 1,
			  MT_SPLIT_VOCAB, std);
		t->first_stage = first;
		if (!rc) {
			p = &t->p[t->n - 1];
			p->tied_copy = 1;
			p->norm_skip = 1;
		}
	}
	if (rc) {
		mt_params_free(t);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	return 0;
}

int mt_params_build_stage(struct mt_params *t, const struct mt_config *c, int size, int rank, int sequence_parallel,
			  const struct mt_pp_split *s, int stage, struct mt_err *err)
{
	return build(t, c, size, rank, sequence_parallel, s, stage, err);
}

int mt_params_build_tp(struct mt_params *t, const struct mt_config *c, int size, int rank, int sequence_parallel,
		       struct mt_err *err)
{
	const struct mt_pp_split whole = { 1, 1, 0, 0 };

	return build(t, c, size, rank, sequence_parallel, &whole, 0, err);
}

int mt_params_build(struct mt_params *t, const struct mt_config *c, struct mt_err *err)
{
	return mt_params_build_tp(t, c, 1, 0, 0, err);
}

void mt_params_free(struct mt_params *t)
{
	free(t->p);
	free(t->idx);
	free(t->chunk_layers);
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

/* A shard's row j in the logical tensor (rank `rank` of p->shape[0] / gshape[0] of them):
 * contiguous blocks, or for SwiGLU's fc1 the rank's block of each half */
static int64_t logical_row(const struct mt_param *p, int rank, int64_t j)
{
	int64_t half = p->shape[0] / 2;

	switch (p->split) {
	case MT_SPLIT_COLUMN:
	case MT_SPLIT_VOCAB:
		return rank * p->shape[0] + j;
	case MT_SPLIT_COLUMN_HALVES:
		return j < half ? rank * half + j : p->gshape[0] / 2 + rank * half + (j - half);
	default:
		return j;
	}
}

/* the logical column of a shard's column 0 */
static int64_t logical_col(const struct mt_param *p, int rank)
{
	return p->split == MT_SPLIT_ROW ? rank * p->shape[1] : 0;
}

int mt_params_pieces(const struct mt_param *p, int rank, int64_t pieces[2][4])
{
	int64_t c0 = logical_col(p, rank), cols = p->shape[1];

	if (p->split == MT_SPLIT_COLUMN_HALVES) {
		int64_t half = p->shape[0] / 2;
		for (int k = 0; k < 2; k++) {
			pieces[k][0] = logical_row(p, rank, k * half);
			pieces[k][1] = c0;
			pieces[k][2] = half;
			pieces[k][3] = cols;
		}
		return 2;
	}
	pieces[0][0] = logical_row(p, rank, 0);
	pieces[0][1] = c0;
	pieces[0][2] = p->shape[0];
	pieces[0][3] = cols;
	return 1;
}

void mt_params_slice(const struct mt_params *local, int rank, const struct mt_params *logical, float *logical_buf,
		     float *shard, int to_logical)
{
	for (int i = 0; i < local->n; i++) {
		const struct mt_param *lp = &local->p[i], *gp;
		int64_t cols = lp->shape[1], c0 = logical_col(lp, rank);
		size_t bytes = (size_t)cols * sizeof(float);

		if (lp->lidx < 0 || lp->lidx >= logical->n || (to_logical && lp->tied_copy))
			continue;
		gp = &logical->p[lp->lidx];
		for (int64_t j = 0; j < lp->shape[0]; j++) {
			int64_t r = logical_row(lp, rank, j);
			float *s = shard + lp->offset + j * cols, *g = logical_buf + gp->offset + r * gp->shape[1] + c0;

			if (r >= gp->shape[0]) {
				/* a padding row of the shard's vocabulary that the logical table lacks */
				if (!to_logical)
					memset(s, 0, bytes);
				continue;
			}
			if (to_logical)
				memcpy(g, s, bytes);
			else
				memcpy(s, g, bytes);
		}
	}
}

/* splitmix64 keyed by (seed, parameter index, element): every element's draw is fixed,
 * so initialization does not depend on threads or on the order parameters are filled */
static double unit(uint64_t x) { return ((double)(x >> 11) + 0.5) * (1.0 / 9007199254740992.0); }

static uint64_t param_key(uint64_t seed, int i) { return mt_mix64(seed ^ mt_mix64((uint64_t)i + 1)); }

/* Box-Muller: the normals of the logical elements k and k + 1 (k even) from two uniforms */
static void normal_pair(uint64_t key, int64_t k, double std, float *a, float *b)
{
	double u1 = unit(mt_mix64(key + 2 * (uint64_t)k)), u2 = unit(mt_mix64(key + 2 * (uint64_t)k + 1));
	double r = sqrt(-2.0 * log(u1)) * std;

	*a = (float)(r * cos(2 * M_PI * u2));
	*b = (float)(r * sin(2 * M_PI * u2));
}

/* zeros and ones are the same in every shard; 0 when the parameter is drawn */
static int init_constant(const struct mt_param *p, float *x)
{
	if (p->init_std == 0) {
		memset(x, 0, (size_t)p->numel * sizeof(float));
		return 1;
	}
	if (p->init_std < 0) {
		for (int64_t k = 0; k < p->numel; k++)
			x[k] = 1.0f;
		return 1;
	}
	return 0;
}

void mt_params_init(const struct mt_params *t, float *w, uint64_t seed)
{
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		float *x = w + p->offset;
		uint64_t key = param_key(seed, p->lidx);

		if (init_constant(p, x))
			continue;
		#pragma omp parallel for schedule(static)
		for (int64_t k = 0; k < p->numel; k += 2) {
			float a, b;
			normal_pair(key, k, p->init_std, &a, &b);
			x[k] = a;
			if (k + 1 < p->numel)
				x[k + 1] = b;
		}
	}
}

void mt_params_init_shard(const struct mt_params *t, float *w, uint64_t seed)
{
	if (t->tp_size <= 1) {
		mt_params_init(t, w, seed);
		return;
	}
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		int64_t cols = p->shape[1], c0 = logical_col(p, t->tp_rank);
		uint64_t key = param_key(seed, p->lidx);

		if (init_constant(p, w + p->offset))
			continue;
		/* each shard row is a contiguous run [g0, g0 + cols) of the logical elements:
		 * draw the pairs that cover it, keep the members that fall inside */
		#pragma omp parallel for schedule(static)
		for (int64_t j = 0; j < p->shape[0]; j++) {
			float *x = w + p->offset + j * cols;
			int64_t g0 = logical_row(p, t->tp_rank, j) * p->gshape[1] + c0;

			for (int64_t k = g0 & ~(int64_t)1; k < g0 + cols; k += 2) {
				float a, b;
				normal_pair(key, k, p->init_std, &a, &b);
				if (k >= g0)
					x[k - g0] = a;
				if (k + 1 >= g0 && k + 1 < g0 + cols)
					x[k + 1 - g0] = b;
			}
		}
	}
}
