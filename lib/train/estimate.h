/* estimate.h: what a training run will need, worked out without running it (mt-train
 * --dry-run): the rank layout, parameters, memory per GPU and FLOPs per step, for any
 * world size, on a laptop.
 *
 * Memory per GPU is for the busiest rank: the first pipeline stage (it holds the
 * embeddings and, under the 1F1B schedule, the activations of up to pp micro-batches).
 * Weights in the training dtype, gradients in fp32 (Megatron accumulates them in fp32),
 * the optimizer's fp32 master copy (16-bit training only) and two AdamW moments, divided
 * by the data-parallel size with the distributed optimizer; activations by Korthikanti et
 * al. 2022 (no recomputation, no sequence parallelism): s*b*h*(10 + 24/t + 5*a*s/(h*t))
 * bytes per layer and micro-batch at 16 bits (twice that in fp32), plus the last stage's
 * fp32 logits s*b*v/t*4. FLOPs per step are mt_config_flops_per_token x seq x global batch.
 * Nothing here allocates a model. */
#ifndef MT_ESTIMATE_H
#define MT_ESTIMATE_H

#include <stdint.h>
#include <stdio.h>

#include "model/config.h"
#include "base/err.h"

struct mt_estimate_args {
	const struct mt_config *cfg;
	int world, tp, pp, dp;
	int gpus_per_node;
	int64_t micro_batch_size, global_batch_size;
	int64_t rampup[3];              /* start, increment, samples; start 0: none */
	int param_bytes;                /* 2 for bf16/fp16, 4 for fp32 */
	int distributed_optimizer;
	const char *dtype;
};

struct mt_estimate {
	int64_t params, params_per_gpu;
	double weights, grads, optimizer, activations, logits, total; /* bytes per GPU */
	double flops_per_step, flops_per_step_per_gpu;
	int64_t grad_accum;
	int64_t ramp_increments, ramp_samples_per_increment;
};

/* Check the batch arithmetic (the global batch and every rampup batch a multiple of
 * micro x dp) and fill e. */
int mt_estimate(const struct mt_estimate_args *a, struct mt_estimate *e, struct mt_err *err);
/* Megatron's rampup: the global batch size once `consumed` samples are done. */
int64_t mt_rampup_batch(const int64_t rampup[3], int64_t global_batch_size, int64_t consumed);
/* Megatron's iteration count for --train-samples with a rampup: the ramp's iterations at
 * their growing batch sizes, then whole global batches (a partial last one dropped). */
int64_t mt_rampup_train_iters(const int64_t rampup[3], int64_t global_batch_size, int64_t train_samples);
/* The report --dry-run prints (stdout). */
void mt_estimate_print(FILE *out, const struct mt_estimate_args *a, const struct mt_estimate *e);

#endif
