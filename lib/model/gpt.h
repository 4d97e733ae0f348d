/* gpt.h: the GPT model's forward and backward pass on the CPU, as the reference
 * backend: fp32 for training, and the same code in fp64 for gradient checks.
 *
 * One micro-batch of B sequences of T tokens. The layer is Megatron's pre-norm block:
 * x += proj(attention(norm1(x))); x += fc2(act(fc1(norm2(x)))); with learned or rotary
 * positions, LayerNorm or RMSNorm, GELU (tanh) or SwiGLU, biases or not, grouped-query
 * attention, and an output layer tied to the word embeddings or not. The loss is the
 * mean cross-entropy over the targets that are not -1 (Megatron's loss mask), over the
 * padded vocabulary as Megatron computes it. Matmuls go to OpenBLAS. Parameters and
 * gradients are flat buffers laid out by params.h.
 *
 * With tensor parallelism (acts.tp, tp.h) the same passes run on one rank's shard of
 * every split parameter (params.h): column-parallel QKV and fc1 with the input whole,
 * row-parallel projection and fc2 whose partial sums are reduced before the bias, the
 * vocabulary-parallel embedding and output layer, and the cross-entropy over the split
 * vocabulary; with sequence parallelism the norms and residuals run on 1/t of the rows,
 * gathered before the column-parallel layers and reduce-scattered after the
 * row-parallel ones. This file names those points; tp's operations move the data. */
#ifndef MT_GPT_H
#define MT_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "model/params.h"
#include "model/tp.h"

/* Activations kept for the backward pass, for one precision. */
struct mt_gpt_acts {
	int B, T;
	const struct mt_tp *tp;     /* tensor parallelism (tp.h); NULL: one rank */
	double label_smoothing;     /* Megatron's --label-smoothing (0: none) */
	int failed;                 /* a split point's collective failed in the last pass:
				     * its loss is NaN and its gradient unusable */
	size_t bytes;
	void *mem;          /* one allocation */
	void *p[32];        /* views into it (gpt_impl.h names them) */
};

int mt_gpt_acts_alloc(struct mt_gpt_acts *a, const struct mt_config *c, int B, int T, int fp64,
		      struct mt_err *err);
/* The same for rank tp->rank of a tensor-parallel group (tp NULL: one rank; kept in
 * a->tp for the passes); label_smoothing, set before the call, is kept. */
int mt_gpt_acts_alloc_tp(struct mt_gpt_acts *a, const struct mt_config *c, const struct mt_tp *tp, int B, int T,
			 int fp64, struct mt_err *err);
void mt_gpt_acts_free(struct mt_gpt_acts *a);

/* Forward: returns the mean loss over the counted targets (*ntargets of them). */
double mt_gpt_forward_f32(const struct mt_config *c, const struct mt_params *t, const float *w,
			  const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a,
			  int64_t *ntargets);
/* Backward after forward: adds d(mean loss)/dw to g. */
void mt_gpt_backward_f32(const struct mt_config *c, const struct mt_params *t, const float *w,
			 const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, float *g);

double mt_gpt_forward_f64(const struct mt_config *c, const struct mt_params *t, const double *w,
			  const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a,
			  int64_t *ntargets);
void mt_gpt_backward_f64(const struct mt_config *c, const struct mt_params *t, const double *w,
			 const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, double *g);

/* After a forward pass: the softmax over the padded vocabulary, [B*T][padded vocab] (the
 * forward pass turns the logits into probabilities in place, for the backward pass). */
const float *mt_gpt_probs_f32(const struct mt_gpt_acts *a);

/* The forward pass's LayerNorm (rms 0) or RMSNorm over N rows of h, for other fp32 code
 * that must compute it the same way (infer_cpu.c); stats receives each row's mean (0 for
 * RMSNorm) and 1/std, 2N floats. b may be NULL. */
void mt_gpt_norm_f32(float *out, float *stats, const float *x, const float *w, const float *b, int64_t N, int64_t h,
		     int rms, double eps);

#endif
