/* test_dist.c: the rank layout (Megatron's order) and its process groups, the rampup
 * schedule, the dry run's memory per GPU (Korthikanti et al.'s activations in each case,
 * the first stage's parameters from the split table), the data-parallel shards, and the
 * one-rank ZeRO-1 step against the replicated optimizer's, bit for bit. (The multi-rank
 * collectives and the groups' communicators run in tests/mt-train-dist.bats and
 * tests/dist-grid.bats under mpiexec.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "parallel/dist.h"
#include "parallel/dp.h"
#include "parallel/ppsched.h"
#include "train/estimate.h"
#include "model/optim.h"
#include "model/params.h"
#include "tap.h"

static void test_dist_layout(void)
{
	int t, d, p;

	/* 16 ranks, TP 2, PP 2: tp fastest, then dp, pp slowest */
	mt_dist_coords(16, 2, 2, 0, &t, &d, &p);
	ok(t == 0 && d == 0 && p == 0, "rank 0 is (0, 0, 0)");
	mt_dist_coords(16, 2, 2, 1, &t, &d, &p);
	ok(t == 1 && d == 0 && p == 0, "rank 1 is the next tensor rank");
	mt_dist_coords(16, 2, 2, 2, &t, &d, &p);
	ok(t == 0 && d == 1 && p == 0, "rank 2 is the next data-parallel rank");
	mt_dist_coords(16, 2, 2, 8, &t, &d, &p);
	ok(t == 0 && d == 0 && p == 1, "rank 8 starts the second pipeline stage");
	mt_dist_coords(1024, 8, 16, 1023, &t, &d, &p);
	ok(t == 7 && d == 7 && p == 15, "rank 1023 of TP 8 x DP 8 x PP 16 is (7, 7, 15)");
}

/* "[0,1] [2,3]": the group of each rank as mt_dist_group_ranks gives it, against the
 * group of the spec that holds the rank ("" for a rank in none) */
static void check_groups(int world, int tp, int pp, enum mt_group g, const char *spec, const char *what)
{
	char want[64][256], got[256];
	int ranks[64], bad = -1;
	const char *s = spec;

	for (int r = 0; r < world; r++)
		want[r][0] = 0;
	while ((s = strchr(s, '['))) {
		const char *e = strchr(s, ']');
		char grp[256];
		size_t len = (size_t)(e - s + 1);

		memcpy(grp, s, len);
		grp[len] = 0;
		for (const char *q = s + 1; q < e;) {
			int r = (int)strtol(q, (char **)&q, 10);
			if (want[r][0])
				bad = r; /* the spec string lists a rank twice */
			strcpy(want[r], grp);
			if (*q == ',')
				q++;
		}
		s = e;
	}
	for (int r = 0; r < world && bad < 0; r++) {
		int n = mt_dist_group_ranks(world, tp, pp, g, r, ranks), o = 0;

		got[0] = 0;
		for (int i = 0; i < n; i++)
			o += snprintf(got + o, sizeof(got) - (size_t)o, "%s%d", i ? "," : "[", ranks[i]);
		if (n)
			snprintf(got + o, sizeof(got) - (size_t)o, "]");
		if (strcmp(got, want[r])) {
			printf("#   rank %d: got '%s', want '%s'\n", r, got, want[r]);
			bad = r;
		}
	}
	ok(bad < 0, "world %d, tp %d, pp %d: %s groups %s", world, tp, pp, what, spec);
}

