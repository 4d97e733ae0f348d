/* tpcomm.c: the tensor-parallel split points of model/tp.h over a tensor-parallel group's
 * struct mt_dist (see tpcomm.h), on host buffers.
 *
 * Every sum here is taken by the code below, in rank order (rank 0's value, plus rank
 * 1's, ...), never by MPI's reduction: an all-reduce is an all-to-all that gives each
 * rank every rank's copy of its chunk, an ordered sum, and an all-gather of the sums; a
 * reduce-scatter is the first two; the double all-reduce gathers every rank's vector and
 * reduces it on each rank. So every rank gets the same bits and a run repeats them. It
 * knows nothing of the model (which tensors are split and where: model/) nor of NCCL (a
 * GPU backend supplies its own struct mt_tp). */
#include "parallel/tpcomm.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A failure: the collective's message (it names the rank's coordinates and the step)
 * stays in c->err, and every later operation fails at once. */
static int failed(struct mt_tpcomm *c)
{
	c->failed = 1;
	return -1;
}

static int oom(struct mt_tpcomm *c, const char *what)
{
	mt_err_set(&c->err, MT_EXIT_IO, "%s: out of memory for the tensor-parallel %s at step %lld", c->g->where, what,
		   (long long)c->step);
	return failed(c);
}

static float *scratch(struct mt_tpcomm *c, int64_t n)
{
	if (n < 1)
		n = 1; /* a rank whose chunk is empty still passes a buffer */
	if (n > c->scratch_n) {
		float *p = realloc(c->scratch, (size_t)n * sizeof(float));
		if (!p)
			return NULL;
		c->scratch = p;
		c->scratch_n = n;
	}
	return c->scratch;
}

/* n split into size near-equal chunks, the first n % size one longer */
static void chunks(struct mt_tpcomm *c, int64_t n)
{
	int size = c->g->world;
	int64_t o = 0;

	for (int q = 0; q < size; q++) {
		c->cnt[q] = n / size + (q < n % size);
		c->dsp[q] = o;
		o += c->cnt[q];
	}
}

/* out[i] = parts[0][i] + parts[1][i] + ... in rank order; parts packed m apart */
static void ordered_sum(float *out, const float *parts, int size, int64_t m)
{
	for (int64_t i = 0; i < m; i++) {
		float s = parts[i];
		for (int q = 1; q < size; q++)
			s += parts[q * m + i];
		out[i] = s;
	}
}

static int tp_allreduce(void *ctx, float *buf, int64_t n)
{
	struct mt_tpcomm *c = ctx;
	struct mt_dist *g = c->g;
	int size = g->world, r = g->rank;
	int64_t m;
	float *parts;

	if (c->failed)
		return -1;
	c->calls[MT_TPC_ALLREDUCE]++;
	c->elems[MT_TPC_ALLREDUCE] += n;
	if (size == 1 || n == 0)
		return 0;
	chunks(c, n);
	m = c->cnt[r];
	if (!(parts = scratch(c, (int64_t)size * m)))
		return oom(c, "all-reduce");
	if (mt_dist_alltoallv_f32(g, buf, c->cnt, c->dsp, parts, m, "the tensor-parallel all-reduce", c->step, &c->err))
		return failed(c);
	ordered_sum(buf + c->dsp[r], parts, size, m);
	if (mt_dist_allgatherv_f32(g, buf, c->cnt, c->dsp, "the tensor-parallel all-reduce", c->step, &c->err))
		return failed(c);
	/* all but its own chunk out, then its chunk of the sum to each other rank */
	c->bytes[MT_TPC_ALLREDUCE] += (int64_t)sizeof(float) * ((n - m) + m * (size - 1));
	return 0;
}

static int tp_allgather(void *ctx, float *out, const float *in, int64_t n)
{
	struct mt_tpcomm *c = ctx;
	struct mt_dist *g = c->g;
	int size = g->world, r = g->rank;

	if (c->failed)
		return -1;
	c->calls[MT_TPC_ALLGATHER]++;
	c->elems[MT_TPC_ALLGATHER] += n;
	if (out + (int64_t)r * n != in)
		memmove(out + (int64_t)r * n, in, (size_t)n * sizeof(float));
	if (size == 1 || n == 0)
		return 0;
	for (int q = 0; q < size; q++) {
		c->cnt[q] = n;
		c->dsp[q] = (int64_t)q * n;
	}
	if (mt_dist_allgatherv_f32(g, out, c->cnt, c->dsp, "the tensor-parallel all-gather", c->step, &c->err))
		return failed(c);
	c->bytes[MT_TPC_ALLGATHER] += (int64_t)sizeof(float) * n * (size - 1);
	return 0;
}

