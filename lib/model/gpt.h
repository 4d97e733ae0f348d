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
 * row-parallel ones. This file names those points; tp's operations move the data.
 *
 * With pipeline parallelism each rank runs a stage's part of the model (struct
 * mt_gpt_stage): a range of layers from an input activation (or the tokens) to an output
 * activation (or the loss), and back from the output's gradient to the input's (or the
 * embeddings' gradient). The activations of one micro-batch in flight live in one struct
 * mt_gpt_acts, so a stage keeps several. For zero-bubble schedules the backward pass
 * splits in two: the input-gradient pass (B) keeps the output gradients of the linear
 * layers, and the weight-gradient pass (W) turns them into the weights' gradients later.
 * The whole model is the stage {0, L, 1, 1}, through the same code. */
#ifndef MT_GPT_H
#define MT_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "model/config.h"
#include "base/err.h"
#include "model/params.h"
#include "model/tp.h"

/* A part of the model: layers [l0, l1), beginning with the embeddings (first) and
 * ending with the final norm, the output layer and the loss (last). */
struct mt_gpt_stage {
	int l0, l1, first, last;
};

/* Activations kept for the backward pass, for one precision. */
struct mt_gpt_acts {
	int B, T;
	struct mt_gpt_stage st;     /* the part of the model they are for */
	int split_backward;         /* room for the B pass's output gradients (the W pass's input) */
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
/* For a stage st of the model (l1 - l0 layers; logits only when st->last) at rank tp (NULL:
 * one rank); split_backward 1 adds room for the B pass's output gradients, which the W
 * pass reads. */
int mt_gpt_acts_alloc_stage(struct mt_gpt_acts *a, const struct mt_config *c, const struct mt_tp *tp,
			    const struct mt_gpt_stage *st, int split_backward, int B, int T, int fp64,
			    struct mt_err *err);
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

/* The stage passes, for a->st (acts allocated for it; t holds the stage's parameters
 * with their global layer numbers). Forward: from the tokens (first) or `in`, the
 * activation [rows][hidden] entering layer l0, to the mean loss (last, *ntargets counted
 * targets) or `out`, the activation leaving layer l1 - 1 (then returns 0). The rows are
 * B*T, or this rank's B*T/t under sequence parallelism. tokens are read by the first
 * stage, targets by the last. */
double mt_gpt_stage_forward_f32(const struct mt_config *c, const struct mt_params *t, const float *w,
				const int32_t *tokens, const int32_t *targets, const float *in, float *out,
				struct mt_gpt_acts *a, int64_t *ntargets);
/* Backward after the stage's forward: from d(mean loss) (last) or dout, the gradient of
 * its output, adds the parameters' gradients to g and writes the gradient of its input
 * into din (not first; the first stage adds the embeddings' gradients instead). split 1:
 * the B pass only (the input's gradient, norms and replicated biases), leaving the
 * linear weights' gradients to mt_gpt_stage_weight_f32. a->failed on a failed split point. */
void mt_gpt_stage_backward_f32(const struct mt_config *c, const struct mt_params *t, const float *w,
			       const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, const float *dout,
			       float *din, float *g, int split);
/* The W pass after a split backward pass: the linear layers' weight (and split bias)
 * gradients added to g. */
void mt_gpt_stage_weight_f32(const struct mt_config *c, const struct mt_params *t, const float *w,
			     struct mt_gpt_acts *a, float *g);
double mt_gpt_stage_forward_f64(const struct mt_config *c, const struct mt_params *t, const double *w,
				const int32_t *tokens, const int32_t *targets, const double *in, double *out,
				struct mt_gpt_acts *a, int64_t *ntargets);
void mt_gpt_stage_backward_f64(const struct mt_config *c, const struct mt_params *t, const double *w,
			       const int32_t *tokens, const int32_t *targets, struct mt_gpt_acts *a, const double *dout,
			       double *din, double *g, int split);
void mt_gpt_stage_weight_f64(const struct mt_config *c, const struct mt_params *t, const double *w,
			     struct mt_gpt_acts *a, double *g);

/* After a forward pass: the softmax over the padded vocabulary, [B*T][padded vocab] (the
 * forward pass turns the logits into probabilities in place, for the backward pass). */
const float *mt_gpt_probs_f32(const struct mt_gpt_acts *a);

/* The forward pass's LayerNorm (rms 0) or RMSNorm over N rows of h, for other fp32 code
 * that must compute it the same way (infer_cpu.c); stats receives each row's mean (0 for
 * RMSNorm) and 1/std, 2N floats. b may be NULL. */
void mt_gpt_norm_f32(float *out, float *stats, const float *x, const float *w, const float *b, int64_t N, int64_t h,
		     int rms, double eps);

#endif