/* docs: the worked example of Megatron's parallel_state.py (specs/megatron-parallel.md 1) */
static void test_dist_groups(void)
{
	int ranks[16];

	check_groups(16, 2, 4, MT_GROUP_TP, "[0,1] [2,3] [4,5] [6,7] [8,9] [10,11] [12,13] [14,15]", "tensor");
	check_groups(16, 2, 4, MT_GROUP_DP, "[0,2] [1,3] [4,6] [5,7] [8,10] [9,11] [12,14] [13,15]", "data");
	check_groups(16, 2, 4, MT_GROUP_PP, "[0,4,8,12] [1,5,9,13] [2,6,10,14] [3,7,11,15]", "pipeline");
	check_groups(16, 2, 4, MT_GROUP_MP, "[0,1,4,5,8,9,12,13] [2,3,6,7,10,11,14,15]", "model");
	/* the middle stages (ranks 4..11) hold no tied embedding */
	check_groups(16, 2, 4, MT_GROUP_EMB, "[0,12] [1,13] [2,14] [3,15]", "embedding");
	/* 8 ranks, tp 2, pp 2 (dp 2): rank = t + 2 (d + 2 p) */
	check_groups(8, 2, 2, MT_GROUP_TP, "[0,1] [2,3] [4,5] [6,7]", "tensor");
	check_groups(8, 2, 2, MT_GROUP_DP, "[0,2] [1,3] [4,6] [5,7]", "data");
	check_groups(8, 2, 2, MT_GROUP_PP, "[0,4] [1,5] [2,6] [3,7]", "pipeline");
	check_groups(8, 2, 2, MT_GROUP_MP, "[0,1,4,5] [2,3,6,7]", "model");
	check_groups(8, 2, 2, MT_GROUP_EMB, "[0,4] [1,5] [2,6] [3,7]", "embedding");
	/* one stage: each rank is its own embedding group; pure data parallelism */
	check_groups(4, 2, 1, MT_GROUP_EMB, "[0] [1] [2] [3]", "embedding");
	check_groups(4, 2, 1, MT_GROUP_PP, "[0] [1] [2] [3]", "pipeline");
	check_groups(4, 1, 1, MT_GROUP_DP, "[0,1,2,3]", "data");
	check_groups(4, 1, 1, MT_GROUP_TP, "[0] [1] [2] [3]", "tensor");
	check_groups(12, 3, 2, MT_GROUP_MP, "[0,1,2,6,7,8] [3,4,5,9,10,11]", "model");
	is_int(mt_dist_group_ranks(10, 2, 4, MT_GROUP_TP, 0, ranks), 0, "a world that is not a multiple of tp x pp: no group");
	is_int(mt_dist_group_ranks(8, 2, 2, MT_GROUP_TP, 8, ranks), 0, "a rank outside the world: no group");
}

static void test_dist_rampup(void)
{
	const int64_t r[3] = { 16, 16, 5859375 };
	const int64_t none[3] = { 0, 0, 0 };

	/* Megatron: 95 increments of 5859375 / 95 = 61677.6 samples */
	is_int(mt_rampup_batch(r, 1536, 0), 16, "starts at 16");
	is_int(mt_rampup_batch(r, 1536, 61677), 16, "16 until the first increment");
	is_int(mt_rampup_batch(r, 1536, 61678), 32, "then 32");
	is_int(mt_rampup_batch(r, 1536, 5859375), 1536, "1536 at the end of the ramp");
	is_int(mt_rampup_batch(r, 1536, 5859376), 1536, "and after it");
	is_int(mt_rampup_batch(none, 1536, 0), 1536, "no rampup: the global batch");
}

/* The dry run's activations (Korthikanti et al. 2022) for GPT-3 175B's layer: s 2048,
 * b 1, h 12288, a 96, t 8. s b h = 25 165 824 and 5 a s / h = 80, so per layer and
 * micro-batch at 16 bits:
 *   no parallelism (t 1)        s b h (34 + 80)          = 2 868 903 936
 *   tensor parallel             s b h (10 + 3 + 10)      =   578 813 952
 *   tensor + sequence parallel  s b h (4.25 + 10)        =   358 612 992
 *   selective, sequence par.    s b h 4.25               =   106 954 752
 *   selective, tensor par. only s b h 13                 =   327 155 712
 *   full recompute              2 s b h                  =    50 331 648
 *   full, sequence parallel     2 s b h / 8              =     6 291 456 */
