/* bpetrain.h: learning a byte-level BPE vocabulary from a corpus, written in GPT-2's
 * file format (vocab.json + merges.txt) so mt-tokenize's GPT2BPETokenizer reads it.
 *
 * Text is cut with the same pre-tokenization patterns as encoding; distinct pieces are
 * counted; then the most frequent adjacent pair is merged until the vocabulary is full
 * (256 bytes + merges + <|endoftext|>) or no pair is seen --min-frequency times. Ties go
 * to the pair with the smaller ids, so the result is deterministic. Single-threaded;
 * memory grows with the number of distinct pieces, not with the corpus. */
#ifndef MT_BPETRAIN_H
#define MT_BPETRAIN_H

#include <stdint.h>

#include "base/err.h"

struct mt_bpetrain_opts {
	char **inputs;
	int ninputs;
	int text;              /* plain text, one document per line; else JSON lines */
	const char *key;       /* JSON key */
	int64_t vocab_size;
	const char *pattern;
	int64_t min_frequency;
	const char *output_prefix;
	int quiet;
};

struct mt_bpetrain_stats {
	int64_t documents, pieces, merges;
	double seconds;
};

int mt_bpetrain_run(const struct mt_bpetrain_opts *o, struct mt_bpetrain_stats *st,
		    struct mt_err *err);

#endif
