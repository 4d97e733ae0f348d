/* Unit tests for lib/model/params.c's tensor-parallel split: for a GPT-2 style model
 * (learned positions, LayerNorm, biases, GELU, tied embeddings) and a Llama style one
 * (RoPE, RMSNorm, no biases, SwiGLU, 8 heads in 4 query groups, untied) at TP 2 and 4,
 * and one whose shards begin at odd logical elements:
 * the shard tables against the whole one, shards cut from the logical initialization
 * equal to the shards drawn directly (bit for bit), all ranks' shards rebuilding the
 * logical buffer, whole query groups in each QKV shard, SwiGLU's fc1 cut half by half,
 * the vocabulary rows that one table has and the other lacks, and the refusals of sizes
 * that do not divide. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model/params.h"
#include "tap.h"

static const char *const NAMES[] = { "gpt2", "llama", "gpt2 odd widths" };

/* style 0 GPT-2, 1 Llama, 2 GPT-2 with head size 9 and ffn 60, so that at TP 4 a shard's
 * rows start at odd logical elements, half way through a Box-Muller pair */
static void tiny(struct mt_config *c, int style)
{
	int odd = style == 2, llama = style == 1;

	memset(c, 0, sizeof(*c));
	c->num_layers = 2;
	c->hidden_size = 32;
	c->num_attention_heads = 8;
	c->num_query_groups = llama ? 4 : 8;
	c->ffn_hidden_size = llama ? 48 : 0;
	c->seq_length = 8;
	c->vocab_size = 301;
	c->make_vocab_size_divisible_by = 8;
	c->add_bias_linear = !llama;
	c->position_embedding_type = llama ? MT_POS_ROPE : MT_POS_LEARNED;
	c->normalization = llama ? MT_NORM_RMSNORM : MT_NORM_LAYERNORM;
	c->swiglu = llama;
	c->untie_embeddings_and_output_weights = llama;
	c->init_method_std = 0.3;
	if (odd) {
		c->hidden_size = 36;
		c->num_attention_heads = c->num_query_groups = 4;
		c->ffn_hidden_size = 60;
	}
	mt_config_defaults(c);
}

static float *alloc(int64_t n, float fill)
{
	float *x = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));

	for (int64_t i = 0; i < n; i++)
		x[i] = fill;
	return x;
}

/* the split Megatron gives each kind (fc1: by halves with SwiGLU) */
static enum mt_split want_split(enum mt_param_kind k, int swiglu)
{
	switch (k) {
	case MT_P_WORD_EMB: case MT_P_OUTPUT: return MT_SPLIT_VOCAB;
	case MT_P_QKV_W: case MT_P_QKV_B: return MT_SPLIT_COLUMN;
	case MT_P_FC1_W: case MT_P_FC1_B: return swiglu ? MT_SPLIT_COLUMN_HALVES : MT_SPLIT_COLUMN;
	case MT_P_PROJ_W: case MT_P_FC2_W: return MT_SPLIT_ROW;
	default: return MT_SPLIT_NONE;
	}
}

static void test_params_whole(int style)
{
	const char *name = NAMES[style];
	struct mt_config c;
	struct mt_params t, u;
	struct mt_err e = { 0 };
	int same = 1, fields = 1;
	float *a, *b;

	tiny(&c, style);
	ok(mt_params_build(&t, &c, &e) == 0 && mt_params_build_tp(&u, &c, 1, 0, 1, &e) == 0, "%s: whole tables build",
	   name);
	is_int(t.tp_size, 1, "%s: mt_params_build is tensor-parallel size 1", name);
	ok(u.sequence_parallel == 0, "%s: sequence parallelism is ignored at size 1 (as Megatron turns it off)", name);
	same = t.n == u.n && t.total == u.total;
	for (int i = 0; same && i < t.n; i++) {
		const struct mt_param *p = &t.p[i], *q = &u.p[i];
		same = !strcmp(p->name, q->name) && p->offset == q->offset && p->numel == q->numel &&
		       p->shape[0] == q->shape[0] && p->shape[1] == q->shape[1] && p->split == q->split;
		fields &= p->gshape[0] == p->shape[0] && p->gshape[1] == p->shape[1] && !p->norm_skip &&
			  !p->tp_grad_reduce && !q->tp_grad_reduce && p->split == want_split(p->kind, c.swiglu);
	}
	ok(same, "%s: mt_params_build_tp at size 1 is mt_params_build", name);
	ok(fields, "%s: size 1: gshape is shape, splits named, nothing skipped or reduced", name);
	a = alloc(t.total, 0);
	b = alloc(t.total, 0);
	mt_params_init(&t, a, 42);
	mt_params_init_shard(&u, b, 42);
	ok(memcmp(a, b, (size_t)t.total * sizeof(float)) == 0, "%s: mt_params_init_shard at size 1 is mt_params_init", name);
	free(a);
	free(b);
	mt_params_free(&t);
	mt_params_free(&u);
}

