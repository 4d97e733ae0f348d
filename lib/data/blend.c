/* blend.c: Megatron's blend syntax, per-source counts and interleaving (see blend.h). */
#include "data/blend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/opt.h"

void mt_blend_spec_free(struct mt_blend_spec *b)
{
	for (int i = 0; i < b->n; i++)
		free(b->src[i].path);
	free(b->src);
	memset(b, 0, sizeof(*b));
}

int mt_blend_parse(struct mt_blend_spec *b, const char *const *args, int nargs, struct mt_err *err)
{
	char **tok = NULL;
	int nt = 0, cap = 0, weighted;

	memset(b, 0, sizeof(*b));
	for (int a = 0; a < nargs; a++) {
		const char *p = args[a];
		while (*p) {
			const char *q;
			while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
				p++;
			if (!*p)
				break;
			q = p;
			while (*q && *q != ' ' && *q != '\t' && *q != '\n' && *q != '\r')
				q++;
			if (nt == cap) {
				char **nt_ = realloc(tok, (size_t)(cap = cap ? cap * 2 : 16) * sizeof(*tok));
				if (!nt_)
					goto oom;
				tok = nt_;
			}
			tok[nt] = strndup(p, (size_t)(q - p));
			if (!tok[nt++])
				goto oom;
			p = q;
		}
	}
	if (nt == 0) {
		free(tok);
		return mt_err_set(err, MT_EXIT_USAGE, "the data path is empty");
	}
	weighted = nt % 2 == 0;
	for (int i = 0; weighted && i < nt; i += 2) {
		double w;
		if (mt_parse_double(tok[i], &w))
			weighted = 0; /* Megatron: then every token is a path */
	}
	b->weighted = weighted;
	b->n = weighted ? nt / 2 : nt;
	b->src = calloc((size_t)b->n, sizeof(*b->src));
	if (!b->src)
		goto oom;
	for (int i = 0; i < b->n; i++) {
		if (weighted) {
			mt_parse_double(tok[2 * i], &b->src[i].weight);
			b->src[i].path = tok[2 * i + 1];
			free(tok[2 * i]);
			if (b->src[i].weight < 0 || !isfinite(b->src[i].weight)) {
				for (int k = 2 * i + 2; k < nt; k++)
					free(tok[k]);
				free(tok);
				mt_err_set(err, MT_EXIT_USAGE, "weight %g of '%s' is not a non-negative number",
					   b->src[i].weight, b->src[i].path);
				b->n = i + 1;
				mt_blend_spec_free(b);
				return -1;
			}
		} else {
			b->src[i].weight = 1;
			b->src[i].path = tok[i];
		}
	}
	free(tok);
	if (weighted) {
		double sum = 0;
		for (int i = 0; i < b->n; i++)
			sum += b->src[i].weight;
		if (sum <= 0) {
			mt_blend_spec_free(b);
			return mt_err_set(err, MT_EXIT_USAGE, "the blend's weights add up to zero");
		}
	}
	return 0;
oom:
	for (int i = 0; i < nt; i++)
		free(tok[i]);
	free(tok);
	return mt_err_set(err, MT_EXIT_IO, "out of memory");
}

double mt_numpy_sum(const double *a, size_t n)
{
	/* numpy's pairwise summation: sequential below 8, eight running sums up to 128,
	 * halves (at a multiple of 8) above; the last bit of w/sum depends on it */
	if (n < 8) {
		double s = 0;
		for (size_t i = 0; i < n; i++)
			s += a[i];
		return s;
	}
	if (n <= 128) {
		double r[8], s;
		size_t i;
		for (int j = 0; j < 8; j++)
			r[j] = a[j];
		for (i = 8; i < n - n % 8; i += 8)
			for (int j = 0; j < 8; j++)
				r[j] += a[i + j];
		s = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			s += a[i];
		return s;
	}
	{
		size_t n2 = n / 2;
		n2 -= n2 % 8;
		return mt_numpy_sum(a, n2) + mt_numpy_sum(a + n2, n - n2);
	}
}

void mt_blend_normalize(double *w, int n)
{
	double sum = mt_numpy_sum(w, (size_t)n);

	for (int i = 0; i < n; i++)
		w[i] /= sum;
}

void mt_blend_normalized(const struct mt_blend_spec *b, double *w)
{
	for (int i = 0; i < b->n; i++)
		w[i] = b->src[i].weight;
	mt_blend_normalize(w, b->n);
}

void mt_blend_targets(const double *w, int n, int64_t size, double surplus, int64_t *target,
		      int64_t *mid)
{
	for (int d = 0; d < n; d++) {
		target[d] = (int64_t)ceil((double)size * w[d]);
		mid[d] = (int64_t)ceil((double)target[d] * (1.0 + surplus));
	}
}

static int alloc_out(int n, int64_t size, void **di, int *wide, int64_t **si, struct mt_err *err)
{
	*wide = n >= 32767; /* Megatron's int16 layout holds fewer sources */
	*di = malloc((size_t)(size ? size : 1) * (*wide ? 4 : 2));
	*si = malloc((size_t)(size ? size : 1) * sizeof(int64_t));
	if (!*di || !*si) {
		free(*di);
		free(*si);
		return mt_err_set(err, MT_EXIT_IO, "out of memory for a blend of %lld samples", (long long)size);
	}
	return 0;
}

static void put(void *di, int wide, int64_t s, int d)
{
	if (wide)
		((int32_t *)di)[s] = d;
	else
		((int16_t *)di)[s] = (int16_t)d;
}

int mt_blend_indices(const double *w, int n, int64_t size, void **di, int *wide, int64_t **si,
		     struct mt_err *err)
{
	int64_t *cnt = calloc((size_t)n, sizeof(*cnt));

	if (!cnt || alloc_out(n, size, di, wide, si, err)) {
		free(cnt);
		return cnt ? -1 : mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	for (int64_t s = 0; s < size; s++) {
		/* the source furthest behind its share so far; the first on ties */
		double x = s > 1 ? (double)s : 1.0, eb = w[0] * x - (double)cnt[0];
		int best = 0;
		for (int d = 1; d < n; d++) {
			double e = w[d] * x - (double)cnt[d];
			if (e > eb) {
				best = d;
				eb = e;
			}
		}
		put(*di, *wide, s, best);
		(*si)[s] = cnt[best]++;
	}
	free(cnt);
	return 0;
}

int mt_blend_indices_exhaustive(const int64_t *counts, int n, void **di, int *wide, int64_t **si,
				int64_t *size, struct mt_err *err)
{
	int64_t total = 0, *cnt = calloc((size_t)n, sizeof(*cnt));
	double *w = malloc((size_t)n * sizeof(*w));

	for (int d = 0; d < n; d++)
		total += counts[d];
	if (!cnt || !w || alloc_out(n, total, di, wide, si, err)) {
		free(cnt);
		free(w);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	for (int d = 0; d < n; d++)
		w[d] = (double)counts[d] / (double)total;
	for (int64_t s = 0; s < total; s++) {
		double x = s > 1 ? (double)s : 1.0, eb = 0;
		int best = -1;
		for (int d = 0; d < n; d++) {
			double e;
			if (cnt[d] >= counts[d])
				continue; /* exhausted */
			e = w[d] * x - (double)cnt[d];
			if (best < 0 || e > eb) {
				best = d;
				eb = e;
			}
		}
		put(*di, *wide, s, best);
		(*si)[s] = cnt[best]++;
	}
	*size = total;
	free(cnt);
	free(w);
	return 0;
}