static void test_dist_act_formulas(void)
{
	const double s = 2048, b = 1, h = 12288, a = 96;
	const char *f = NULL;
	double x;

	x = mt_estimate_act_layer(s, b, h, a, 1, 0, MT_RECOMPUTE_NONE, &f);
	ok(x == 2868903936.0, "no parallelism: s b h (34 + 5 a s / h) = 2868903936 bytes (got %.0f)", x);
	like(f, "no parallelism", "and says so");
	x = mt_estimate_act_layer(s, b, h, a, 1, 1, MT_RECOMPUTE_NONE, &f);
	ok(x == 2868903936.0, "sequence parallelism without tensor parallelism counts as none (got %.0f)", x);
	x = mt_estimate_act_layer(s, b, h, a, 8, 0, MT_RECOMPUTE_NONE, &f);
	ok(x == 578813952.0, "TP 8: s b h (10 + 24/t + 5 a s / (h t)) = 578813952 bytes (got %.0f)", x);
	like(f, "tensor parallel: s*b*h*(10 + 24/t + 5*a*s/(h*t))", "and names its formula");
	x = mt_estimate_act_layer(s, b, h, a, 8, 1, MT_RECOMPUTE_NONE, &f);
	ok(x == 358612992.0, "TP 8 + SP: s b h (34/t + 5 a s / (h t)) = 358612992 bytes (got %.0f)", x);
	like(f, "tensor + sequence parallel", "and names its case");
	x = mt_estimate_act_layer(s, b, h, a, 8, 1, MT_RECOMPUTE_SELECTIVE, &f);
	ok(x == 106954752.0, "TP 8 + SP, selective recompute: s b h 34/t = 106954752 bytes (got %.0f)", x);
	like(f, "selective recompute, sequence parallel", "and names its case");
	x = mt_estimate_act_layer(s, b, h, a, 8, 0, MT_RECOMPUTE_SELECTIVE, &f);
	ok(x == 327155712.0, "TP 8, selective recompute without SP: s b h (10 + 24/t) = 327155712 bytes (got %.0f)", x);
	x = mt_estimate_act_layer(s, b, h, a, 1, 0, MT_RECOMPUTE_SELECTIVE, &f);
	ok(x == 34 * s * b * h, "selective recompute at TP 1: s b h 34 (got %.0f)", x);
	x = mt_estimate_act_layer(s, b, h, a, 8, 0, MT_RECOMPUTE_FULL, &f);
	ok(x == 50331648.0, "full recompute: 2 s b h = 50331648 bytes, the layer input (got %.0f)", x);
	like(f, "full recompute: 2*s*b*h", "and names its case");
	x = mt_estimate_act_layer(s, b, h, a, 8, 1, MT_RECOMPUTE_FULL, &f);
	ok(x == 6291456.0, "full recompute under SP: 2 s b h / t = 6291456 bytes, the rank's part of the input (got %.0f)",
	   x);
	x = mt_estimate_act_layer(s, 4, h, a, 8, 1, MT_RECOMPUTE_NONE, NULL);
	ok(x == 4 * 358612992.0, "linear in the micro-batch size");
}

static void est_tiny(struct mt_config *c)
{
	memset(c, 0, sizeof(*c));
	c->num_layers = 4;
	c->hidden_size = 64;
	c->num_attention_heads = 8;
	c->seq_length = 32;
	c->vocab_size = 1000;
	mt_config_defaults(c);
}

static void est_args(struct mt_estimate_args *a, const struct mt_config *c, int tp, int pp, int dp)
{
	memset(a, 0, sizeof(*a));
	a->cfg = c;
	a->tp = tp;
	a->pp = pp;
	a->dp = dp;
	a->world = tp * pp * dp;
	a->gpus_per_node = 8;
	a->micro_batch_size = 2;
	a->global_batch_size = 2 * dp * 8;
	a->param_bytes = 2;
	a->dtype = "bf16";
}

