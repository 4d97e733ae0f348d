/* bpe.h: byte-level BPE encoding and decoding over a struct mt_vocab.
 *
 * Text is cut into pieces by the pre-tokenization pattern (pretok.h); each piece is
 * looked up whole (tiktoken's shortcut, when the vocabulary asks for it), then in a
 * per-encoder cache, and otherwise merged: start from single bytes and repeatedly merge
 * the adjacent pair with the lowest rank, the leftmost on ties. Short pieces use a
 * linear scan, long ones (runs of spaces, say) a heap, so a piece of n bytes costs
 * O(n log n) at worst. One struct mt_bpe per thread; the vocabulary and the compiled
 * pattern are shared read-only. The NullTokenizer (ids written as integers) lives here
 * too, and a vocabulary whose kind encodes itself (SentencePiece, MT_VOCAB_SPM) is passed
 * through to its table (vocab.h's struct mt_vocab_ops, filled by spm.c), so
 * callers see one encode and one decode function for every tokenizer type. */
#ifndef MT_BPE_H
#define MT_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"
#include "text/pretok.h"
#include "text/vocab.h"

/* A growable array of token ids. */
struct mt_ids {
	int32_t *a;
	size_t n, cap;
};

int mt_ids_reserve(struct mt_ids *ids, size_t more);
static inline int mt_ids_push(struct mt_ids *ids, int32_t id)
{
	if (ids->n == ids->cap && mt_ids_reserve(ids, 1))
		return -1;
	ids->a[ids->n++] = id;
	return 0;
}
void mt_ids_free(struct mt_ids *ids);

struct mt_bpe_cache_slot;
struct mt_bpe_heap_ent;

struct mt_bpe {
	const struct mt_vocab *v;
	const struct mt_pretok *p;
	struct mt_pretok_iter it;
	struct mt_bpe_cache_slot *cache;
	/* scratch for the merge loop */
	int32_t *id, *rank, *merged, *next, *prev;
	uint32_t *ver;
	struct mt_bpe_heap_ent *heap;
	size_t cap;
	int32_t *added;       /* Hugging Face added tokens matched in the text, longest first */
	int nadded;
	uint8_t added_first[256]; /* 1 where some added token starts with that byte */
	char *prefixed;       /* text with a leading space (add_prefix_space) */
	size_t prefixed_cap;
};

int mt_bpe_init(struct mt_bpe *b, const struct mt_vocab *v, const struct mt_pretok *p,
		struct mt_err *err);
void mt_bpe_free(struct mt_bpe *b);

/* Append the ids of text[0..n) (valid UTF-8) to *out. For GPT-2 and tiktoken files,
 * special tokens in the text are encoded as ordinary text, as tiktoken's encode_ordinary
 * does; for tokenizer.json, added tokens found in the text become their ids, as the
 * Hugging Face tokenizer does (no BOS/EOS template is applied). */
int mt_bpe_encode(struct mt_bpe *b, const char *text, size_t n, struct mt_ids *out,
		  struct mt_err *err);

/* Append the bytes of ids to *buf (grown with realloc); special tokens give their text.
 * An id outside the vocabulary is an error. */
int mt_bpe_decode(const struct mt_vocab *v, const int32_t *ids, size_t n, char **buf,
		  size_t *len, size_t *cap, struct mt_err *err);

#endif
