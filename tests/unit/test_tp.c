/* test_tp: the model's tensor-parallel passes (gpt_impl.h through model/tp.h) against
 * the one-rank passes, with the ranks as threads of this process and the split points
 * as shared-memory collectives: no MPI, so a wrong split point shows here before any
 * launcher is involved. GPT-2 style and Llama style, TP 2 and 4, with and without
 * sequence parallelism, with and without label smoothing: the loss and every gradient
 * (the shards placed back into the logical layout) within fp32 rounding of one rank. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/config.h"
#include "model/gpt.h"
#include "model/params.h"
#include "model/tp.h"
#include "tap.h"

#define MAXT 4

struct shared {
	int t;
	pthread_barrier_t bar;
	const float *f[MAXT];
	const double *d[MAXT];
};

struct rank {
	struct shared *s;
	int r;
	struct mt_tp tp;
	/* the test's inputs and outputs */
	const struct mt_config *c;
	const int32_t *tok, *tgt;
	int B, T, sp;
	double eps;
	double loss;
	float *g;               /* the gradient, logical layout (filled by this rank's shard) */
	const struct mt_params *logical;
	int fail;
};

static int t_allreduce(void *ctx, float *buf, int64_t n)
{
	struct rank *k = ctx;
	struct shared *s = k->s;
	float *tmp = malloc((size_t)n * sizeof(float));

	s->f[k->r] = buf;
	pthread_barrier_wait(&s->bar);
	for (int64_t i = 0; i < n; i++) {
		float x = 0;
		for (int r = 0; r < s->t; r++)
			x += s->f[r][i];
		tmp[i] = x;
	}
	pthread_barrier_wait(&s->bar);
	memcpy(buf, tmp, (size_t)n * sizeof(float));
	free(tmp);
	return 0;
}

static int t_allgather(void *ctx, float *out, const float *in, int64_t n)
{
	struct rank *k = ctx;
	struct shared *s = k->s;

	s->f[k->r] = in;
	pthread_barrier_wait(&s->bar);
	for (int r = 0; r < s->t; r++)
		memcpy(out + r * n, s->f[r], (size_t)n * sizeof(float));
	pthread_barrier_wait(&s->bar);
	return 0;
}

static int t_reduce_scatter(void *ctx, float *out, const float *in, int64_t n)
{
	struct rank *k = ctx;
	struct shared *s = k->s;

	s->f[k->r] = in;
	pthread_barrier_wait(&s->bar);
	for (int64_t i = 0; i < n; i++) {
		float x = 0;
		for (int r = 0; r < s->t; r++)
			x += s->f[r][k->r * n + i];
		out[i] = x;
	}
	pthread_barrier_wait(&s->bar);
	return 0;
}

static int t_allreduce_f64(void *ctx, double *buf, int64_t n, int max)
{
	struct rank *k = ctx;
	struct shared *s = k->s;
	double *tmp = malloc((size_t)n * sizeof(double));

	s->d[k->r] = buf;
	pthread_barrier_wait(&s->bar);
	for (int64_t i = 0; i < n; i++) {
		double x = max ? -INFINITY : 0;
		for (int r = 0; r < s->t; r++)
			x = max ? fmax(x, s->d[r][i]) : x + s->d[r][i];
		tmp[i] = x;
	}
	pthread_barrier_wait(&s->bar);
	memcpy(buf, tmp, (size_t)n * sizeof(double));
	free(tmp);
	return 0;
}

static void *run_rank(void *arg)
{
	struct rank *k = arg;
	struct mt_params t;
	struct mt_gpt_acts a;
	struct mt_err e = { 0 };
	float *w, *g;

	memset(&a, 0, sizeof(a));
	a.label_smoothing = k->eps;
	if (mt_params_build_tp(&t, k->c, k->s->t, k->r, k->sp, &e) ||
	    mt_gpt_acts_alloc_tp(&a, k->c, &k->tp, k->B, k->T, 0, &e)) {
		fprintf(stderr, "# rank %d: %s\n", k->r, e.msg);
		k->fail = 1;
		return NULL;
	}
	w = malloc((size_t)t.total * sizeof(float));
	g = calloc((size_t)t.total, sizeof(float));
	mt_params_init_shard(&t, w, 1234);
	k->loss = mt_gpt_forward_f32(k->c, &t, w, k->tok, k->tgt, &a, NULL);
	mt_gpt_backward_f32(k->c, &t, w, k->tok, k->tgt, &a, g);
	k->fail = a.failed;
	/* each rank places its own shard; replicated parameters come from every rank alike */
	pthread_barrier_wait(&k->s->bar);
	for (int r = 0; r < k->s->t; r++) {
		if (r == k->r)
			mt_params_slice(&t, k->r, k->logical, k->g, g, 1);
		pthread_barrier_wait(&k->s->bar);
	}
	free(w);
	free(g);
	mt_gpt_acts_free(&a);
	mt_params_free(&t);
	return NULL;
}