static void test_dist_estimate_memory(void)
{
	struct mt_config c;
	struct mt_estimate_args a;
	struct mt_estimate e;
	struct mt_params g;
	struct mt_err err = { 0 };
	int64_t sharded = 0, whole = 0, stage = 0;
	double sbh;

	est_tiny(&c);
	c.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, 2);
	sbh = (double)c.seq_length * 2 * c.hidden_size;
	if (mt_params_build(&g, &c, &err)) {
		ok(0, "%s", err.msg);
		return;
	}
	for (int i = 0; i < g.n; i++) {
		const struct mt_param *p = &g.p[i];
		if (p->split == MT_SPLIT_NONE)
			whole += p->numel;
		else
			sharded += p->numel;
		if (p->layer < 2 && (p->layer >= 0 || p->kind == MT_P_WORD_EMB || p->kind == MT_P_POS_EMB))
			stage += p->split == MT_SPLIT_NONE ? p->numel : p->numel / 2;
	}

	est_args(&a, &c, 1, 1, 1);
	if (!ok(mt_estimate(&a, &e, &err) == 0, "one rank: estimated"))
		printf("#   %s\n", err.msg);
	is_int(e.params_per_gpu, mt_config_num_params(&c), "one rank holds every parameter, the final norm included");
	ok(e.act_layer == sbh * (34 + 5.0 * 8 * 32 / 64), "one rank: no parallelism's bytes per layer");
	ok(e.activations == e.act_layer * 4, "times 4 layers and 1 micro-batch in flight");

	est_args(&a, &c, 2, 1, 1);
	if (!ok(mt_estimate(&a, &e, &err) == 0, "TP 2: estimated"))
		printf("#   %s\n", err.msg);
	is_int(e.params_per_gpu, sharded / 2 + whole, "TP 2: split weights halved, replicas whole");
	ok(e.act_layer == sbh * (10 + 12 + 5.0 * 8 * 32 / (64 * 2)), "TP 2: tensor parallel's bytes per layer");
	a.sequence_parallel = 1;
	ok(mt_estimate(&a, &e, &err) == 0 && e.act_layer == sbh * (17 + 5.0 * 8 * 32 / (64 * 2)),
	   "TP 2 + SP: tensor + sequence parallel's bytes per layer");
	a.recompute = MT_RECOMPUTE_SELECTIVE;
	ok(mt_estimate(&a, &e, &err) == 0 && e.act_layer == sbh * 17, "selective recompute: s b h 34/t");
	a.recompute = MT_RECOMPUTE_FULL;
	ok(mt_estimate(&a, &e, &err) == 0 && e.act_layer == sbh, "full recompute under SP: 2 s b h / t");
	a.param_bytes = 4;
	a.dtype = "fp32";
	ok(mt_estimate(&a, &e, &err) == 0 && e.act_layer == 2 * sbh, "fp32 activations: twice the 16-bit bytes");

	est_args(&a, &c, 2, 2, 1);
	if (!ok(mt_estimate(&a, &e, &err) == 0, "TP 2 x PP 2: estimated"))
		printf("#   %s\n", err.msg);
	is_int(e.params_per_gpu, stage, "the first stage: the embeddings and its 2 layers, no final norm");
	ok(e.act_layers == 2 && e.act_inflight == 2 && e.activations == e.act_layer * 2 * 2,
	   "2 layers x 2 micro-batches in flight (1F1B)");
	mt_estimate_free(&e);

	/* 8 layers over 4 stages, 8 micro-batches: 1F1B keeps 4, 3, 2, 1 micro-batches in
	 * flight, ZB-H1 4 on every stage, interleaved (2 chunks of 1 layer a stage)
	 * (p - r - 1) 2 + (v - 1) p + 1 chunks of micro-batches */
	c.num_layers = 8;
	est_args(&a, &c, 1, 4, 1);
	{
		const double msg = 32.0 * 2 * 64 * 2; /* s b h, 2 bytes */
		int good = mt_estimate(&a, &e, &err) == 0 && e.nstages == 4;
		for (int r = 0; good && r < 4; r++)
			good = e.stages[r].inflight == 4 - r && e.stages[r].activations == e.act_layer * 2 * (4 - r) &&
			       e.stages[r].p2p_bytes == msg * 8 * (r == 0 || r == 3 ? 1 : 2);
		ok(good && e.busiest == 0 && fabs(e.bubble - 3.0 / 8) < 1e-12,
		   "PP 4, 1F1B: 4, 3, 2, 1 micro-batches in flight; 8 or 16 messages a stage; bubble 3/8");
		ok(good && e.stages[3].params > e.stages[1].params && e.stages[3].logits > 0 && e.stages[0].logits == 0,
		   "the last stage: the final norm, the tied embedding's copy and the logits");
		mt_estimate_free(&e);
		a.pp_schedule = MT_PP_ZBH1;
		good = mt_estimate(&a, &e, &err) == 0;
		for (int r = 0; good && r < 4; r++)
			good = e.stages[r].inflight == 4;
		ok(good && fabs(e.bubble - 3.0 / 24) < 1e-12, "PP 4, ZB-H1: 4 micro-batches in flight on every stage, bubble 3/24");
		mt_estimate_free(&e);
		a.pp_schedule = MT_PP_INTERLEAVED;
		a.pipeline.vp = 2;
		good = mt_estimate(&a, &e, &err) == 0;
		for (int r = 0; good && r < 4; r++)
			good = e.stages[r].inflight == ((4 - r - 1) * 2 + 4 + 1) / 2.0 &&
			       e.stages[r].p2p_bytes == msg * 8 * (r == 0 || r == 3 ? 3 : 4);
		ok(good && fabs(e.bubble - 3.0 / 16) < 1e-12,
		   "PP 4 x 2 chunks, interleaved: (p - r - 1) 2 + (v - 1) p + 1 chunks in flight; bubble 3/16 (%s)", err.msg);
		mt_estimate_free(&e);
		a.global_batch_size = 2 * 6;
		ok(mt_estimate(&a, &e, &err) == -1 && err.code == MT_EXIT_USAGE, "interleaved with 6 micro-batches: refused");
	}
	c.num_layers = 4;

	est_args(&a, &c, 4, 1, 1);
	c.num_attention_heads = 6;
	c.num_query_groups = 6;
	c.kv_channels = 8;
	ok(mt_estimate(&a, &e, &err) == -1 && err.code == MT_EXIT_USAGE, "6 heads at TP 4 are refused");
	is_str(err.msg, "--num-attention-heads 6 is not divisible by --tensor-model-parallel-size 4", "naming the flags");
	est_tiny(&c);
	c.padded_vocab_size = 1001;
	est_args(&a, &c, 2, 1, 1);
	ok(mt_estimate(&a, &e, &err) == -1, "a vocabulary not padded for TP 2 is refused");
	like(err.msg, "padded vocabulary 1001 is not divisible by --tensor-model-parallel-size 2", "naming the flag");
	mt_params_free(&g);
}

