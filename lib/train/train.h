/* train.h: mt-train's training loop over a backend (CPU or CUDA).
 *
 * Iterations of --global-batch-size samples in micro-batches of --micro-batch-size
 * (gradients averaged over the micro-batches), AdamW with Megatron's schedules, global-
 * norm clipping, skipped steps on non-finite gradients, evaluation on the valid split,
 * logs (a human line and JSON lines), checkpoints (HDF5, atomic, exact resume) and the
 * signal handshake (SIGTERM/SIGUSR1: save at the next step boundary and stop). Data come
 * from a kept plan (dataplan.h) or, with --mock-data, from a seeded generator. With
 * tensor and pipeline parallelism each rank holds its part of the model (params.h) and
 * checkpoints stay logical. The tool parses flags; this file runs. */
#ifndef MT_TRAIN_H
#define MT_TRAIN_H

#include <signal.h>
#include <stdint.h>

#include "backend/backend.h"
#include "model/config.h"
#include "data/dataplan.h"
#include "parallel/dist.h"
#include "parallel/ppsched.h"
#include "base/err.h"
#include "model/optim.h"
#include "model/lrsched.h"
#include "train/batchsteps.h"
#include "train/tblog.h"

struct mt_train_args {
	struct mt_config cfg;
	int64_t micro_batch_size, global_batch_size, train_iters;
	struct mt_sched_args sched;
	struct mt_adamw adam;
	double clip_grad;               /* 0: no clipping */
	int64_t log_interval, eval_interval, eval_iters, save_interval, exit_interval;
	double exit_duration_mins;      /* 0: none */
	const char *save, *load;
	int keep_last;
	int async_save;                 /* --async-save: parts written by a thread while training goes on */
	/* Megatron's checkpoint flags: --finetune (the weights alone, from iteration 0),
	 * --no-load-optim (no moments, a fresh learning-rate schedule), --no-load-rng (mt's
	 * checkpoints hold no generator state: accepted), --no-save-optim (weights only) */
	int finetune, no_load_optim, no_load_rng, no_save_optim;
	const char *log_json;           /* JSON lines file, or NULL */
	struct mt_tblog_args tensorboard; /* --tensorboard-dir and its flags (dir NULL: none) */
	uint64_t seed;
	int mock_data;
	int64_t max_skipped_steps;      /* consecutive */
	int skip_nonfinite_loss;        /* 0: a non-finite loss stops the run (Megatron's
					 * --check-for-nan-in-loss-and-grad); 1: the step is skipped */
	const struct mt_plan_args *data; /* NULL with mock data */
	const char *train_args_json;    /* stored in checkpoints */
	int quiet;
	int device_cuda;                 /* the CUDA backend, else the CPU one */
	struct mt_backend_opts backend;  /* precision, recompute, loss scaling */
	/* data parallelism (NULL: one process): rank r of D reads samples [r*m, (r+1)*m) of
	 * every m*D of the global batch, as Megatron's sampler does; only rank 0 logs and
	 * saves. Gradients are summed in the global micro-batch order (dp.h). */
	struct mt_dist *dist;
	int distributed_optimizer;      /* ZeRO-1: each rank keeps the AdamW state of its shard */
	/* tensor parallelism is dist->tp (its layout made by mt_dist_layout): each rank holds
	 * its shard of the model (params.h), checkpoints stay logical */
	int sequence_parallel;          /* --sequence-parallel */
	int tp_comm;                    /* --tensor-parallel-comm (backend.h MT_TP_COMM_*) */
	int pp_comm;                    /* --pipeline-parallel-comm (the same choices) */
	/* pipeline parallelism is dist->pp stages: the layers cut as pipeline says (its size
	 * dist->pp), each step run by the schedule pp_schedule (ppsched.h) over the
	 * micro-batches of a data-parallel rank; the loss comes from the last stage */
	struct mt_pp_split pipeline;
	enum mt_pp_kind pp_schedule;
	int pp_group;                   /* interleaved: micro-batches a group (0: the stages) */
	double label_smoothing;         /* --label-smoothing */
	int64_t ddp_bucket_size;        /* GPU: gradient bucket in elements (0: the backend's default) */
	int hang_rank;                  /* test hook: this rank (>= 0) stops answering ... */
	int64_t hang_step;              /* ... at the end of this iteration */
	int hang_backward;              /* ... or before its last micro-batch of that iteration */
	/* Megatron's --rampup-batch-size START INCR SAMPLES (start 0: none): the global batch
	 * of each iteration is mt_rampup_batch(consumed samples); sample-based schedule */
	int64_t rampup[3];
	/* Megatron's --step-batch-size-schedule (n 0: none): the global batch of each
	 * iteration is the entry in force at the consumed samples (batchsteps.h);
	 * global_batch_size is its last batch */
	struct mt_batch_steps batch_steps;
	int64_t lr_decay_samples, lr_warmup_samples; /* > 0: the schedule counts these (Megatron's sample-based flags) */
	int64_t train_samples;
};

/* Set by the tool's signal handler: save at the next step boundary and stop. */
extern volatile sig_atomic_t mt_train_stop_requested;

struct mt_train_result {
	int64_t iteration;
	double last_loss, last_valid_loss;
	int64_t skipped;
	int stopped_by_signal;
};

int mt_train_run(const struct mt_train_args *a, struct mt_train_result *r, struct mt_err *err);

#endif
