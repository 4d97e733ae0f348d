/* test_ddpplan.c: the GPU data-parallel layout on the CPU: buckets cover the buffer at
 * layer boundaries in backward order; under ZeRO-1 every element is updated by exactly
 * one rank (the leftovers by all of them), each rank's shard is filled once, and every
 * chunk keeps to one parameter with its decay flag. */
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "parallel/ddpplan.h"
#include "model/params.h"
#include "tap.h"

/* the start, the final norm or a layer's first parameter (of the layers a stage holds) */
static int is_boundary(const struct mt_params *t, int64_t x)
{
	const struct mt_param *f = mt_params_get(t, -1, MT_P_FINAL_W);

	if (x == 0 || (f && x == f->offset))
		return 1;
	for (int l = 0; l < t->num_layers; l++)
		if (mt_params_get(t, l, MT_P_LN1_W) && x == mt_params_get(t, l, MT_P_LN1_W)->offset)
			return 1;
	return 0;
}

/* a chunk lies in one parameter, is at most MT_ADAMW_CHUNK long and carries its decay */
static int chunk_ok(const struct mt_params *t, const struct mt_chunk *c)
{
	for (int i = 0; i < t->n; i++) {
		const struct mt_param *p = &t->p[i];
		if (c->start >= p->offset && c->start < p->offset + p->numel)
			return c->len > 0 && c->len <= MT_ADAMW_CHUNK && c->start + c->len <= p->offset + p->numel &&
			       c->decay == p->weight_decay;
	}
	return 0;
}

/* sp, stage: a pipeline stage's table (sp NULL: the whole model) */
static void check_stage(const char *what, const struct mt_config *c, int64_t bucket, int dp, int zero,
			const struct mt_pp_split *sp, int stage)
{
	struct mt_params t;
	struct mt_err e = { 0 };
	int *owners, bad_cover = 0, bad_bucket = 0, bad_chunk = 0, bad_shard = 0, bad_piece = 0;
	int64_t shard0 = -1, left = 0;

	if (sp ? mt_params_build_stage(&t, c, 1, 0, 0, sp, stage, &e) : mt_params_build(&t, c, &e)) {
		ok(0, "%s: %s", what, e.msg);
		return;
	}
	owners = calloc((size_t)t.total, sizeof(int));
	for (int r = 0; r < dp; r++) {
		struct mt_ddp_plan p;
		struct mt_chunk *ch;
		int64_t n, npiece;
		char *seen;
		if (mt_ddp_plan_init(&p, &t, bucket, dp, r, zero, &e)) {
			ok(0, "%s: %s", what, e.msg);
			break;
		}
		/* the buckets: descending, contiguous, at layer boundaries, large enough */
		for (int j = 0; j < p.nb; j++) {
			bad_bucket += p.hi[j] != (j ? p.lo[j - 1] : t.total) || !is_boundary(&t, p.lo[j]) ||
				      (p.lo[j] > 0 && p.hi[j] - p.lo[j] < bucket) || p.hi[j] <= p.lo[j];
			bad_piece += zero && dp > 1 && p.piece[j] != (p.hi[j] - p.lo[j]) / dp;
		}
		bad_bucket += p.nb < 1 || p.lo[p.nb - 1] != 0;
		n = mt_ddp_plan_chunks(&p, &t, NULL, &npiece);
		ch = malloc((size_t)n * sizeof(*ch));
		mt_ddp_plan_chunks(&p, &t, ch, NULL);
		seen = calloc((size_t)p.shard + 1, 1);
		for (int64_t k = 0; k < n; k++) {
			bad_chunk += !chunk_ok(&t, &ch[k]);
			for (int64_t i = 0; i < ch[k].len; i++) {
				int64_t m = ch[k].mstart + i;
				/* pieces first (one owner), the leftovers after them (every rank) */
				owners[ch[k].start + i] += k < npiece ? 1 : 1000;
				if (m < 0 || m >= p.shard || seen[m]++)
					bad_shard++;
				if (!zero && m != ch[k].start + i)
					bad_shard++;
			}
		}
		for (int64_t m = 0; m < p.shard; m++)
			bad_shard += seen[m] != 1;
		if (shard0 < 0)
			shard0 = p.shard;
		bad_shard += p.shard != shard0;
		if (r == 0)
			for (int j = 0; j < p.nb; j++)
				left += p.hi[j] - p.lo[j] - (int64_t)dp * p.piece[j];
		free(seen);
		free(ch);
		mt_ddp_plan_free(&p);
		if (!zero)
			break; /* every rank the same: the whole buffer */
	}
	for (int64_t i = 0; i < t.total; i++)
		bad_cover += zero && dp > 1 ? !(owners[i] == 1 || owners[i] == 1000 * dp) : owners[i] != 1;
	ok(!bad_bucket && !bad_piece, "%s: buckets at layer boundaries, from the end down to 0 (%d bad)", what,
	   bad_bucket + bad_piece);
	ok(!bad_cover, "%s: every element updated by exactly one rank, or by all (leftovers) (%d not)", what, bad_cover);
	ok(!bad_chunk, "%s: chunks within one parameter, with its decay flag (%d not)", what, bad_chunk);
	ok(!bad_shard, "%s: each rank's shard filled once, the same size on every rank (%d bad)", what, bad_shard);
	if (zero && dp > 1)
		ok(shard0 == (t.total - left) / dp + left,
		   "%s: the shard holds 1/%d of the pieces and the %lld leftovers (%lld of %lld)", what, dp, (long long)left,
		   (long long)shard0, (long long)t.total);
	free(owners);
	mt_params_free(&t);
}