static void test_dist_shards(void)
{
	struct mt_config c;
	struct mt_params t;
	struct mt_err e = { 0 };
	struct mt_dist d;
	int64_t next = 0, biggest = 0;
	int whole = 1;

	memset(&c, 0, sizeof(c));
	c.num_layers = 2, c.hidden_size = 64, c.num_attention_heads = 4, c.seq_length = 16, c.vocab_size = 64;
	c.add_bias_linear = 1;
	mt_config_defaults(&c);
	ok(mt_params_build(&t, &c, &e) == 0, "parameter table");
	memset(&d, 0, sizeof(d));
	d.world = d.dp = 3;
	for (int r = 0; r < 3; r++) {
		struct mt_dp p;
		d.rank = d.dp_rank = r;
		ok(mt_dp_init(&p, &d, &t, 1, &e) == 0, "shards of 3: rank %d", r);
		is_int(p.lo, next, "rank %d's shard starts where rank %d's ended", r, r - 1);
		next = p.hi;
		if (p.hi - p.lo > biggest)
			biggest = p.hi - p.lo;
		for (int i = 0; i < t.n; i++) {
			int64_t a = t.p[i].offset, b = a + t.p[i].numel;
			if (a < p.hi && b > p.lo && (a < p.lo || b > p.hi))
				whole = 0;
		}
		mt_dp_free(&p);
	}
	is_int(next, t.total, "the shards cover the buffer");
	ok(whole, "no parameter is cut");
	ok(biggest < t.total / 2, "balanced: the largest shard (%lld) under half of %lld", (long long)biggest,
	   (long long)t.total);
	mt_params_free(&t);
}

