/* ddpplan.c: gradient buckets, ZeRO-1 pieces and the optimizer's chunks (see ddpplan.h). */
#include "parallel/ddpplan.h"

#include <stdlib.h>
#include <string.h>

void mt_ddp_plan_free(struct mt_ddp_plan *p)
{
	free(p->lo);
	memset(p, 0, sizeof(*p));
}

static int desc(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

int mt_ddp_plan_init(struct mt_ddp_plan *p, const struct mt_params *t, int64_t bucket_size, int dp, int rank,
		     int zero, struct mt_err *err)
{
	int L = t->num_layers, nb = 0, nbd = 0;
	int64_t hi = t->total, *bd;
	const struct mt_param *fin = mt_params_get(t, -1, MT_P_FINAL_W);

	memset(p, 0, sizeof(*p));
	if (dp < 1 || rank < 0 || rank >= dp || bucket_size < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "data-parallel plan: rank %d of %d, bucket size %lld", rank, dp,
				  (long long)bucket_size);
	p->dp = dp;
	p->rank = rank;
	p->zero = zero && dp > 1;
	p->lo = calloc((size_t)(L + 2) * 5, sizeof(int64_t));
	if (!p->lo)
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	p->hi = p->lo + (L + 2);
	p->piece = p->hi + (L + 2);
	p->sh = p->piece + (L + 2);
	bd = p->sh + (L + 2);
	/* where a bucket may begin: the final norm, each layer's first parameter (of the
	 * layers this table holds: a pipeline stage's), the start; in backward order */
	if (fin)
		bd[nbd++] = fin->offset;
	for (int l = L - 1; l >= 0; l--) {
		const struct mt_param *q = mt_params_get(t, l, MT_P_LN1_W);
		if (q)
			bd[nbd++] = q->offset;
	}
	qsort(bd, (size_t)nbd, sizeof(*bd), desc);
	bd[nbd++] = 0;
	for (int i = 0; i < nbd; i++) {
		int64_t lo = bd[i];
		if (lo < hi && (hi - lo >= bucket_size || i == nbd - 1)) {
			p->lo[nb] = lo;
			p->hi[nb] = hi;
			nb++;
			hi = lo;
		}
	}
	p->nb = nb;
	for (int j = 0; j < nb; j++) {
		int64_t n = p->hi[j] - p->lo[j];
		p->piece[j] = p->zero ? n / dp : 0;
		p->sh[j] = p->zero ? p->shard : p->lo[j];
		p->shard += p->zero ? n - (int64_t)(dp - 1) * p->piece[j] : n;
	}
	return 0;
}

/* the chunks of the parameters' elements in [x, y), shard index from mbase */
static int64_t add_chunks(const struct mt_params *t, struct mt_chunk *out, int64_t x, int64_t y, int64_t mbase)
{
	int64_t n = 0;

	for (int i = 0; i < t->n; i++) {
		int64_t a = x > t->p[i].offset ? x : t->p[i].offset;
		int64_t b = y < t->p[i].offset + t->p[i].numel ? y : t->p[i].offset + t->p[i].numel;
		for (int64_t o = a; o < b; o += MT_ADAMW_CHUNK, n++)
			if (out)
				out[n] = (struct mt_chunk){ o, (int32_t)(b - o < MT_ADAMW_CHUNK ? b - o : MT_ADAMW_CHUNK),
							    t->p[i].weight_decay, mbase + (o - x) };
	}
	return n;
}

int64_t mt_ddp_plan_chunks(const struct mt_ddp_plan *p, const struct mt_params *t, struct mt_chunk *out,
			   int64_t *npiece)
{
	int64_t n = 0;

	if (!p->zero) {
		n = add_chunks(t, out, 0, t->total, 0);
		if (npiece)
			*npiece = n;
		return n;
	}
	for (int j = 0; j < p->nb; j++) {
		int64_t lo = p->lo[j] + p->rank * p->piece[j];
		n += add_chunks(t, out ? out + n : NULL, lo, lo + p->piece[j], p->sh[j]);
	}
	if (npiece)
		*npiece = n;
	for (int j = 0; j < p->nb; j++) {
		int64_t lo = p->lo[j] + p->dp * p->piece[j];
		n += add_chunks(t, out ? out + n : NULL, lo, p->hi[j], p->sh[j] + p->piece[j]);
	}
	return n;
}