static void check(const char *what, const struct mt_config *c, int64_t bucket, int dp, int zero)
{
	check_stage(what, c, bucket, dp, zero, NULL, 0);
}

static void model(struct mt_config *c, int llama)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 3;
	c->hidden_size = 64;
	c->num_attention_heads = 4;
	c->seq_length = 32;
	c->vocab_size = 203;
	c->make_vocab_size_divisible_by = 1;
	c->add_bias_linear = !llama;
	if (llama) {
		c->position_embedding_type = MT_POS_ROPE;
		c->normalization = MT_NORM_RMSNORM;
		c->swiglu = 1;
		c->untie_embeddings_and_output_weights = 1;
		c->num_query_groups = 2;
	}
	mt_config_defaults(c);
}

int main(void)
{
	struct mt_config g, l;

	model(&g, 0);
	model(&l, 1);
	check("GPT-2 style, replicated, 2 ranks", &g, 20000, 2, 0);
	check("GPT-2 style, ZeRO-1, 2 ranks", &g, 20000, 2, 1);
	check("GPT-2 style, ZeRO-1, 3 ranks", &g, 20000, 3, 1);
	check("GPT-2 style, ZeRO-1, 7 ranks, one bucket", &g, 1ll << 40, 7, 1);
	check("GPT-2 style, ZeRO-1, 4 ranks, a bucket a layer", &g, 1, 4, 1);
	check("Llama style (untied output), ZeRO-1, 3 ranks", &l, 30000, 3, 1);
	check("Llama style, replicated, 4 ranks", &l, 30000, 4, 0);
	/* pipeline stages: only some layers, the final norm on the last stage only */
	{
		struct mt_pp_split two = { 2, 1, 1, 0 }, inter = { 3, 1, 0, 0 };
		g.num_layers = l.num_layers = 3;
		check_stage("GPT-2 style, stage 0 of 2 (embeddings, layer 0), ZeRO-1, 2 ranks", &g, 1, 2, 1, &two, 0);
		check_stage("GPT-2 style, stage 1 of 2 (layers 1-2, tied copy), ZeRO-1, 3 ranks", &g, 1, 3, 1, &two, 1);
		check_stage("Llama style, middle stage of 3 (one layer, nothing else), 2 ranks", &l, 1, 2, 1, &inter, 1);
		check_stage("Llama style, last stage of 3, replicated", &l, 20000, 2, 0, &inter, 2);
	}
	return tap_done();
}