static void check(const char *name, const struct mt_config *c0, int T, int tp, int sp, double eps)
{
	struct mt_config c = *c0;
	struct mt_params lt;
	struct mt_gpt_acts a;
	struct mt_err e = { 0 };
	int B = 2, N = B * T;
	int32_t *tok = malloc((size_t)N * sizeof(int32_t)), *tgt = malloc((size_t)N * sizeof(int32_t));
	float *w, *g1, *gt;
	double l1, worst = 0, lt_loss;
	struct shared s = { .t = tp };
	struct rank k[MAXT];
	pthread_t th[MAXT];
	const char *worst_name = "";
	int bad = 0;

	c.padded_vocab_size = mt_config_padded_vocab(c.vocab_size, c.make_vocab_size_divisible_by, tp);
	for (int n = 0; n < N; n++) {
		tok[n] = (int32_t)((n * 7 + 3) % c.vocab_size);
		tgt[n] = n % 5 == 4 ? -1 : (int32_t)((n * 11 + 1) % c.vocab_size);
	}
	/* one rank, over the same padded vocabulary */
	memset(&a, 0, sizeof(a));
	a.label_smoothing = eps;
	if (mt_params_build(&lt, &c, &e) || mt_gpt_acts_alloc_tp(&a, &c, NULL, B, T, 0, &e)) {
		ok(0, "%s: %s", name, e.msg);
		return;
	}
	w = malloc((size_t)lt.total * sizeof(float));
	g1 = calloc((size_t)lt.total, sizeof(float));
	gt = calloc((size_t)lt.total, sizeof(float));
	mt_params_init(&lt, w, 1234);
	l1 = mt_gpt_forward_f32(&c, &lt, w, tok, tgt, &a, NULL);
	mt_gpt_backward_f32(&c, &lt, w, tok, tgt, &a, g1);
	mt_gpt_acts_free(&a);

	pthread_barrier_init(&s.bar, NULL, (unsigned)tp);
	for (int r = 0; r < tp; r++) {
		k[r] = (struct rank){ .s = &s, .r = r, .c = &c, .tok = tok, .tgt = tgt, .B = B, .T = T, .sp = sp, .eps = eps,
				      .g = gt, .logical = &lt };
		k[r].tp = (struct mt_tp){ .size = tp, .rank = r, .sequence_parallel = sp, .ctx = &k[r],
					  .allreduce = t_allreduce, .allgather = t_allgather,
					  .reduce_scatter = t_reduce_scatter, .allreduce_f64 = t_allreduce_f64 };
		pthread_create(&th[r], NULL, run_rank, &k[r]);
	}
	for (int r = 0; r < tp; r++) {
		pthread_join(th[r], NULL);
		bad |= k[r].fail;
	}
	pthread_barrier_destroy(&s.bar);
	lt_loss = k[0].loss;
	for (int r = 1; r < tp; r++)
		bad |= k[r].loss != lt_loss; /* every rank reports the same loss, bit for bit */
	for (int i = 0; i < lt.n; i++) {
		const struct mt_param *p = &lt.p[i];
		double md = 0, mr = 0;
		for (int64_t e2 = 0; e2 < p->numel; e2++) {
			md = fmax(md, fabs((double)g1[p->offset + e2] - gt[p->offset + e2]));
			mr = fmax(mr, fabs((double)g1[p->offset + e2]));
		}
		if (mr > 0 && md / mr > worst) {
			worst = md / mr;
			worst_name = p->name;
		}
	}
	ok(!bad && fabs(l1 - lt_loss) / l1 < 1e-6 && worst < 1e-5,
	   "%s: TP=%d%s%s: loss %.9f against %.9f, worst gradient max|diff|/max|g| %.2e (%s)", name, tp,
	   sp ? " with SP" : "", eps > 0 ? " label smoothing" : "", lt_loss, l1, worst, worst_name);
	free(w), free(g1), free(gt), free(tok), free(tgt);
	mt_params_free(&lt);
}

int main(void)
{
	struct mt_config gpt, llama;
	struct mt_err e = { 0 };

	memset(&gpt, 0, sizeof(gpt));
	gpt.num_layers = 2;
	gpt.hidden_size = 32;
	gpt.num_attention_heads = 4;
	gpt.seq_length = 8;
	gpt.vocab_size = 61; /* padded to 64 at TP 1, 2 and 4 with divisible-by 16 */
	gpt.make_vocab_size_divisible_by = 16;
	gpt.add_bias_linear = 1;
	llama = gpt;
	mt_config_defaults(&gpt);
	llama.num_attention_heads = 8;
	llama.num_query_groups = 4;
	llama.ffn_hidden_size = 64;
	llama.position_embedding_type = MT_POS_ROPE;
	llama.normalization = MT_NORM_RMSNORM;
	llama.swiglu = 1;
	llama.add_bias_linear = 0;
	llama.untie_embeddings_and_output_weights = 1;
	mt_config_defaults(&llama);
	if (mt_config_validate(&gpt, &e) || mt_config_validate(&llama, &e)) {
		ok(0, "configs: %s", e.msg);
		return tap_done();
	}
	for (int tp = 2; tp <= 4; tp *= 2)
		for (int sp = 0; sp <= 1; sp++) {
			check("gpt2", &gpt, 8, tp, sp, 0);
			check("llama", &llama, 8, tp, sp, 0);
		}
	check("gpt2", &gpt, 8, 2, 1, 0.1);
	check("llama", &llama, 8, 4, 0, 0.1);
	return tap_done();
}
