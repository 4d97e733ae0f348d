/* gptsamples.h: Megatron-core GPTDataset's document, sample and shuffle indices.
 *
 * Given the sequence lengths of an indexed dataset, a split's sequence range, the number
 * of samples wanted, the sequence length and the seed, build the three arrays Megatron
 * builds, element for element: the document order over as many epochs as needed (one
 * numpy RandomState shuffle, or two with a separate final epoch), the (document, offset)
 * start of every sample, and the sample order. Also Megatron's cache files for them:
 * the JSON description, its MD5 in the file names, and .npy arrays. This file does not
 * read datasets (idx.c) or blend several (blend.c). */
#ifndef MT_GPTSAMPLES_H
#define MT_GPTSAMPLES_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

/* --split "969,30,1": weights normalized as Megatron does. */
int mt_gpt_parse_split(const char *split, double w[3], struct mt_err *err);

struct mt_gpt_range {
	int64_t beg, end;  /* sequences [beg, end) */
	int present;       /* 0: Megatron's None (end <= start) */
	double lo, hi;     /* the split_matrix bookends */
	int lo_is_int;     /* the first bookend is Python's int 0 */
};
/* Bookends from cumulative sums, ends rounded half to even against nseq. */
void mt_gpt_split_ranges(const double w[3], int64_t nseq, struct mt_gpt_range r[3]);

struct mt_gpt_params {
	int64_t num_samples;   /* -1: None (one epoch) */
	int64_t seq_length;    /* L */
	uint32_t seed;
	int add_extra_token;   /* X, 1 by default */
	int drop_last;         /* drop the last partial sample (Megatron's default) */
};

struct mt_gpt_indices {
	int32_t *doc;          /* document_index: int32[ndoc] */
	int64_t ndoc;
	void *sample;          /* sample_index: [nsample + 1][2], int32 or int64 */
	int64_t nsample;
	int sample_i64;
	void *shuffle;         /* shuffle_index: uint32 or int64 [nshuffle] */
	int64_t nshuffle;
	int shuffle_i64;
	int64_t epochs;
	int separate_final_epoch;
	int64_t tokens_per_epoch;
};

/* lens: every sequence's length in the dataset; the split uses sequences [beg, end). */
int mt_gpt_build(const int32_t *lens, int64_t beg, int64_t end, const struct mt_gpt_params *p,
		 struct mt_gpt_indices *out, struct mt_err *err);
void mt_gpt_indices_free(struct mt_gpt_indices *x);

/* What goes into the cache description (see docs/formats.md). */
struct mt_gpt_desc {
	const char *dataset_path;
	int64_t num_samples;            /* -1: null */
	const char *index_split;        /* "train", "valid", "test" */
	uint32_t seed;
	int64_t seq_length;
	const char *split;              /* the raw --split string, or NULL */
	const struct mt_gpt_range *split_matrix; /* 3 entries, or NULL (per-split blends) */
	const char *tokenizer_json;     /* the tokenizer's identifiers as a JSON object */
};
/* The description text (malloc'ed) and its MD5 in hex (33 bytes). */
char *mt_gpt_description(const struct mt_gpt_desc *d, char md5hex[33], struct mt_err *err);
/* Write {dir}/{md5}-GPTDataset-{split}-description.txt and the three .npy files; the
 * directory is created. */
int mt_gpt_write_cache(const char *dir, const struct mt_gpt_desc *d, const struct mt_gpt_indices *x,
		       char md5hex[33], struct mt_err *err);
/* Read the cache of description d from dir (Megatron's or mt's: the same files), after
 * cheap checks that it is what mt_gpt_build would give for (lens, beg, end, p): the
 * description file holds d's text exactly; document_index is int32 [E x (end - beg)]
 * holding each sequence of [beg, end) E times; sample_index is int32 or int64
 * [ns + 1][2] of non-decreasing (position < E x (end - beg), offset within that
 * document) pairs; shuffle_index is uint32 or int64 [ns], a permutation of 0..ns-1;
 * E, ns and the separate final epoch as mt_gpt_build's arithmetic gives them. (The
 * orders themselves are not rebuilt to compare: that would cost the build.) Returns 1
 * with *x filled, 0 when there is no cache (why[0] == 0) or it fails a check (why
 * says which: the caller rebuilds), -1 on an error reading it. */
int mt_gpt_read_cache(const char *dir, const struct mt_gpt_desc *d, const int32_t *lens, int64_t beg, int64_t end,
		      const struct mt_gpt_params *p, struct mt_gpt_indices *x, char *why, size_t nwhy,
		      struct mt_err *err);
/* Megatron's default cache directory for a dataset: {prefix}/cache/GPTDataset_indices */
void mt_gpt_cache_dir(char *buf, size_t n, const char *prefix);
/* Create a directory and its parents. */
int mt_mkdir_p(const char *dir, struct mt_err *err);

/* Hex MD5 of a buffer (33 bytes with the NUL). */
void mt_md5_hex(const void *data, size_t n, char out[33]);

#endif