static int tp_reduce_scatter(void *ctx, float *out, const float *in, int64_t n)
{
	struct mt_tpcomm *c = ctx;
	struct mt_dist *g = c->g;
	int size = g->world;
	float *parts;

	if (c->failed)
		return -1;
	c->calls[MT_TPC_REDUCE_SCATTER]++;
	c->elems[MT_TPC_REDUCE_SCATTER] += n;
	if (size == 1) {
		if (out != in)
			memmove(out, in, (size_t)n * sizeof(float));
		return 0;
	}
	if (n == 0)
		return 0;
	for (int q = 0; q < size; q++) {
		c->cnt[q] = n;
		c->dsp[q] = (int64_t)q * n;
	}
	if (!(parts = scratch(c, (int64_t)size * n)))
		return oom(c, "reduce-scatter");
	if (mt_dist_alltoallv_f32(g, in, c->cnt, c->dsp, parts, n, "the tensor-parallel reduce-scatter", c->step,
				  &c->err))
		return failed(c);
	ordered_sum(out, parts, size, n);
	c->bytes[MT_TPC_REDUCE_SCATTER] += (int64_t)sizeof(float) * n * (size - 1);
	return 0;
}

static int tp_allreduce_f64(void *ctx, double *buf, int64_t n, int max)
{
	struct mt_tpcomm *c = ctx;
	struct mt_dist *g = c->g;
	int size = g->world, r = g->rank;
	double *all;

	if (c->failed)
		return -1;
	c->calls[MT_TPC_F64]++;
	c->elems[MT_TPC_F64] += n;
	if (size == 1 || n == 0)
		return 0;
	if ((int64_t)size * n > c->scratch64_n) {
		double *p = realloc(c->scratch64, (size_t)size * (size_t)n * sizeof(double));
		if (!p)
			return oom(c, "all-reduce of doubles");
		c->scratch64 = p;
		c->scratch64_n = (int64_t)size * n;
	}
	all = c->scratch64;
	for (int q = 0; q < size; q++) {
		c->cnt[q] = n;
		c->dsp[q] = (int64_t)q * n;
	}
	memcpy(all + (int64_t)r * n, buf, (size_t)n * sizeof(double));
	if (mt_dist_allgatherv_f64(g, all, c->cnt, c->dsp, "the tensor-parallel all-reduce of doubles", c->step,
				   &c->err))
		return failed(c);
	for (int64_t i = 0; i < n; i++) {
		double s = all[i];
		for (int q = 1; q < size; q++) {
			double v = all[(int64_t)q * n + i];
			if (!max)
				s += v;
			else if (v > s || isnan(v))
				s = v; /* a NaN anywhere is the maximum: it must not vanish */
		}
		buf[i] = s;
	}
	c->bytes[MT_TPC_F64] += (int64_t)sizeof(double) * n * (size - 1);
	return 0;
}

int mt_tpcomm_init(struct mt_tpcomm *c, struct mt_dist *g, int sequence_parallel, struct mt_tp *tp,
		   struct mt_err *err)
{
	memset(c, 0, sizeof(*c));
	memset(tp, 0, sizeof(*tp));
	if (!g)
		return mt_err_set(err, MT_EXIT_USAGE, "no tensor-parallel group: lay the ranks out first (mt_dist_layout)");
	c->g = g;
	c->cnt = calloc((size_t)g->world * 2, sizeof(int64_t));
	if (!c->cnt)
		return mt_err_set(err, MT_EXIT_IO, "%s: out of memory", g->where);
	c->dsp = c->cnt + g->world;
	tp->size = g->world;
	tp->rank = g->rank;
	tp->sequence_parallel = sequence_parallel;
	tp->ctx = c;
	tp->allreduce = tp_allreduce;
	tp->allgather = tp_allgather;
	tp->reduce_scatter = tp_reduce_scatter;
	tp->allreduce_f64 = tp_allreduce_f64;
	return 0;
}

void mt_tpcomm_free(struct mt_tpcomm *c)
{
	free(c->scratch);
	free(c->scratch64);
	free(c->cnt);
	c->scratch = NULL;
	c->scratch64 = NULL;
	c->cnt = c->dsp = NULL;
	c->scratch_n = c->scratch64_n = 0;
}

void mt_tpcomm_reset_counts(struct mt_tpcomm *c)
{
	memset(c->calls, 0, sizeof(c->calls));
	memset(c->bytes, 0, sizeof(c->bytes));
	memset(c->elems, 0, sizeof(c->elems));
}
