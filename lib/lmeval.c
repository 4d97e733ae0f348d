/* lmeval.c: per-row losses and greedy decisions of a trained model on the CPU (see
 * lmeval.h). */
#include "lmeval.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int mt_lmeval_init(struct mt_lmeval *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		   int micro_batch, struct mt_err *err)
{
	memset(e, 0, sizeof(*e));
	e->c = c;
	e->t = t;
	e->w = w;
	e->B = micro_batch;
	e->T = c->seq_length;
	if (micro_batch < 1)
		return mt_err_set(err, MT_EXIT_USAGE, "the micro-batch size must be at least 1");
	e->tok = malloc((size_t)e->B * (size_t)e->T * sizeof(int32_t));
	e->tgt = malloc((size_t)e->B * (size_t)e->T * sizeof(int32_t));
	if (!e->tok || !e->tgt) {
		mt_lmeval_free(e);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	if (mt_gpt_acts_alloc(&e->acts, c, e->B, e->T, 0, err)) {
		mt_lmeval_free(e);
		return -1;
	}
	return 0;
}

void mt_lmeval_free(struct mt_lmeval *e)
{
	mt_gpt_acts_free(&e->acts);
	free(e->tok);
	free(e->tgt);
	e->tok = e->tgt = NULL;
}

static int batch(struct mt_lmeval *e, int64_t n, const int32_t *rows, const uint8_t *mask, struct mt_lmeval_row *out,
		 struct mt_err *err)
{
	int64_t T = e->T, V = e->c->padded_vocab_size, vocab = e->c->vocab_size;
	const float *p;

	for (int64_t b = 0; b < n; b++)
		for (int64_t j = 0; j < T; j++) {
			const int32_t *r = rows + b * (T + 1);
			int32_t y = mask && !mask[b * T + j] ? -1 : r[j + 1];
			if (r[j] >= vocab || y >= vocab)
				return mt_err_set(err, MT_EXIT_DATA, "token id %d is not below the vocabulary size %lld",
						  r[j] >= vocab ? r[j] : y, (long long)vocab);
			e->tok[b * T + j] = r[j] < 0 ? 0 : r[j];
			e->tgt[b * T + j] = y < 0 ? -1 : y;
		}
	/* a last, partial micro-batch runs as a smaller one: the forward pass lays its
	 * activations out by acts.B, in the prefix of each buffer */
	e->acts.B = (int)n;
	mt_gpt_forward_f32(e->c, e->t, e->w, e->tok, e->tgt, &e->acts, NULL);
	e->acts.B = e->B;
	p = mt_gpt_probs_f32(&e->acts); /* the softmax, after the forward pass */
	for (int64_t b = 0; b < n; b++) {
		struct mt_lmeval_row *o = &out[b];
		memset(o, 0, sizeof(*o));
		for (int64_t j = 0; j < T; j++) {
			int32_t y = e->tgt[b * T + j];
			const float *z = p + (b * T + j) * V;
			int64_t best = 0, nv = e->real_vocab ? vocab : V;
			double pt, sum = 1;
			if (y < 0)
				continue;
			if (e->real_vocab) {
				sum = 0;
				for (int64_t v = 0; v < nv; v++)
					sum += z[v];
			}
			pt = z[y] / sum;
			o->loss += -log(pt > 1e-300 ? pt : 1e-300);
			o->count++;
			for (int64_t v = 1; v < nv; v++)
				if (z[v] > z[best])
					best = v;
			o->correct += best == y;
		}
	}
	return 0;
}

int mt_lmeval_score(struct mt_lmeval *e, int64_t n, const int32_t *rows, const uint8_t *mask,
		    struct mt_lmeval_row *out, struct mt_err *err)
{
	for (int64_t i = 0; i < n; i += e->B) {
		int64_t m = n - i < e->B ? n - i : e->B;
		if (batch(e, m, rows + i * (e->T + 1), mask ? mask + i * e->T : NULL, out + i, err))
			return -1;
	}
	return 0;
}