/* The shard tables of every rank against the whole table over the same padded vocabulary. */
static void test_params_tables(int style, int tp, int sp)
{
	const char *name = NAMES[style];
	struct mt_config c;
	struct mt_params g, t;
	struct mt_err e = { 0 };
	int order = 1, shapes = 1, packed = 1, flags = 1, built = 1;

	tiny(&c, style);
	c.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, tp);
	if (mt_params_build(&g, &c, &e)) {
		ok(0, "%s: whole table: %s", name, e.msg);
		return;
	}
	for (int r = 0; r < tp; r++) {
		int64_t off = 0;
		if (mt_params_build_tp(&t, &c, tp, r, sp, &e)) {
			built = 0;
			printf("# %s\n", e.msg);
			continue;
		}
		order &= t.n == g.n && t.tp_size == tp && t.tp_rank == r && t.sequence_parallel == sp;
		for (int i = 0; i < t.n && i < g.n; i++) {
			const struct mt_param *p = &t.p[i], *q = &g.p[i];
			int64_t r0 = q->shape[0], c0 = q->shape[1];
			order &= !strcmp(p->name, q->name) && p->kind == q->kind && p->layer == q->layer;
			if (p->split == MT_SPLIT_ROW)
				c0 /= tp;
			else if (p->split != MT_SPLIT_NONE)
				r0 /= tp;
			shapes &= p->gshape[0] == q->shape[0] && p->gshape[1] == q->shape[1] && p->shape[0] == r0 &&
				  p->shape[1] == c0 && p->numel == r0 * c0 && p->split == q->split &&
				  p->split == want_split(p->kind, c.swiglu) && p->tp_dim == q->tp_dim &&
				  p->weight_decay == q->weight_decay && p->init_std == q->init_std;
			packed &= p->offset == off;
			off += p->numel;
			flags &= p->norm_skip == (p->split == MT_SPLIT_NONE && r != 0) &&
				 p->tp_grad_reduce == (p->split == MT_SPLIT_NONE && sp);
		}
		packed &= t.total == off;
		mt_params_free(&t);
	}
	ok(built, "%s tp %d%s: every rank's table builds", name, tp, sp ? " sp" : "");
	ok(order, "%s tp %d%s: the same parameters in the same order on every rank", name, tp, sp ? " sp" : "");
	ok(shapes, "%s tp %d%s: shard shapes are the logical ones cut along the split dimension", name, tp,
	   sp ? " sp" : "");
	ok(packed, "%s tp %d%s: offsets are packed for the shard", name, tp, sp ? " sp" : "");
	ok(flags, "%s tp %d%s: replicas skipped by ranks above 0%s", name, tp, sp ? " sp" : "",
	   sp ? ", their gradients reduced under sequence parallelism" : "");
	mt_params_free(&g);
}

/* (1) shards cut from the logical initialization are the shards drawn directly, and
 * (2) all ranks' shards put back rebuild the logical buffer exactly. */
