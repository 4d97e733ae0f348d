/* estimate.h: what a training run will need, worked out without running it (mt-train
 * --dry-run): the rank layout, parameters, memory per GPU and FLOPs per step, for any
 * world size, on a laptop.
 *
 * Memory per GPU is given for the first pipeline stage (it holds the embeddings and,
 * under the 1F1B schedule, the activations of up to pp micro-batches) and, with pipeline
 * parallelism, for every stage: its parameters from its stage table (the last stage's
 * tied copy of the embedding included), the activations of the micro-batches its
 * schedule keeps in flight (counted from the schedule's own action list: 1F1B p - r on
 * stage r; interleaved Megatron's warm-up + 1 virtual micro-batches of L/(p v) layers;
 * ZB-H1 p on every stage, each held until its weight pass, as Qi et al. count it), the
 * last stage's logits, the bubble fraction of the schedule and the bytes each stage sends
 * to its neighbours a step (activations and gradients of [s/t with SP, b, h] in the
 * training dtype).
 * Its parameters are counted from the split table of tensor-parallel rank 0
 * (mt_params_build_tp): split weights 1/t each, replicas (norms, row-parallel biases,
 * position embeddings) whole; the first stage holds the embeddings and its L/pp layers,
 * and with one stage also the final norm and the output layer. Weights in the training
 * dtype, gradients in fp32 (Megatron accumulates them in fp32), the optimizer's fp32
 * master copy (16-bit training only) and two AdamW moments, divided by the data-parallel
 * size with the distributed optimizer. Activations per layer and micro-batch by Korthikanti
 * et al. 2022 (mt_estimate_act_layer; with flash attention without its s x s term), in
 * bytes of 16-bit activations, twice that in fp32
 * (every activation 4 bytes instead of 2), times L/pp layers and the micro-batches in
 * flight; plus the last stage's fp32 logits s*b*v/t*4 (the CUDA backend: one chunk of
 * them in the training dtype, cuda_backend). FLOPs per step are
 * mt_config_flops_per_token x seq x global batch. Nothing here allocates weights. */
#ifndef MT_ESTIMATE_H
#define MT_ESTIMATE_H

#include <stdint.h>
#include <stdio.h>

#include "model/config.h"
#include "model/params.h"
#include "base/err.h"

/* Activation recomputation (Megatron's --recompute-granularity and --recompute-activations) */
enum mt_recompute {
	MT_RECOMPUTE_NONE,      /* keep every activation (Megatron's default) */
	MT_RECOMPUTE_SELECTIVE, /* recompute attention's softmax and dropout: the 5as/h term goes */
	MT_RECOMPUTE_FULL,      /* keep only each layer's input */
};

struct mt_estimate_args {
	const struct mt_config *cfg;
	int world, tp, pp, dp;
	int gpus_per_node;
	int64_t micro_batch_size, global_batch_size;
	int64_t rampup[3];              /* start, increment, samples; start 0: none */
	int param_bytes;                /* 2 for bf16/fp16, 4 for fp32 */
	int distributed_optimizer;
	const char *dtype;
	int sequence_parallel;          /* --sequence-parallel; ignored at tp 1, as Megatron does */
	enum mt_recompute recompute;
	/* 1: a run of mt's CUDA backend: the attention keeps no s x s scores (flash-style), so
	 * without full recomputation the activations are those of selective recompute, the
	 * 5as/h term gone; with sequence parallelism the two norms' outputs are kept gathered
	 * (4 s b h (t-1)/t bytes a layer more); the logits are made in chunks of at most
	 * MT_CUDA_LOGITS_BYTES (backend.h) in the training dtype, one buffer for every micro-batch
	 * (the head's gradient is made in the forward pass) */
	int cuda_backend;
	/* bytes a GPU holds beyond the model's tensors (the CUDA context and libraries, NCCL's
	 * buffers), added to every stage's total; 0: none counted */
	double runtime_bytes;
	/* pipeline parallelism: the layers' split (pipeline.size = pp; 0: even, one chunk),
	 * the schedule (enum mt_pp_kind) and its micro-batch group (0: pp) */
	struct mt_pp_split pipeline;
	int pp_schedule, pp_group;
};

/* One pipeline stage's share (mt_estimate's stages[]). */
struct mt_estimate_stage {
	int layer_lo, layer_hi;         /* its first layer and one past its last (chunks between) */
	int layers;                     /* how many it holds */
	char chunks[64];                /* its layers, chunk by chunk: "0..2,48..50" */
	int64_t params;
	double weights, grads, optimizer, activations, logits, total; /* bytes */
	double inflight;                /* micro-batches of the stage's layers in flight at its peak */
	double p2p_bytes;               /* sent to its neighbours a step */
};

struct mt_estimate {
	int64_t params, params_per_gpu;
	double weights, grads, optimizer, activations, logits, runtime, total; /* bytes per GPU */
	double act_layer;               /* bytes of one layer and micro-batch, in the training dtype */
	int64_t act_layers;             /* layers on the first stage */
	double act_inflight;            /* micro-batches of them in flight at the peak (interleaved:
					 * chunks of different micro-batches, in units of the stage) */
	const char *act_formula;        /* which case of Korthikanti et al., and its formula */
	double flops_per_step, flops_per_step_per_gpu;
	int64_t grad_accum;
	int64_t ramp_increments, ramp_samples_per_increment;
	/* pipeline parallelism (nstages = pp) */
	struct mt_estimate_stage *stages;
	int nstages, busiest;
	double bubble;                  /* over the ideal step (the papers' unit) */
};

/* Korthikanti et al. 2022's activation bytes of one transformer layer for one micro-batch
 * at 16 bits (sequence s, micro-batch b, hidden h, heads a, tensor-parallel size t):
 *   no parallelism                          s b h (34 + 5 a s / h)
 *   tensor parallel                         s b h (10 + 24/t + 5 a s / (h t))
 *   tensor + sequence parallel              s b h (34/t + 5 a s / (h t))
 *   selective recompute, sequence parallel  s b h 34/t   (without: s b h (10 + 24/t))
 *   full recompute                          2 s b h      (sequence parallel: 2 s b h / t,
 *                                                         the layer input being split)
 * sequence_parallel counts only when t > 1. *formula, when not NULL, names the case. */
double mt_estimate_act_layer(double s, double b, double h, double a, int t, int sequence_parallel,
			     enum mt_recompute recompute, const char **formula);
/* Check the batch arithmetic (the global batch and every rampup batch a multiple of
 * micro x dp) and the model's split (mt_params_build_tp's checks; cfg->padded_vocab_size
 * padded for tp) and fill e. */
int mt_estimate(const struct mt_estimate_args *a, struct mt_estimate *e, struct mt_err *err);
void mt_estimate_free(struct mt_estimate *e);
/* Megatron's rampup: the global batch size once `consumed` samples are done. */
int64_t mt_rampup_batch(const int64_t rampup[3], int64_t global_batch_size, int64_t consumed);
/* Megatron's iteration count for --train-samples with a rampup: the ramp's iterations at
 * their growing batch sizes, then whole global batches (a partial last one dropped). */
int64_t mt_rampup_train_iters(const int64_t rampup[3], int64_t global_batch_size, int64_t train_samples);
/* The report --dry-run prints (stdout). */
void mt_estimate_print(FILE *out, const struct mt_estimate_args *a, const struct mt_estimate *e);

#endif
