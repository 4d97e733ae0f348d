/* idxstat.h: document-length statistics of indexed datasets (mt-index stat).
 *
 * A document's length is the sum of its sequences' lengths, in tokens. The
 * accumulator keeps exact counts: lengths below MT_IDX_LENSTAT_DIRECT in a
 * table of counts, longer ones in a list (at most tokens / 2^20 of them), so
 * percentiles are exact and memory stays about 8 MiB whatever the number of
 * documents. Accumulators add up, for a total over several datasets.
 * Percentiles are nearest-rank: the p-th is the smallest length that at least
 * p% of the documents do not exceed, i.e. the length of rank ceil(p/100 * n)
 * in ascending order (rank 1 for p = 0), always a length that occurs. Reading
 * and checking the files is idx.c's business. */
#ifndef MT_IDXSTAT_H
#define MT_IDXSTAT_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct mt_idx;

#define MT_IDX_LENSTAT_DIRECT (1 << 20)

struct mt_idx_lenstat {
	int64_t n;      /* documents */
	int64_t sum;    /* tokens */
	int64_t empty;  /* documents of length 0 */
	int64_t min, max;
	int64_t *direct; /* counts of each length below MT_IDX_LENSTAT_DIRECT; NULL until needed */
	int64_t *big;    /* the longer lengths, sorted when big_sorted */
	size_t nbig, capbig;
	int big_sorted;
};

void mt_idx_lenstat_init(struct mt_idx_lenstat *s);
void mt_idx_lenstat_free(struct mt_idx_lenstat *s);
/* count documents of length len (both >= 0); MT_EXIT_IO when out of memory. */
int mt_idx_lenstat_add(struct mt_idx_lenstat *s, int64_t len, int64_t count, struct mt_err *err);
/* Every document of ix, which must have passed mt_idx_verify. */
int mt_idx_lenstat_add_dataset(struct mt_idx_lenstat *s, const struct mt_idx *ix, struct mt_err *err);
/* Add src's documents to dst. */
int mt_idx_lenstat_merge(struct mt_idx_lenstat *dst, const struct mt_idx_lenstat *src, struct mt_err *err);
/* The p-th percentile, p in [0, 100], as above; -1 when there are no documents. */
int64_t mt_idx_lenstat_percentile(struct mt_idx_lenstat *s, int p);
/* Mean length, 0 when there are no documents. */
double mt_idx_lenstat_mean(const struct mt_idx_lenstat *s);

#endif