/* One rank: accumulate three micro-batch gradients, then the ZeRO step against the
 * replicated path (scale, norm, clip, AdamW over the table) */
static void test_dist_zero_step(void)
{
	struct mt_config c;
	struct mt_params t;
	struct mt_err e = { 0 };
	struct mt_dist d;
	struct mt_dp p;
	struct mt_adamw o1, o2;
	float *g, *w1, *w2, *m, *v, *gs[3];
	double n1, n2;
	int bad;

	memset(&c, 0, sizeof(c));
	c.num_layers = 1, c.hidden_size = 32, c.num_attention_heads = 2, c.seq_length = 8, c.vocab_size = 50;
	c.add_bias_linear = 1;
	mt_config_defaults(&c);
	mt_params_build(&t, &c, &e);
	memset(&d, 0, sizeof(d));
	d.world = d.dp = d.tp = d.pp = 1;
	g = calloc((size_t)t.total, sizeof(float));
	w1 = malloc((size_t)t.total * sizeof(float));
	w2 = malloc((size_t)t.total * sizeof(float));
	m = calloc((size_t)t.total, sizeof(float));
	v = calloc((size_t)t.total, sizeof(float));
	mt_params_init(&t, w1, 7);
	memcpy(w2, w1, (size_t)t.total * sizeof(float));
	srand(3);
	for (int k = 0; k < 3; k++) {
		gs[k] = malloc((size_t)t.total * sizeof(float));
		for (int64_t i = 0; i < t.total; i++)
			gs[k][i] = (float)rand() / RAND_MAX - 0.5f;
	}
	mt_adamw_init(&o1);
	o2 = o1;
	ok(mt_dp_init(&p, &d, &t, 1, &e) == 0, "one rank, ZeRO");
	for (int step = 1; step <= 3; step++) {
		/* replicated: acc = ((0 + g0) + g1) + g2, then the backend's preparation */
		memset(g, 0, (size_t)t.total * sizeof(float));
		for (int k = 0; k < 3; k++)
			for (int64_t i = 0; i < t.total; i++)
				g[i] = g[i] + gs[k][i] * (float)step;
		mt_grad_scale(&t, g, 1.0f / 3);
		n1 = mt_grad_clip(&t, g, 1.0);
		mt_adamw_step(&o1, &t, w1, g, m, v, 1e-3);
		/* ZeRO */
		mt_dp_begin(&p);
		for (int k = 0; k < 3; k++) {
			float *x = malloc((size_t)t.total * sizeof(float));
			for (int64_t i = 0; i < t.total; i++)
				x[i] = gs[k][i] * (float)step;
			mt_dp_accumulate(&p, x, step, &e);
			free(x);
		}
		ok(mt_dp_zero_step(&p, w2, &o2, 1e-3, 1.0f / 3, 1.0, &n2, &bad, step, &e) == 0 && !bad, "step %d", step);
		ok(n1 == n2, "step %d: the same norm (%.17g, %.17g)", step, n1, n2);
		ok(!memcmp(w1, w2, (size_t)t.total * sizeof(float)), "step %d: the same weights bit for bit", step);
	}
	ok(!memcmp(m, p.m, (size_t)t.total * sizeof(float)) && !memcmp(v, p.v, (size_t)t.total * sizeof(float)),
	   "the same moments");
	mt_dp_free(&p);
	for (int k = 0; k < 3; k++)
		free(gs[k]);
	free(g), free(w1), free(w2), free(m), free(v);
	mt_params_free(&t);
}

int main(void)
{
	test_dist_layout();
	test_dist_groups();
	test_dist_rampup();
	test_dist_act_formulas();
	test_dist_estimate_memory();
	test_dist_shards();
	test_dist_zero_step();
	return tap_done();
}
