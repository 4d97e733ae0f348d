/* idxstat.c: document-length statistics of indexed datasets (see idxstat.h).
 *
 * Exact percentiles in bounded memory: a table of counts for the common
 * lengths, a sorted list for the rare long documents, and ranks computed in
 * 128-bit arithmetic so counts beyond 2^31 (or 2^63 / 100) do not overflow.
 * Not here: reading or checking the files (idx.c, idxcheck.c), printing. */
#include "data/idxstat.h"

#include "data/idx.h"

#include <stdlib.h>
#include <string.h>

#include "base/array.h"

void mt_idx_lenstat_init(struct mt_idx_lenstat *s)
{
	memset(s, 0, sizeof(*s));
	s->min = -1;
	s->max = -1;
}

void mt_idx_lenstat_free(struct mt_idx_lenstat *s)
{
	free(s->direct);
	free(s->big);
	mt_idx_lenstat_init(s);
}

int mt_idx_lenstat_add(struct mt_idx_lenstat *s, int64_t len, int64_t count, struct mt_err *err)
{
	if (len < 0 || count < 0)
		return mt_err_set(err, MT_EXIT_DATA, "negative document length %lld or count %lld", (long long)len,
				  (long long)count);
	if (count == 0)
		return 0;
	if (len < MT_IDX_LENSTAT_DIRECT) {
		if (!s->direct && !(s->direct = calloc(MT_IDX_LENSTAT_DIRECT, sizeof(int64_t))))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		s->direct[len] += count;
	} else {
		if (s->nbig > SIZE_MAX / sizeof(int64_t) - (size_t)count)
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		if (mt_array_grow(&s->big, &s->capbig, s->nbig + (size_t)count, sizeof(int64_t), 1024))
			return mt_err_set(err, MT_EXIT_IO, "out of memory");
		for (int64_t k = 0; k < count; k++)
			s->big[s->nbig++] = len;
		s->big_sorted = 0;
	}
	if (s->n == 0 || len < s->min)
		s->min = len;
	if (s->n == 0 || len > s->max)
		s->max = len;
	s->n += count;
	s->sum += len * count;
	if (len == 0)
		s->empty += count;
	return 0;
}

int mt_idx_lenstat_add_dataset(struct mt_idx_lenstat *s, const struct mt_idx *ix, struct mt_err *err)
{
	int64_t seq = mt_idx_doc(ix, 0);

	for (int64_t d = 1; d < ix->ndoc_idx; d++) {
		int64_t end = mt_idx_doc(ix, d), len = 0;

		for (; seq < end; seq++)
			len += mt_idx_seq_len(ix, seq);
		if (mt_idx_lenstat_add(s, len, 1, err))
			return -1;
	}
	return 0;
}

int mt_idx_lenstat_merge(struct mt_idx_lenstat *dst, const struct mt_idx_lenstat *src, struct mt_err *err)
{
	if (src->direct)
		for (int64_t len = 0; len < MT_IDX_LENSTAT_DIRECT; len++)
			if (src->direct[len] && mt_idx_lenstat_add(dst, len, src->direct[len], err))
				return -1;
	for (size_t i = 0; i < src->nbig; i++)
		if (mt_idx_lenstat_add(dst, src->big[i], 1, err))
			return -1;
	return 0;
}

static int cmp_i64(const void *a, const void *b)
{
	int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

	return (x > y) - (x < y);
}

int64_t mt_idx_lenstat_percentile(struct mt_idx_lenstat *s, int p)
{
	unsigned __int128 r;
	int64_t rank, seen = 0;

	if (s->n == 0)
		return -1;
	if (p < 0)
		p = 0;
	if (p > 100)
		p = 100;
	/* rank = ceil(p * n / 100), at least 1 */
	r = ((unsigned __int128)p * (uint64_t)s->n + 99) / 100;
	rank = r < 1 ? 1 : (int64_t)r;
	if (s->direct)
		for (int64_t len = 0; len < MT_IDX_LENSTAT_DIRECT; len++) {
			seen += s->direct[len];
			if (seen >= rank)
				return len;
		}
	if (!s->big_sorted) {
		qsort(s->big, s->nbig, sizeof(int64_t), cmp_i64);
		s->big_sorted = 1;
	}
	return s->big[rank - seen - 1];
}

double mt_idx_lenstat_mean(const struct mt_idx_lenstat *s)
{
	return s->n ? (double)s->sum / (double)s->n : 0.0;
}
