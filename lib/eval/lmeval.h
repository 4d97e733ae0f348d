/* lmeval.h: scoring rows of tokens with a trained model, for evaluation: per row the
 * summed cross-entropy of the counted targets and whether the model's greedy choice
 * is right at every counted target.
 *
 * A row is seq_length+1 token ids: inputs row[0..L), targets row[1..L]; a mask of L
 * flags says which targets count (NULL: every target >= 0). Ids below 0 are padding:
 * as inputs they become 0 and as targets they never count (Megatron's GPTDataset and
 * mt-train do the same). Rows go through the model a micro-batch at a time, so memory
 * is that of one micro-batch of activations whatever the number of rows.
 *
 * The arithmetic is a backend's (backend.h, score_rows, in inference mode: weights and
 * one micro-batch of forward activations only). On the CPU: one forward pass, then the
 * softmax it leaves in the logits buffer; the cross-entropy is -log p(target) of that
 * softmax, summed in double, the same terms as mt_gpt_forward_f32's mean loss. On the
 * GPU: the CUDA backend's forward pass and kernels/classifier_score.cu, fp32 unless the
 * caller asks for bf16. */
#ifndef MT_LMEVAL_H
#define MT_LMEVAL_H

#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "backend/backend.h"
#include "model/params.h"

struct mt_lmeval {
	const struct mt_config *c;
	const struct mt_params *t;
	const float *w;
	int B, T;
	/* 0: the softmax over the padded vocabulary, as training's loss (Megatron's); 1: over
	 * the tokenizer's ids only (renormalized; argmax among them), as an exported model
	 * scores and as the text tasks report: an imported model's padding rows repeat a real
	 * row and would otherwise take probability from it. Set by the caller. */
	int real_vocab;
	struct mt_backend be;
	int be_live;
	int32_t *tok, *tgt;
	struct mt_score_row *rows;
};

struct mt_lmeval_row {
	double loss;       /* sum of -log p(target) over the counted targets */
	int64_t count;     /* counted targets */
	int64_t correct;   /* counted targets where the argmax is the target */
};

/* micro_batch rows at a time, T = c->seq_length, on the backend ops (NULL: the CPU's)
 * with the options opt (NULL: defaults; inference is set here). w is borrowed on the
 * CPU: it must outlive e. */
int mt_lmeval_init(struct mt_lmeval *e, const struct mt_config *c, const struct mt_params *t, const float *w,
		   int micro_batch, const struct mt_backend_ops *ops, const struct mt_backend_opts *opt,
		   struct mt_err *err);
void mt_lmeval_free(struct mt_lmeval *e);

/* Score n rows (any n: they are taken micro_batch at a time) of T+1 ids each; mask is
 * n*T flags or NULL. Errors: an id not below the vocabulary size (MT_EXIT_DATA). */
int mt_lmeval_score(struct mt_lmeval *e, int64_t n, const int32_t *rows, const uint8_t *mask,
		    struct mt_lmeval_row *out, struct mt_err *err);

#endif
