/* idx-open: time mt_idx_open (header, sizes and the full pass over every entry)
 * against mt_idx_open_header (header and sizes only) on one dataset, best of N.
 *   idx-open PREFIX [N]     (bench/idx-open.sh builds and runs it) */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "data/idx.h"

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 5;
	double best_full = 1e30, best_hdr = 1e30;
	struct mt_err e = { 0 };
	struct mt_idx *ix;
	int64_t s = 0, d = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: idx-open PREFIX [N]\n");
		return 2;
	}
	for (int k = 0; k < n; k++) {
		double t0 = now(), t1, t2;

		if (mt_idx_open_header(&ix, argv[1], &e)) {
			fprintf(stderr, "idx-open: %s\n", e.msg);
			return 3;
		}
		t1 = now();
		mt_idx_close(ix);
		t1 = t1 - t0;
		t0 = now();
		if (mt_idx_open(&ix, argv[1], &e)) {
			fprintf(stderr, "idx-open: %s\n", e.msg);
			return 3;
		}
		t2 = now() - t0;
		s = ix->nseq;
		d = ix->ndoc_idx;
		mt_idx_close(ix);
		if (t1 < best_hdr)
			best_hdr = t1;
		if (t2 < best_full)
			best_full = t2;
	}
	printf("sequences %lld document-index %lld header-only %.6f s full %.6f s check %.6f s (%.2f ns per entry)\n",
	       (long long)s, (long long)d, best_hdr, best_full, best_full - best_hdr,
	       1e9 * (best_full - best_hdr) / (double)(s + d));
	return 0;
}