static void test_params_init_shards(int style, int tp)
{
	const char *name = NAMES[style];
	struct mt_config c;
	struct mt_params g, t;
	struct mt_err e = { 0 };
	float *logical, *back;
	int same = 1, diff_seed = 0;

	tiny(&c, style);
	c.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, tp);
	if (mt_params_build(&g, &c, &e)) {
		ok(0, "%s: %s", name, e.msg);
		return;
	}
	logical = alloc(g.total, 0);
	back = alloc(g.total, NAN);
	mt_params_init(&g, logical, 1234);
	for (int r = 0; r < tp; r++) {
		float *cut, *drawn;
		if (mt_params_build_tp(&t, &c, tp, r, 0, &e))
			break;
		cut = alloc(t.total, -1);
		drawn = alloc(t.total, -2);
		mt_params_slice(&t, r, &g, logical, cut, 0);
		mt_params_init_shard(&t, drawn, 1234);
		if (memcmp(cut, drawn, (size_t)t.total * sizeof(float))) {
			same = 0;
			for (int i = 0; i < t.n; i++)
				if (memcmp(cut + t.p[i].offset, drawn + t.p[i].offset, (size_t)t.p[i].numel * sizeof(float)))
					printf("#   rank %d: %s differs\n", r, t.p[i].name);
		}
		mt_params_init_shard(&t, drawn, 1235);
		diff_seed |= memcmp(cut, drawn, (size_t)t.total * sizeof(float)) != 0;
		mt_params_slice(&t, r, &g, back, cut, 1);
		free(cut);
		free(drawn);
		mt_params_free(&t);
	}
	ok(same, "%s tp %d: shards of the logical initialization equal mt_params_init_shard bit for bit", name, tp);
	ok(diff_seed, "%s tp %d: another seed draws another shard", name, tp);
	ok(memcmp(logical, back, (size_t)g.total * sizeof(float)) == 0,
	   "%s tp %d: all ranks' shards put back rebuild the logical buffer exactly", name, tp);
	free(logical);
	free(back);
	mt_params_free(&g);
}

/* Logical buffer element = its index in the parameter; the rank's shard then names the
 * logical row and column of each of its elements. */
static float *indexed(const struct mt_params *g)
{
	float *x = alloc(g->total, 0);

	for (int i = 0; i < g->n; i++)
		for (int64_t k = 0; k < g->p[i].numel; k++)
			x[g->p[i].offset + k] = (float)k;
	return x;
}

/* (3) QKV: rank r holds exactly query groups [r g/t, (r+1) g/t), each whole (its query
 * heads, key head and value head); proj and fc2: columns [r in/t, (r+1) in/t);
 * (4) SwiGLU's fc1: the rank's block of the gate half, then its block of the up half. */
static void test_params_layout(int style, int tp)
{
	const char *name = NAMES[style];
	struct mt_config c;
	struct mt_params g, t;
	struct mt_err e = { 0 };
	float *logical;
	int qkv = 1, qkv_b = 1, rows = 1, fc1 = 1, halves_not_blocks = 1;
	int64_t a, gq, d, h, f, per_group;

	tiny(&c, style);
	c.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, tp);
	a = c.num_attention_heads, gq = c.num_query_groups, d = c.kv_channels, h = c.hidden_size, f = c.ffn_hidden_size;
	per_group = (a / gq + 2) * d; /* rows of one query group: its query heads, its key, its value */
	if (mt_params_build(&g, &c, &e)) {
		ok(0, "%s: %s", name, e.msg);
		return;
	}
	logical = indexed(&g);
	for (int r = 0; r < tp; r++) {
		float *s;
		if (mt_params_build_tp(&t, &c, tp, r, 0, &e))
			break;
		s = alloc(t.total, -1);
		mt_params_slice(&t, r, &g, logical, s, 0);
		for (int l = 0; l < c.num_layers; l++) {
			const struct mt_param *p = mt_params_get(&t, l, MT_P_QKV_W);
			/* the groups this rank must hold, in order, each whole */
			int64_t j = 0;
			for (int64_t grp = r * gq / tp; grp < (r + 1) * gq / tp; grp++)
				for (int64_t k = 0; k < per_group; k++, j++)
					for (int64_t col = 0; col < h; col++)
						qkv &= s[p->offset + j * h + col] == (float)((grp * per_group + k) * h + col);
			qkv &= j == p->shape[0];
			if ((p = mt_params_get(&t, l, MT_P_QKV_B))) {
				j = 0;
				for (int64_t grp = r * gq / tp; grp < (r + 1) * gq / tp; grp++)
					for (int64_t k = 0; k < per_group; k++, j++)
						qkv_b &= s[p->offset + j] == (float)(grp * per_group + k);
			}
			for (int x = 0; x < 2; x++) {
				p = mt_params_get(&t, l, x ? MT_P_FC2_W : MT_P_PROJ_W);
				for (int64_t row = 0; row < p->shape[0]; row++)
					for (int64_t col = 0; col < p->shape[1]; col++)
						rows &= s[p->offset + row * p->shape[1] + col] ==
							(float)(row * p->gshape[1] + r * p->shape[1] + col);
			}
			p = mt_params_get(&t, l, MT_P_FC1_W);
			for (int64_t row = 0; row < p->shape[0]; row++) {
				int64_t blk = f / tp, want = c.swiglu ? (row < blk ? r * blk + row : f + r * blk + row - blk)
								      : r * p->shape[0] + row;
				fc1 &= s[p->offset + row * h] == (float)(want * h) &&
				       s[p->offset + row * h + h - 1] == (float)(want * h + h - 1);
				/* rank 0's row f/t: the up half's row 0 (logical row f), where a
				 * contiguous block of 2f/t rows would hold the gate's row f/t */
				if (c.swiglu && r == 0 && row == blk)
					halves_not_blocks &= s[p->offset + row * h] == (float)(f * h) &&
							     s[p->offset + row * h] != (float)(blk * h);
			}
		}
		free(s);
		mt_params_free(&t);
	}
	ok(qkv, "%s tp %d: each rank's QKV weight is query groups [r g/t, (r+1) g/t), whole and in order", name, tp);
	if (!c.add_bias_linear)
		tap_skip("no biases", name);
	else
		ok(qkv_b, "%s tp %d: the QKV bias is cut by the same query groups", name, tp);
	ok(rows, "%s tp %d: proj and fc2 weights hold columns [r in/t, (r+1) in/t)", name, tp);
	ok(fc1, "%s tp %d: fc1 rows are %s", name, tp,
	   c.swiglu ? "the rank's gate block then its up block" : "the rank's contiguous block");
	if (c.swiglu)
		ok(halves_not_blocks, "%s tp %d: SwiGLU's fc1 is not cut into contiguous blocks (rank 0's row f/t is "
		   "the up half's first)", name, tp);
	free(logical);
	mt_params_free(&g);
}

