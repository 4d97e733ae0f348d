/* idxcheck.h: the full consistency check of an indexed dataset (mt-index verify).
 *
 * Where mt_idx_open and mt_idx_verify stop at the first inconsistency, this
 * check reads the .idx on its own and reports every problem it can tell apart,
 * one line each: the header (magic, version, dtype, counts, size), sequence
 * lengths, pointers (each one against its neighbour, so one bad entry is one
 * problem, not a cascade), the document index, the .bin size and, given a
 * vocabulary size, every token of the .bin (counted, with the first position).
 * Repeated problems of one kind are counted on one line with the first
 * occurrence. A dataset without problems is exactly one that mt_idx_open and
 * mt_idx_verify accept, except that trailing .idx bytes other than a
 * multimodal modes array (S bytes) are a problem here. The library never
 * prints: problems go to a callback. */
#ifndef MT_IDXCHECK_H
#define MT_IDXCHECK_H

#include <stdint.h>

#include "base/err.h"

struct mt_idx_check {
	int64_t vocab_size; /* > 0: every token must be in [0, vocab_size) */
	/* called once per problem with one line of text (no prefix, no newline) */
	void (*problem)(void *ctx, const char *line);
	void *ctx;
	/* results */
	int64_t problems;
	int dtype;          /* 0 if the header could not be read */
	int64_t sequences, documents, tokens; /* as the header and lengths say, -1 if unknown */
};

/* Check PREFIX.idx and PREFIX.bin (a trailing ".bin"/".idx" on prefix is
 * dropped). Returns 0 when both files could be read, whatever was found
 * (c->problems says how much); -1 with MT_EXIT_IO in err when a file is
 * missing or cannot be mapped. */
int mt_idx_check_run(struct mt_idx_check *c, const char *prefix, struct mt_err *err);

#endif
