/* dp.h: data parallelism over host buffers: the gradient of every micro-batch of every
 * rank summed in one fixed order, and the sharded optimizer (ZeRO-1).
 *
 * The flat parameter buffer is cut into one shard per data-parallel rank along whole
 * parameters of the table (params.h), balanced by size. For each micro-batch, every rank
 * sends each shard of its fresh gradient to the shard's owner (an all-to-all), and the
 * owner adds the pieces in rank order to its accumulator. Rank r's k-th micro-batch is
 * micro-batch k*dp + r of the global batch (Megatron's sampler), so the owner adds the
 * global batch's micro-batch gradients in exactly the order one process adds them: with
 * a fixed thread count, DP=N gives the bit-identical gradient of DP=1, and so the same
 * weights (the ordered reduce-scatter costs one exchange per micro-batch instead of one
 * per step; on the CPU the arithmetic dominates). Then either the shards are gathered
 * into every rank's full gradient (replicated optimizer) or each rank updates only its
 * shard's weights and AdamW moments and the weights are gathered (ZeRO-1,
 * --use-distributed-optimizer); the global gradient norm is summed from per-parameter
 * sums of squares in table order, as optim.c sums them, so clipping is bit-exact too.
 * A GPU backend keeps its buffers on the device and does the same with NCCL (bucketed,
 * overlapped with the backward pass) without this file. */
#ifndef MT_DP_H
#define MT_DP_H

#include <stdint.h>

#include "parallel/dist.h"
#include "base/err.h"
#include "model/optim.h"
#include "model/params.h"
#include "model/tp.h"

struct mt_dp {
	struct mt_dist *d;
	const struct mt_params *t;
	int zero;               /* ZeRO-1: moments only for the shard */
	int n;                  /* data-parallel ranks */
	int *pfirst;            /* n + 1 entries: rank r owns parameters [pfirst[r], pfirst[r+1]) */
	int64_t *cnt, *dsp;     /* floats of each rank's shard, and where it starts */
	int64_t *pcnt, *pdsp;   /* parameters of each rank's shard */
	int64_t lo, hi;         /* this rank's shard */
	float *acc;             /* its accumulated gradient */
	float *recv;            /* n pieces of it, one from each rank */
	float *m, *v;           /* with zero: its AdamW moments */
	double *psq;            /* per-parameter sums of squares */
	/* tensor parallelism (NULL: none): d is then the data-parallel group of this
	 * tensor-parallel rank, t its shard's table, and ZeRO-1's norm and finiteness check
	 * are completed over tp (the caller sets it after mt_dp_init) */
	const struct mt_tp *tp;
	/* the caller's phase timers (base/timers.h; NULL: none): the exchanges add to
	 * all-grads-sync, ZeRO's step to optimizer-clip-main-grad, optimizer-inner-step and
	 * params-all-gather */
	double *timers;
};

int mt_dp_init(struct mt_dp *p, struct mt_dist *d, const struct mt_params *t, int zero, struct mt_err *err);
void mt_dp_free(struct mt_dp *p);
/* Floats held by this rank for the exchange and (zero) the moments. */
int64_t mt_dp_bytes(const struct mt_dp *p);
/* Start a step: the accumulator is zeroed. */
void mt_dp_begin(struct mt_dp *p);
/* Add one micro-batch gradient g (t->total floats) of every rank, in rank order. */
int mt_dp_accumulate(struct mt_dp *p, const float *g, int64_t step, struct mt_err *err);
/* Replicated optimizer: the accumulated gradient, whole, into g on every rank. */
int mt_dp_allgather_grads(struct mt_dp *p, float *g, int64_t step, struct mt_err *err);
/* ZeRO-1: scale the shard's gradient, check finiteness and take the global norm (before
 * clipping) on every rank, clip to max_norm (0: none), and unless not finite or o is NULL
 * (a non-finite loss), one AdamW step on the shard of w and gather w whole on every rank.
 * In two halves: mt_dp_zero_clip (up to the clipping) reads and changes the gradient
 * only; mt_dp_zero_update (the step and the gather) is the first to change the weights
 * and moments, so that the trainer can wait there for a background copy of them
 * (train.c, --async-save). */
int mt_dp_zero_clip(struct mt_dp *p, float scale, double max_norm, double *norm, int *nonfinite, int64_t step,
		    struct mt_err *err);
int mt_dp_zero_update(struct mt_dp *p, float *w, struct mt_adamw *o, double lr, int64_t step, struct mt_err *err);
int mt_dp_zero_step(struct mt_dp *p, float *w, struct mt_adamw *o, double lr, float scale, double max_norm,
		    double *norm, int *nonfinite, int64_t step, struct mt_err *err);
/* ZeRO-1: the moments from whole buffers (NULL: zero), and back whole on rank 0. */
void mt_dp_set_moments(struct mt_dp *p, const float *m, const float *v);
int mt_dp_gather_moments(struct mt_dp *p, float *m, float *v, int64_t step, struct mt_err *err);

#endif
