/* test_dist.c: the rank layout (Megatron's order), the rampup schedule, the data-parallel
 * shards, and the one-rank ZeRO-1 step against the replicated optimizer's, bit for bit.
 * (The multi-rank collectives run in tests/mt-train-dist.bats under mpiexec.) */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist.h"
#include "dist/dp.h"
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
	test_dist_rampup();
	test_dist_shards();
	test_dist_zero_step();
	return tap_done();
}
