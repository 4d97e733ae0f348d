/* infer.c: what every inference engine checks of a request before it computes (infer.h),
 * so the CPU and CUDA engines refuse the same requests with the same messages. */
#include "infer/infer.h"

int mt_infer_setup(struct mt_infer *e, const struct mt_config *c, int max_batch, int max_len, int batch_limit,
		    struct mt_err *err)
{
	if (max_batch < 1 || max_len < 1 || max_batch > batch_limit)
		return mt_err_set(err, MT_EXIT_USAGE, "inference engine: batch %d (1..%d) and length %d must be positive",
				  max_batch, batch_limit, max_len);
	if (c->position_embedding_type == MT_POS_LEARNED && max_len > c->max_position_embeddings)
		return mt_err_set(err, MT_EXIT_USAGE, "inference engine: length %d exceeds the model's %d learned positions",
				  max_len, c->max_position_embeddings);
	e->max_batch = max_batch;
	e->max_len = max_len;
	e->vocab = c->vocab_size;
	e->padded_vocab = c->padded_vocab_size;
	return 0;
}

static int check_slot(const struct mt_infer *e, int slot, struct mt_err *err)
{
	if (slot < 0 || slot >= e->max_batch)
		return mt_err_set(err, MT_EXIT_USAGE, "inference engine: slot %d outside 0..%d", slot, e->max_batch - 1);
	return 0;
}

static int check_tok(const struct mt_infer *e, int32_t tok, struct mt_err *err)
{
	if (tok < 0 || tok >= e->padded_vocab)
		return mt_err_set(err, MT_EXIT_DATA, "inference engine: token id %d outside the vocabulary (0..%lld)", (int)tok,
				  (long long)e->padded_vocab - 1);
	return 0;
}

int mt_infer_check_prefill(const struct mt_infer *e, int n, const int *slots, const int32_t *const *tokens,
			   const int *lens, int want_lp, struct mt_err *err)
{
	if (n < 1 || n > e->max_batch)
		return mt_err_set(err, MT_EXIT_USAGE, "inference engine: %d prompts in one prefill (1..%d)", n, e->max_batch);
	for (int k = 0; k < n; k++) {
		if (check_slot(e, slots ? slots[k] : k, err))
			return -1;
		if (lens[k] < 1 || lens[k] > e->max_len)
			return mt_err_set(err, MT_EXIT_USAGE, "inference engine: prompt of %d tokens (1..%d fit)", lens[k],
					  e->max_len);
		for (int p = 0; p < lens[k]; p++) {
			if (check_tok(e, tokens[k][p], err))
				return -1;
			if (want_lp && p > 0 && tokens[k][p] >= e->vocab)
				return mt_err_set(err, MT_EXIT_DATA,
						  "inference engine: token id %d has no log-probability (vocabulary %lld)",
						  (int)tokens[k][p], (long long)e->vocab);
		}
	}
	return 0;
}

int mt_infer_check_decode(const struct mt_infer *e, int n, const int *slots, const int32_t *tokens, const int *pos,
			  struct mt_err *err)
{
	if (n < 1 || n > e->max_batch)
		return mt_err_set(err, MT_EXIT_USAGE, "inference engine: %d rows in one decode step (1..%d)", n, e->max_batch);
	for (int k = 0; k < n; k++) {
		int slot = slots ? slots[k] : k;
		if (check_slot(e, slot, err) || check_tok(e, tokens[k], err))
			return -1;
		if (pos[slot] >= e->max_len)
			return mt_err_set(err, MT_EXIT_USAGE, "inference engine: slot %d is full (%d tokens)", slot, e->max_len);
	}
	return 0;
}
