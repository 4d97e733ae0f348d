/* sample.h: choosing the next token from logits, with Megatron's temperature, top-k and
 * top-p semantics, and the random numbers that drive it.
 *
 * Only the real vocabulary is looked at: the ids a model's vocabulary was padded with
 * are never chosen (Megatron samples over the padded logits and clamps the id; mt does
 * not). The order is Megatron's: greedy (argmax, the lowest id on ties) when top_k is 1
 * or the temperature is 0; otherwise divide the logits by the temperature, then keep
 * the top k (top_k > 1: every logit at least the k-th largest, ties included) or the
 * top-p nucleus (top_p > 0: sort descending, softmax, and drop a token when the
 * cumulative probability of the tokens sorted before it already exceeds top_p, so the
 * most likely token always stays), softmax over what is kept and draw. top_k and top_p
 * together are refused, as Megatron refuses them; top_k at least the vocabulary keeps
 * everything and top_p >= 1 drops nothing.
 *
 * The draw is inverse-CDF in id order with one uniform number u in [0,1). The numbers
 * come from a counter-based generator, so a prompt's tokens depend only on the seed, its
 * index and the step, never on which prompts share its batch:
 *   u = (mix(mix(mix(seed) ^ index) ^ step) >> 11) * 2^-53,
 * where mix is SplitMix64's step (add 0x9E3779B97F4A7C15, then its finalizer). */
#ifndef MT_SAMPLE_H
#define MT_SAMPLE_H

#include <stddef.h>
#include <stdint.h>

#include "base/err.h"

struct mt_sample_params {
	double temperature; /* 0: greedy */
	int top_k;          /* 0: off; 1: greedy */
	double top_p;       /* 0: off */
};

/* Check the ranges (temperature 0..100, top_k >= 0, top_p 0..1, not both); the message
 * names the field as Megatron's /api request names it. */
int mt_sample_check(const struct mt_sample_params *p, struct mt_err *err);

/* The uniform number for (seed, index, step), as described above. */
double mt_sample_uniform(uint64_t seed, uint64_t index, uint64_t step);

struct mt_sampler {
	int64_t vocab;
	double *prob;       /* [vocab] */
	int32_t *order;     /* [vocab], for top-p */
	double *tmp;        /* [vocab], for top-k */
};

int mt_sampler_init(struct mt_sampler *s, int64_t vocab, struct mt_err *err);
void mt_sampler_free(struct mt_sampler *s);

/* The next token from logits[0..vocab) (a padded row may be passed: only the first
 * vocab entries are read). */
int32_t mt_sample(struct mt_sampler *s, const float *logits, const struct mt_sample_params *p, double u);

/* log p(tok) under the softmax of logits[0..vocab) at temperature 1. */
double mt_sample_logprob(const float *logits, int64_t vocab, int32_t tok);

/* The k most likely ids of logits[0..vocab) (the lowest id first on ties) into ids[0..k)
 * and their log-probabilities, computed as mt_sample_logprob computes them, into
 * lp[0..k); k <= vocab. */
void mt_sample_top(const float *logits, int64_t vocab, int k, int32_t *ids, float *lp);

#endif