/* The logical table padded for size 1, the shards for size 4: the shards' extra
 * vocabulary rows read as zeros and are not written back. */
static void test_params_vocab_rows(int style)
{
	const char *name = NAMES[style];
	struct mt_config c, c4;
	struct mt_params g, t;
	struct mt_err e = { 0 };
	float *logical, *back;
	int zeros = 1, same_rows = 1, built = 1;

	tiny(&c, style);
	c4 = c;
	c4.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, 4);
	if (c4.padded_vocab_size == c.padded_vocab_size || mt_params_build(&g, &c, &e)) {
		ok(0, "%s: the test needs vocabularies padded differently", name);
		return;
	}
	logical = alloc(g.total, 0);
	back = alloc(g.total, 0);
	mt_params_init(&g, logical, 9);
	memcpy(back, logical, (size_t)g.total * sizeof(float));
	for (int r = 0; r < 4; r++) {
		float *cut, *drawn;
		if (mt_params_build_tp(&t, &c4, 4, r, 0, &e)) {
			built = 0;
			break;
		}
		cut = alloc(t.total, -1);
		drawn = alloc(t.total, -2);
		mt_params_slice(&t, r, &g, logical, cut, 0);
		mt_params_init_shard(&t, drawn, 9);
		for (int i = 0; i < t.n; i++) {
			const struct mt_param *p = &t.p[i];
			for (int64_t j = 0; j < p->shape[0]; j++) {
				int64_t row = p->split == MT_SPLIT_VOCAB ? r * p->shape[0] + j : 0;
				float *x = cut + p->offset + j * p->shape[1], *y = drawn + p->offset + j * p->shape[1];
				if (row >= c.padded_vocab_size)
					for (int64_t k = 0; k < p->shape[1]; k++)
						zeros &= x[k] == 0;
				else
					same_rows &= !memcmp(x, y, (size_t)p->shape[1] * sizeof(float));
			}
		}
		/* the shard's rows beyond the logical vocabulary are dropped on the way back */
		for (int i = 0; i < t.n; i++)
			if (t.p[i].split == MT_SPLIT_VOCAB)
				for (int64_t k = 0; k < t.p[i].numel; k++)
					cut[t.p[i].offset + k] += 1;
		mt_params_slice(&t, r, &g, back, cut, 1);
		free(cut);
		free(drawn);
		mt_params_free(&t);
	}
	ok(built, "%s: size 4 tables over a vocabulary padded for 4 build", name);
	ok(zeros, "%s: vocabulary rows the logical table lacks read as zeros", name);
	ok(same_rows, "%s: the rows both have are the logical initialization's (%lld rows of %lld)", name,
	   (long long)c.padded_vocab_size, (long long)c4.padded_vocab_size);
	{
		int ok_back = 1;
		for (int i = 0; i < g.n; i++) {
			const struct mt_param *p = &g.p[i];
			for (int64_t k = 0; k < p->numel; k++)
				ok_back &= back[p->offset + k] == logical[p->offset + k] + (p->split == MT_SPLIT_VOCAB ? 1 : 0);
		}
		ok(ok_back, "%s: written back, the shards fill exactly the logical table's rows", name);
	}
	free(logical);
	free(back);
	mt_params_free(&g);
}

