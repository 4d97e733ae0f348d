/* vocab.h: a byte-level BPE vocabulary: token bytes, ids, merge ranks, special tokens.
 *
 * Loads GPT-2's vocab.json + merges.txt, tiktoken rank files (base64 token and rank per
 * line) and Hugging Face tokenizer.json files of byte-level BPE models, into one shape:
 * every id's bytes, a bytes -> id table, and a pair table (left id, right id) -> (rank,
 * merged id) that drives the merge loop in bpe.c. Which pairs the table holds decides
 * the semantics: for GPT-2 and tiktoken files every split of a ranked token into two
 * tokens (tiktoken's rule: merge the adjacent pair whose concatenation has the lowest
 * rank); for tokenizer.json only the listed merges (Hugging Face's rule). This file does
 * not split text (pretok.c) or run merges (bpe.c). */
#ifndef MT_VOCAB_H
#define MT_VOCAB_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

enum mt_vocab_kind {
	MT_VOCAB_GPT2 = 1,  /* vocab.json + merges.txt */
	MT_VOCAB_TIKTOKEN,  /* rank file */
	MT_VOCAB_HF,        /* tokenizer.json */
	MT_VOCAB_NULL,      /* ids written as integers in the text */
	MT_VOCAB_SPM,       /* a SentencePiece model (spm.h): encode and decode go there */
};

struct mt_spm;
struct mt_vocab;
struct json_t;

/* What a tokenizer kind adds to the common shape below: tokenizer.json's normalizer and
 * post-processor (hfjson.h's mt_hfjson_ops), a SentencePiece model that encodes and decodes
 * itself (spm.h's mt_spm_ops). The kind fills one table and its loader points v->ops at
 * it; this file and bpe.c call through the table, so they need not include the kind's
 * header. Any entry may be NULL. */
struct mt_vocab_ops {
	const char *name;
	/* read the kind's parts of a parsed tokenizer.json (root) into v */
	int (*load_json)(struct mt_vocab *v, struct json_t *root, const char *file, struct mt_err *err);
	/* append the ids of text[0..n), in place of the merge loop */
	int (*encode)(const struct mt_vocab *v, const char *text, size_t n, int32_t **ids, size_t *nids,
		      size_t *cap, struct mt_err *err);
	/* append the text of ids, in place of the byte concatenation */
	int (*decode)(const struct mt_vocab *v, const int32_t *ids, size_t n, char **buf, size_t *len,
		      size_t *cap, struct mt_err *err);
	/* free what the kind added (mt_vocab_free calls it first) */
	void (*free)(struct mt_vocab *v);
};

/* tokenizer.json's normalizer steps and the post-processor's ids around a text (hfjson.h) */
struct mt_hf_norm {
	int op;       /* MT_HF_NFC ... (hfjson.c) */
	char *a, *b;  /* Prepend: a; Replace: a -> b */
};
struct mt_hf_extra {
	struct mt_hf_norm *norm;
	int nnorm;
	int32_t *pre, *post; /* ids before and after the text's */
	int npre, npost;
};

struct mt_vocab_pair {
	uint64_t key;   /* left << 32 | right; 0 marks an empty slot (id pair 0,0 never merges... see vocab.c) */
	int32_t rank;
	int32_t merged;
};

struct mt_vocab {
	enum mt_vocab_kind kind;
	int32_t n;              /* ids are 0..n-1; an id may be a hole (len 0, no bytes) */
	char *arena;            /* token bytes, end to end */
	int64_t *off;           /* n offsets into arena */
	uint32_t *len;          /* n lengths; special tokens have their text here too */
	uint8_t *special;       /* n flags: 1 for special tokens (never produced by merges) */
	int32_t *rank;          /* n ranks (tiktoken: the rank; GPT-2: merge order); -1 if not mergeable */
	int32_t byte_id[256];   /* id of each single byte, -1 if missing */
	/* bytes -> id for mergeable tokens (open addressing, power-of-two size) */
	int32_t *tab;
	uint64_t tab_mask;
	/* (left, right) -> merge */
	struct mt_vocab_pair *pairs;
	uint64_t pair_mask;
	int ignore_merges;      /* look a whole piece up before merging (tiktoken, HF's ignore_merges) */
	int32_t eod;            /* end-of-document id, -1 if the vocabulary has none */
	int64_t vocab_size;     /* what Megatron calls tokenizer.vocab_size (for the dtype rule) */
	char *pattern;          /* default pre-tokenization pattern (pretok.c name or regex), may be NULL */
	int add_prefix_space;   /* HF ByteLevel add_prefix_space */
	struct mt_spm *spm;     /* MT_VOCAB_SPM: the model and Megatron's type (spm.h) */
	struct mt_hf_extra hf;  /* MT_VOCAB_HF: normalizer and post-processor */
	const struct mt_vocab_ops *ops; /* the kind's table, NULL for the plain kinds */
};

