/* trainargs.h: mt-train's flags turned into a run (struct mt_train_args), between the
 * option table (bin/mt-train.c parses) and the run (train.h): the model from a
 * checkpoint's arguments (--use-checkpoint-args), the global batch and the vocabulary (a
 * tokenizer's, loaded for its size), the checked configuration, Megatron's virtual
 * pipeline stages and the schedule, the device, the checks before any work, the
 * iterations that a sample budget, a rampup or a step schedule make, the --dry-run's
 * estimate arguments, and the arguments' JSON that checkpoints keep. It prints nothing
 * but the informational lines Megatron prints too (mt_info) and never exits: a failure
 * is a message in a struct mt_err and a return value that says how the tool shows it.
 * Parsing the flags, the data flags' plan (bin/dataopts.c) and printing are the tool's. */
#ifndef MT_TRAINARGS_H
#define MT_TRAINARGS_H

#include <stdint.h>

#include "base/err.h"
#include "train/batchsteps.h"
#include "train/estimate.h"
#include "train/train.h"

/* What the flags say beyond the fields of struct mt_train_args they fill directly. */
struct mt_train_opts {
	int64_t vocab;                  /* --vocab-size (0: not given) */
	int64_t tp, pp;                 /* --tensor- and --pipeline-model-parallel-size (1) */
	int64_t vp_layers, vp_stages;   /* the two virtual-stage flags (0: not given) */
	int schedule;                   /* --pipeline-schedule (enum mt_pp_kind), -1: not given */
	int gqa;                        /* --group-query-attention */
	int use_ckpt_args;              /* --use-checkpoint-args */
	enum mt_recompute recompute;    /* --recompute-granularity */
	int recompute_act;              /* --recompute-activations */
	int device;                     /* --device: 1 cuda, 0 cpu, -1 not given */
	int dry_run;                    /* --dry-run */
	int64_t world, gpus_per_node;   /* --world-size (0: the launcher's), --gpus-per-node (8) */
	double timeout;                 /* --distributed-timeout-*, seconds (the tool's mt_dist) */
	int64_t rampup[3];              /* --rampup-batch-size (start 0: none) */
	struct mt_batch_steps steps;    /* --step-batch-size-schedule (n 0: none) */
	int quiet;
	/* the data flags (bin/dataopts.h) read here; tok_type and global_batch_size may be
	 * set (the tool hands them back to its data flags before it finishes those), and
	 * train_iters and train_samples are read again after that */
	const char *tok_type, *vocab_file, *merge_file, *tok_model;
	int64_t global_batch_size;      /* <= 0: not given */
	int64_t train_iters, train_samples; /* < 0: not given */
	int64_t eval_interval, eval_iters, seed;
	int data_flags;                 /* --data-path or another flag naming data was given */
	/* set by mt_train_args_resolve_run: --train-samples without --train-iters, before the
	 * data flags turn the samples into iterations */
	int sample_based;
};

/* How the tool shows a failure (the message is e->msg in each case). */
enum {
	MT_TRAIN_ARGS_ERR = -1,         /* as the error is: mt_die_err (a usage error gets the --help hint) */
	MT_TRAIN_ARGS_USAGE = -2,       /* a usage error shown with the usage lines (mt_die_usage) */
	MT_TRAIN_ARGS_PLAIN = -3,       /* the message alone, exit e->code (mt_die) */
};

/* The defaults of the flags and of the arguments they fill (Megatron's where it has them). */
void mt_train_opts_init(struct mt_train_opts *t, struct mt_train_args *a);

/* The model, the batch, the vocabulary and the pipeline: --use-checkpoint-args, the
 * global batch (a step schedule's last, else the micro-batch), the vocabulary (the
 * tokenizer's, NullTokenizer's N + 1, or --vocab-size), the configuration checked, the
 * virtual stages a stage (--num-layers-per-virtual-pipeline-stage or
 * --num-virtual-stages-per-pipeline-rank) and the schedule (interleaved with them, else
 * 1F1B), the split and schedule checked. 0, or one of MT_TRAIN_ARGS_*. */
int mt_train_args_resolve(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e);

/* --dry-run: the estimate's arguments for the world (--world-size, else the launcher's
 * SLURM_NTASKS, PMI_SIZE or OMPI_COMM_WORLD_SIZE, else one); a->cfg gets the vocabulary
 * padded for the tensor-parallel size. ea->cfg points into a. 0, or one of MT_TRAIN_ARGS_*. */
int mt_train_args_estimate(struct mt_train_args *a, const struct mt_train_opts *t, struct mt_estimate_args *ea,
			   struct mt_err *e);

/* After --dry-run, before the data flags are finished: the device (cuda when a GPU is
 * usable, unless --device), sequence parallelism off at tensor-parallel size 1, the
 * tensor-parallel split checked, what the device cannot do, the rampup's increment, the
 * flags that need --train-samples, --mock-data against the data flags and its
 * iterations; sets t->sample_based. 0, or one of MT_TRAIN_ARGS_*. */
int mt_train_args_resolve_run(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e);

/* Once the data flags are finished (t->train_iters and t->train_samples as they left
 * them; not read with --mock-data): the iterations (of the global batch, of a step
 * schedule's batches over --train-samples, or of a rampup), the sample-based schedule's
 * decay, the learning-rate schedule's iterations and batch, the seed and quiet. */
void mt_train_args_resolve_samples(struct mt_train_args *a, const struct mt_train_opts *t);

/* The arguments' JSON that checkpoints keep (malloc'd, compact): the flags as given after
 * --config (argv[1..argc)), the batch sizes, the iterations, the seed and the tokenizer
 * with absolute paths. NULL when out of memory. */
char *mt_train_args_json(const struct mt_train_args *a, const struct mt_train_opts *t, int argc, char *const *argv);

#endif
