/* tblog.h: mt-train's TensorBoard log, under Megatron-LM's tags and flags.
 *
 * Every --tensorboard-log-interval iterations (Megatron's training_log): "learning-rate",
 * "batch-size", "lm loss" (the iteration's loss; not on a skipped step), "loss-scale"
 * (1 without fp16), "grad-norm" (not on a skipped step), each also "<tag> vs samples" at
 * the consumed samples as its step; and mt's own "tokens-per-second" (over the
 * iterations since the last write). With --log-timers-to-tensorboard also
 * "iteration-time" (seconds an iteration since the last write), "throughput" (model
 * TFLOP/s per GPU, Megatron's unit) and "<timer>-time" for each of Megatron's phase
 * timers that ran (base/timers.h: seconds an iteration, the slowest rank's). With --log-memory-to-tensorboard
 * "mem-allocated-bytes", "mem-reserved-bytes" and "mem-max-allocated-bytes" (the
 * backend's allocations: mt allocates once, so the three agree) and mt's
 * "mem-host-rss-bytes" (the process's resident memory). At every evaluation, whatever
 * the interval: "lm loss validation" (and "... vs samples"), with
 * --log-validation-ppl-to-tensorboard "lm loss validation ppl" (exp(min(20, loss)), as
 * Megatron computes it, and "... vs samples").
 *
 * Only the rank that logs opens one (rank 0); the event file itself is base/tfevents.h. */
#ifndef MT_TBLOG_H
#define MT_TBLOG_H

#include <stdint.h>

#include "base/err.h"
#include "base/tfevents.h"

struct mt_tblog_args {
	const char *dir;                /* --tensorboard-dir; NULL: no TensorBoard log */
	int64_t interval;               /* --tensorboard-log-interval (Megatron's default 1) */
	int queue_size;                 /* --tensorboard-queue-size (Megatron's default 1000) */
	int timers;                     /* --log-timers-to-tensorboard */
	int validation_ppl;             /* --log-validation-ppl-to-tensorboard */
	int memory;                     /* --log-memory-to-tensorboard */
};

/* What one iteration gives the log. */
struct mt_tblog_step {
	int64_t iteration;              /* done, counted from 1 */
	int64_t consumed_samples;       /* after it */
	int64_t batch_size, tokens;     /* its global batch and tokens */
	int skipped;                    /* a step skipped for a non-finite loss or gradient */
	double loss, lr, grad_norm, loss_scale;
	double valid_loss;              /* NaN: no evaluation at this iteration */
	double flops;                   /* its model FLOPs, all ranks together */
	int world;                      /* ranks (GPUs) */
	double mem_bytes;               /* the backend's allocations on this rank */
	/* with timers: seconds an iteration in each phase (base/timers.h), the maximum over
	 * the ranks, since the last write (NULL: none this time) */
	const double *timers;
};

struct mt_tblog {
	struct mt_tfevents w;
	struct mt_tblog_args a;
	double t_last, flops, mem_max;
	int64_t it_last, tokens;
};

int mt_tblog_open(struct mt_tblog *tb, const struct mt_tblog_args *a, struct mt_err *err);
int mt_tblog_step(struct mt_tblog *tb, const struct mt_tblog_step *s, struct mt_err *err);
int mt_tblog_close(struct mt_tblog *tb, struct mt_err *err);

#endif