int mt_vocab_load_gpt2(struct mt_vocab *v, const char *vocab_json, const char *merges_txt,
		       struct mt_err *err);
int mt_vocab_load_tiktoken(struct mt_vocab *v, const char *rank_file, struct mt_err *err);
/* ops reads the file's parts around the model and pre-tokenizer (hfjson.h's mt_hfjson_ops). */
int mt_vocab_load_hf(struct mt_vocab *v, const char *tokenizer_json, const struct mt_vocab_ops *ops,
		     struct mt_err *err);
/* NullTokenizer: ids 0..vocab_size-1 are taken as they are; eod = vocab_size (Megatron). */
int mt_vocab_init_null(struct mt_vocab *v, int64_t vocab_size, struct mt_err *err);
void mt_vocab_free(struct mt_vocab *v);

/* The hash of the bytes -> id table; bpe.c's piece cache shares it so a piece is
 * hashed once. Eight bytes at a time: FNV's byte loop showed up in profiles. */
static inline uint64_t mt_vocab_hash(const void *p, size_t n)
{
	const unsigned char *s = p;
	uint64_t h = 0x9E3779B97F4A7C15ull ^ ((uint64_t)n * 0xff51afd7ed558ccdull), w;

	while (n >= 8) {
		__builtin_memcpy(&w, s, 8);
		h = (h ^ w) * 0x9FB21C651E98DF25ull;
		h ^= h >> 29;
		s += 8;
		n -= 8;
	}
	if (n) {
		w = 0;
		__builtin_memcpy(&w, s, n);
		h = (h ^ w) * 0x9FB21C651E98DF25ull;
		h ^= h >> 29;
	}
	return h ^ (h >> 32);
}

/* id of a mergeable token with these bytes, or -1. */
int32_t mt_vocab_lookup(const struct mt_vocab *v, const void *bytes, size_t n);
/* The same with the hash already computed (mt_vocab_hash). */
int32_t mt_vocab_lookup_hashed(const struct mt_vocab *v, const void *bytes, size_t n, uint64_t h);
/* id of a token (special ones included) by its text, or -1. */
int32_t mt_vocab_find(const struct mt_vocab *v, const char *text);

static inline const struct mt_vocab_pair *mt_vocab_pair_get(const struct mt_vocab *v, int32_t a,
							     int32_t b)
{
	uint64_t key = ((uint64_t)(uint32_t)a << 32 | (uint32_t)b) + 1;
	uint64_t h = key * 0x9E3779B97F4A7C15ull;
	uint64_t i = (h ^ (h >> 29)) & v->pair_mask;

	for (;;) {
		const struct mt_vocab_pair *p = &v->pairs[i];
		if (p->key == key)
			return p;
		if (p->key == 0)
			return NULL;
		i = (i + 1) & v->pair_mask;
	}
}

/* GPT-2's byte <-> printable character mapping (bytes_to_unicode). */
uint32_t mt_vocab_byte_to_cp(uint8_t b);
/* Byte for a code point of that mapping, or -1. */
int mt_vocab_cp_to_byte(uint32_t cp);

/* Built-in special tokens of OpenAI's encodings, by rank-file name ("cl100k_base"...). */
int mt_vocab_add_special(struct mt_vocab *v, const char *text, int32_t id, struct mt_err *err);

#endif