/* (5) sizes that do not divide are refused with the flags and numbers */
static void test_params_refused(void)
{
	struct mt_config c;
	struct mt_params t;
	struct mt_err e = { 0 };

	tiny(&c, 1);
	c.num_attention_heads = 6;
	c.num_query_groups = 6;
	c.hidden_size = 36;
	c.kv_channels = 6;
	c.padded_vocab_size = 512;
	ok(mt_params_build_tp(&t, &c, 4, 0, 0, &e) == -1 && e.code == MT_EXIT_USAGE, "heads 6 at TP 4 are refused");
	is_str(e.msg, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4", "it says why");

	tiny(&c, 1);
	c.num_query_groups = 2;
	c.padded_vocab_size = 512;
	ok(mt_params_build_tp(&t, &c, 4, 1, 0, &e) == -1 && e.code == MT_EXIT_USAGE, "2 query groups at TP 4 are refused");
	like(e.msg, "--num-query-groups 2 is not divisible by --tensor-model-parallel-size 4", "it says why");

	tiny(&c, 1);
	c.ffn_hidden_size = 44;
	c.num_query_groups = 8;
	c.padded_vocab_size = 512;
	ok(mt_params_build_tp(&t, &c, 8, 0, 0, &e) == -1 && e.code == MT_EXIT_USAGE, "ffn 44 at TP 8 is refused");
	is_str(e.msg, "--ffn-hidden-size 44 is not divisible by --tensor-model-parallel-size 8", "it says why");

	tiny(&c, 0);
	c.padded_vocab_size = 302;
	ok(mt_params_build_tp(&t, &c, 4, 0, 0, &e) == -1 && e.code == MT_EXIT_USAGE, "a vocabulary of 302 at TP 4 is refused");
	like(e.msg, "padded vocabulary 302 is not divisible by --tensor-model-parallel-size 4", "it says why");
	like(e.msg, "--make-vocab-size-divisible-by", "and which flag pads it");

	tiny(&c, 0);
	c.seq_length = 6;
	c.padded_vocab_size = 512;
	ok(mt_params_build_tp(&t, &c, 4, 0, 1, &e) == -1 && e.code == MT_EXIT_USAGE,
	   "sequence parallel: a sequence of 6 at TP 4 is refused");
	like(e.msg, "--seq-length 6 is not divisible by --tensor-model-parallel-size 4", "it says why");
	ok(mt_params_build_tp(&t, &c, 4, 0, 0, &e) == 0, "without sequence parallelism the sequence is not cut");
	mt_params_free(&t);
	ok(mt_params_build_tp(&t, &c, 4, 4, 0, &e) == -1 && e.code == MT_EXIT_USAGE, "a rank outside the group is refused");
	ok(t.p == NULL && t.idx == NULL, "a refused table holds nothing to free");
	mt_params_free(&t);
}

int main(void)
{
	for (int style = 0; style < 3; style++) {
		test_params_whole(style);
		for (int tp = 2; tp <= 4; tp *= 2) {
			test_params_tables(style, tp, 0);
			test_params_tables(style, tp, 1);
			test_params_init_shards(style, tp);
			test_params_layout(style, tp);
		}
		test_params_vocab_rows(style);
	}
	test_params_refused();
	return tap_done();
}
