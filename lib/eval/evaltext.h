/* evaltext.h: Megatron's zero-shot text tasks end to end, from a file's text to the
 * figures: WikiText-style perplexity (detokenize, count words, tokenize, cut windows,
 * score, adjust) and LAMBADA-style cloze accuracy (parse JSON lines, build the strict and
 * non-strict rows, score, count exact answers). The rules are in zeroshot.h and detok.h;
 * the scoring is lmeval.h's, so the same code runs on whatever backend scores the rows.
 * Reading files, hashing them and printing results are the tool's. */
#ifndef MT_EVALTEXT_H
#define MT_EVALTEXT_H

#include <stddef.h>
#include <stdint.h>

#include "text/bpe.h"
#include "text/detok.h"
#include "base/err.h"
#include "eval/lmeval.h"

struct mt_evaltext {
	struct mt_lmeval *ev;      /* rows of ev->T + 1 tokens, ev->B at a time */
	struct mt_bpe *bpe;
	int32_t eod;               /* the padding id */
	/* progress, after each micro-batch (may be NULL): tokens done and in all */
	void (*progress)(void *ctx, int64_t done, int64_t total);
	void *ctx;
};

struct mt_wikitext_result {
	double token_loss;         /* mean -log p per target token */
	double token_ppl;          /* exp(min(20, token_loss)) */
	double ratio;              /* (tokens - 1) / (words - 1); NaN with one word */
	double word_ppl;           /* exp(min(20, token_loss x ratio)): Megatron's adjusted ppl */
	int64_t targets, words, windows;
};

/* text[0..n) as read from `name` (for messages); stride: Megatron's --overlapping-eval,
 * 1..seq_length. */
int mt_evaltext_wikitext(const struct mt_evaltext *x, const char *text, size_t n, const char *name,
			 enum mt_detok detok, int64_t stride, struct mt_wikitext_result *r, struct mt_err *err);

struct mt_lambada_result {
	int64_t examples, correct, correct_strict;
	int64_t targets;           /* answer tokens scored, both variants */
	int64_t truncated;         /* rows that lost context from the left */
};

/* JSON lines {"text": ...} (blank lines skipped); errors name "name:line". */
int mt_evaltext_lambada(const struct mt_evaltext *x, const char *text, size_t n, const char *name,
			struct mt_lambada_result *r, struct mt_err *err);

#endif
