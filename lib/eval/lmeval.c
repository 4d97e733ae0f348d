/* lmeval.c: per-row losses and greedy decisions of a trained model, through a
 * backend's score_rows (see lmeval.h). */
#include "eval/lmeval.h"

#include <stdlib.h>
#include <string.h>

int mt_lmeval_init(struct mt_lmeval *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		   int micro_batch, const struct mt_backend_ops *ops, const struct mt_backend_opts *opt,
		   struct mt_err *err)
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
	e->rows = malloc((size_t)e->B * sizeof(*e->rows));
	if (!e->tok || !e->tgt || !e->rows) {
		mt_lmeval_free(e);
		return mt_err_set(err, MT_EXIT_IO, "out of memory");
	}
	e->be.ops = ops ? ops : &mt_backend_cpu;
	if (opt)
		e->be.opt = *opt;
	e->be.opt.inference = 1;
	e->be_live = 1;
	if (e->be.ops->init(&e->be, c, t, micro_batch, err) || e->be.ops->load_state(&e->be, w, NULL, NULL, err)) {
		mt_lmeval_free(e);
		return -1;
	}
	return 0;
}

void mt_lmeval_free(struct mt_lmeval *e)
{
	if (e->be_live)
		e->be.ops->free(&e->be);
	e->be_live = 0;
	free(e->tok);
	free(e->tgt);
	free(e->rows);
	e->tok = e->tgt = NULL;
	e->rows = NULL;
}

static int batch(struct mt_lmeval *e, int64_t n, const int32_t *rows, const uint8_t *mask, struct mt_lmeval_row *out,
		 struct mt_err *err)
{
	int64_t T = e->T, vocab = e->c->vocab_size;

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
	if (e->be.ops->score_rows(&e->be, n, e->tok, e->tgt, e->real_vocab, e->rows, err))
		return -1;
	for (int64_t b = 0; b < n; b++) {
		out[b].loss = e->rows[b].loss;
		out[b].count = e->rows[b].count;
		out[b].correct = e->rows[b].correct;
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
