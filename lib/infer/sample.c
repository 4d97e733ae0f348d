/* sample.c: next-token choice (sample.h). */
#include "infer/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/mix.h"

int mt_sample_check(const struct mt_sample_params *p, struct mt_err *err)
{
	if (!(p->temperature >= 0 && p->temperature <= 100))
		return mt_err_set(err, MT_EXIT_USAGE, "temperature must be between 0 and 100 (0: greedy)");
	if (p->top_k < 0)
		return mt_err_set(err, MT_EXIT_USAGE, "top_k must be 0 or more");
	if (!(p->top_p >= 0 && p->top_p <= 1))
		return mt_err_set(err, MT_EXIT_USAGE, "top_p must be between 0 and 1");
	if (p->top_k > 1 && p->top_p > 0)
		return mt_err_set(err, MT_EXIT_USAGE, "top_k and top_p cannot be used together");
	if (p->top_k == 1 && p->top_p > 0)
		return mt_err_set(err, MT_EXIT_USAGE, "top_k and top_p cannot be used together");
	return 0;
}

double mt_sample_uniform(uint64_t seed, uint64_t index, uint64_t step)
{
	return (double)(mt_mix64(mt_mix64(mt_mix64(seed) ^ index) ^ step) >> 11) * 0x1p-53;
}

int mt_sampler_init(struct mt_sampler *s, int64_t vocab, struct mt_err *err)
{
	memset(s, 0, sizeof(*s));
	s->vocab = vocab;
	s->prob = malloc((size_t)vocab * sizeof(double));
	s->order = malloc((size_t)vocab * sizeof(int32_t));
	s->tmp = malloc((size_t)vocab * sizeof(double));
	if (!s->prob || !s->order || !s->tmp) {
		mt_sampler_free(s);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for a sampler over %lld ids", (long long)vocab);
	}
	return 0;
}

void mt_sampler_free(struct mt_sampler *s)
{
	free(s->prob);
	free(s->order);
	free(s->tmp);
	memset(s, 0, sizeof(*s));
}

static int32_t argmax(const float *z, int64_t n)
{
	int64_t best = 0;

	for (int64_t v = 1; v < n; v++)
		if (z[v] > z[best])
			best = v;
	return (int32_t)best;
}

static int by_prob_desc(const void *a, const void *b, void *key)
{
	const double *sort_key = key;
	int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;

	if (sort_key[x] != sort_key[y])
		return sort_key[x] > sort_key[y] ? -1 : 1;
	return x < y ? -1 : x > y;
}

/* The k-th largest of a[0..n) (k from 1), reordering a: quickselect, O(n) expected
 * (sorting 50k logits for every token of every row cost more than a decode step). */
static double kth_largest(double *a, int64_t n, int64_t k)
{
	int64_t lo = 0, hi = n - 1, want = k - 1;

	while (lo < hi) {
		double pivot = a[lo + (hi - lo) / 2], t;
		int64_t i = lo, j = hi;
		while (i <= j) {
			while (a[i] > pivot)
				i++;
			while (a[j] < pivot)
				j--;
			if (i <= j) {
				t = a[i];
				a[i++] = a[j];
				a[j--] = t;
			}
		}
		if (want <= j)
			hi = j;
		else if (want >= i)
			lo = i;
		else
			return a[want];
	}
	return a[want];
}

int32_t mt_sample(struct mt_sampler *s, const float *logits, const struct mt_sample_params *p, double u)
{
	int64_t V = s->vocab;
	double *pr = s->prob, mx = -INFINITY, sum = 0, acc, r;
	int64_t last = -1;

	if (p->temperature == 0 || p->top_k == 1)
		return argmax(logits, V);
	for (int64_t v = 0; v < V; v++) {
		pr[v] = (double)logits[v] / p->temperature;
		if (pr[v] > mx)
			mx = pr[v];
	}
	if (p->top_k > 1 && p->top_k < V) {
		double kth;
		memcpy(s->tmp, pr, (size_t)V * sizeof(double));
		kth = kth_largest(s->tmp, V, p->top_k);
		for (int64_t v = 0; v < V; v++)
			if (pr[v] < kth)
				pr[v] = -INFINITY;
	}
	for (int64_t v = 0; v < V; v++) {
		pr[v] = exp(pr[v] - mx);
		sum += pr[v];
	}
	if (p->top_p > 0 && p->top_p < 1) {
		/* Only the tokens above eps = 1e-3 of the largest probability are sorted when
		 * they hold more than top_p: then the cut falls among them and every token
		 * below eps (all sorted after them) is dropped; the sums run in the same order
		 * as a full sort's, so the result is the same. Otherwise sort everything. */
		double cum = 0, eps = 1e-3 / sum, mass = 0;
		int64_t n = 0;
		for (int64_t v = 0; v < V; v++) {
			pr[v] /= sum;
			if (pr[v] > eps) {
				s->order[n++] = (int32_t)v;
				mass += pr[v];
			}
		}
		if (mass > p->top_p) {
			qsort_r(s->order, (size_t)n, sizeof(int32_t), by_prob_desc, pr);
			mass = 0; /* again in sorted order, as the cut will sum */
			for (int64_t i = 0; i < n; i++)
				mass += pr[s->order[i]];
		}
		if (mass > p->top_p) {
			for (int64_t v = 0; v < V; v++)
				if (pr[v] <= eps)
					pr[v] = 0;
		} else {
			for (n = 0; n < V; n++)
				s->order[n] = (int32_t)n;
			qsort_r(s->order, (size_t)n, sizeof(int32_t), by_prob_desc, pr);
		}
		sum = 0;
		for (int64_t i = 0; i < n; i++) {
			int32_t v = s->order[i];
			int drop = i > 0 && cum > p->top_p; /* cumulative before this token */
			cum += pr[v];
			if (drop)
				pr[v] = 0;
			else
				sum += pr[v];
		}
	}
	r = u * sum;
	acc = 0;
	for (int64_t v = 0; v < V; v++) {
		if (pr[v] <= 0)
			continue;
		acc += pr[v];
		last = v;
		if (acc > r)
			return (int32_t)v;
	}
	return (int32_t)(last >= 0 ? last : argmax(logits, V));
}

double mt_sample_logprob(const float *logits, int64_t vocab, int32_t tok)
{
	double mx = -INFINITY, sum = 0;

	for (int64_t v = 0; v < vocab; v++)
		if (logits[v] > mx)
			mx = logits[v];
	for (int64_t v = 0; v < vocab; v++)
		sum += exp((double)logits[v] - mx);
	return (double)logits[tok] - mx - log(sum);
}

void mt_sample_top(const float *logits, int64_t vocab, int k, int32_t *ids, float *lp)
{
	double mx = -INFINITY, sum = 0, ls;
	int m = 0;

	for (int64_t v = 0; v < vocab; v++)
		if (logits[v] > mx)
			mx = logits[v];
	for (int64_t v = 0; v < vocab; v++)
		sum += exp((double)logits[v] - mx);
	ls = log(sum);
	/* insertion into a short sorted list: k is small (the OpenAI endpoint allows 20) */
	for (int64_t v = 0; v < vocab; v++) {
		int i;
		if (m == k && !(logits[v] > logits[ids[m - 1]]))
			continue;
		i = m < k ? m++ : k - 1;
		while (i > 0 && logits[v] > logits[ids[i - 1]]) {
			ids[i] = ids[i - 1];
			i--;
		}
		ids[i] = (int32_t)v;
	}
	for (int i = 0; i < m; i++)
		lp[i] = (float)((double)logits[ids[i]] - mx - ls); /* mt_sample_logprob's order */
}
