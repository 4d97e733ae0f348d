/* trainargs.c: mt-train's flags turned into a run (see trainargs.h): what the option
 * table leaves to work out, in the order the tool checks it, each refusal with the
 * message and the exit code the tool has always given. Not the parsing, not the run. */
#include "train/trainargs.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/log.h"
#include "ckpt/ckpt.h"
#include "model/params.h"
#include "parallel/ppsched.h"
#include "text/tokenizer.h"

/* A refusal shown with the usage lines (MT_EXIT_USAGE). */
__attribute__((format(printf, 2, 3))) static int usage(struct mt_err *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mt_err_vset(e, MT_EXIT_USAGE, fmt, ap);
	va_end(ap);
	return MT_TRAIN_ARGS_USAGE;
}

/* A refusal shown alone (MT_EXIT_USAGE, no hint). */
__attribute__((format(printf, 2, 3))) static int plain(struct mt_err *e, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	mt_err_vset(e, MT_EXIT_USAGE, fmt, ap);
	va_end(ap);
	return MT_TRAIN_ARGS_PLAIN;
}

void mt_train_opts_init(struct mt_train_opts *t, struct mt_train_args *a)
{
	memset(t, 0, sizeof(*t));
	t->tp = t->pp = 1;
	t->gpus_per_node = 8;
	t->schedule = -1;
	t->recompute = MT_RECOMPUTE_NONE;
	t->device = -1;
	t->timeout = 600;
	t->global_batch_size = -1;
	t->train_iters = t->train_samples = -1;
	memset(a, 0, sizeof(*a));
	mt_sched_args_defaults(&a->sched);
	mt_adamw_init(&a->adam);
	a->cfg.add_bias_linear = 1;
	a->clip_grad = 1.0;
	a->log_interval = 100;
	a->tensorboard.interval = 1;
	a->tensorboard.queue_size = 1000;
	a->eval_interval = 1000;
	a->eval_iters = 100;
	a->max_skipped_steps = 10;
	a->sched.lr = 1e-4;
	a->backend.initial_loss_scale = 4294967296.0;
	a->backend.min_loss_scale = 1.0;
	a->backend.loss_scale_window = 1000;
	a->backend.hysteresis = 2;
}

/* Megatron's --use-checkpoint-args: the sizes not given here from the checkpoint, and its
 * choices of normalization, activation, positions, biases and tying always */
static int from_checkpoint(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e)
{
	struct mt_ckpt_loaded st;
	struct mt_config cc;
	char dir[4096];
	int64_t it;

	if (!a->load)
		return usage(e, "--use-checkpoint-args needs --load");
	if (mt_ckpt_resolve(a->load, dir, sizeof(dir), &it, e) || mt_ckpt_read_state(dir, &st, e))
		return MT_TRAIN_ARGS_ERR;
	if (mt_config_from_json(&cc, st.config_json, e)) {
		mt_err_prefix(e, "checkpoint '%s'", dir);
		return MT_TRAIN_ARGS_ERR;
	}
	mt_ckpt_loaded_free(&st);
#define FROM_CKPT(f)   \
	if (!a->cfg.f) \
		a->cfg.f = cc.f
	FROM_CKPT(num_layers);
	FROM_CKPT(hidden_size);
	FROM_CKPT(num_attention_heads);
	FROM_CKPT(seq_length);
	FROM_CKPT(ffn_hidden_size);
	FROM_CKPT(kv_channels);
	FROM_CKPT(max_position_embeddings);
	FROM_CKPT(make_vocab_size_divisible_by);
#undef FROM_CKPT
	a->cfg.position_embedding_type = cc.position_embedding_type;
	a->cfg.rotary_base = cc.rotary_base;
	a->cfg.normalization = cc.normalization;
	a->cfg.norm_epsilon = cc.norm_epsilon;
	a->cfg.swiglu = cc.swiglu;
	a->cfg.add_bias_linear = cc.add_bias_linear;
	a->cfg.untie_embeddings_and_output_weights = cc.untie_embeddings_and_output_weights;
	if (cc.num_query_groups && cc.num_query_groups != cc.num_attention_heads) {
		t->gqa = 1;
		a->cfg.num_query_groups = cc.num_query_groups;
	}
	if (t->vocab <= 0 && !t->tok_type)
		t->vocab = cc.vocab_size;
	if (!t->quiet)
		mt_info("--use-checkpoint-args: the model of '%s' (%d layers, hidden %d, %d heads, sequence %d)", dir,
			a->cfg.num_layers, a->cfg.hidden_size, a->cfg.num_attention_heads, a->cfg.seq_length);
	return 0;
}

/* The global batch: --global-batch-size, a step schedule's last batch, else the
 * micro-batch. */
static int global_batch(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e)
{
	const struct mt_batch_steps *steps = &t->steps;

	if (steps->n) {
		/* Megatron refuses a schedule beside --global-batch-size; its launch script gives
		 * both, agreeing: the schedule's last batch is the global batch */
		if (t->global_batch_size <= 0)
			t->global_batch_size = steps->batch[steps->n - 1];
		else if (t->global_batch_size != steps->batch[steps->n - 1])
			return usage(e, "--step-batch-size-schedule ends at a batch of %lld but --global-batch-size is %lld",
				     (long long)steps->batch[steps->n - 1], (long long)t->global_batch_size);
		if (t->rampup[0])
			return usage(e, "give --step-batch-size-schedule or --rampup-batch-size, not both");
	}
	if (t->global_batch_size <= 0)
		t->global_batch_size = a->micro_batch_size;
	a->global_batch_size = t->global_batch_size;
	return 0;
}

/* The vocabulary: a tokenizer's, or --vocab-size. */
static int vocabulary(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e)
{
	int64_t vocab = t->vocab;

	if (t->tok_type && strcmp(t->tok_type, "NullTokenizer")) {
		struct mt_tokenizer tk;
		struct mt_tokenizer_args ta = { t->tok_type, t->vocab_file, t->merge_file, t->tok_model, NULL, vocab };
		if (mt_tokenizer_load(&tk, &ta, e))
			return MT_TRAIN_ARGS_ERR;
		vocab = tk.vocab.vocab_size;
		mt_tokenizer_free(&tk);
	} else if (t->tok_type && vocab > 0) {
		vocab += 1; /* NullTokenizer: ids below N and its end-of-document id N */
	}
	if (vocab <= 0)
		return usage(e, "the vocabulary size is unknown: give the tokenizer (--tokenizer-type ...) or --vocab-size");
	t->vocab = vocab;
	a->cfg.vocab_size = vocab;
	return 0;
}

/* The pipeline: Megatron's virtual stages from layers a chunk or chunks a stage, the
 * schedule interleaved with them, 1F1B without; what cannot run is refused here. */
static int pipeline(struct mt_train_args *a, const struct mt_train_opts *t, struct mt_err *e)
{
	int64_t pp = t->pp;

	if (t->vp_layers && t->vp_stages)
		return usage(e, "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, "
			     "not both");
	a->pipeline.size = (int)pp;
	a->pipeline.vp = 1;
	if (t->vp_layers) {
		if (a->cfg.num_layers % pp || (a->cfg.num_layers / pp) % t->vp_layers)
			return plain(e, "--num-layers-per-virtual-pipeline-stage %lld does not divide the %d layers of "
				     "each of the %lld stages (--num-layers %d)", (long long)t->vp_layers,
				     a->cfg.num_layers / (int)pp, (long long)pp, a->cfg.num_layers);
		a->pipeline.vp = (int)((a->cfg.num_layers / pp) / t->vp_layers);
	} else if (t->vp_stages) {
		a->pipeline.vp = (int)t->vp_stages;
	}
	a->pp_schedule = t->schedule >= 0 ? (enum mt_pp_kind)t->schedule
		       : a->pipeline.vp > 1 ? MT_PP_INTERLEAVED : MT_PP_1F1B;
	if (pp > 1 || a->pipeline.vp > 1 || a->pipeline.first || a->pipeline.last || t->schedule >= 0) {
		struct mt_params pt;
		a->cfg.padded_vocab_size = mt_config_padded_vocab(a->cfg.vocab_size, a->cfg.make_vocab_size_divisible_by,
								  (int)t->tp);
		if (mt_params_build_stage(&pt, &a->cfg, (int)t->tp, 0, a->sequence_parallel, &a->pipeline, 0, e))
			return MT_TRAIN_ARGS_ERR;
		mt_params_free(&pt);
		/* the schedule's own rules (the micro-batch counts are checked once the world is
		 * known) */
		if (mt_pp_sched_check(a->pp_schedule, (int)pp, a->pipeline.vp, (a->pp_group > 0 ? a->pp_group : (int)pp) * 64,
				      a->pp_group, e))
			return MT_TRAIN_ARGS_ERR;
	}
	return 0;
}

int mt_train_args_resolve(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e)
{
	int rc;

	if (t->use_ckpt_args && (rc = from_checkpoint(a, t, e)))
		return rc;
	if ((a->finetune || a->no_load_optim || a->no_load_rng) && !a->load)
		return usage(e, "--%s goes with --load",
			     a->finetune ? "finetune" : a->no_load_optim ? "no-load-optim" : "no-load-rng");
	if (t->gqa && !a->cfg.num_query_groups)
		return usage(e, "--group-query-attention needs --num-query-groups");
	if (!t->gqa)
		a->cfg.num_query_groups = 0;
	if (a->micro_batch_size <= 0)
		return usage(e, "--micro-batch-size is required");
	if (!t->tok_type && t->vocab_file && t->merge_file) {
		/* Megatron's GPT examples name the two files and no type: they describe GPT-2's BPE */
		t->tok_type = "GPT2BPETokenizer";
		if (!t->quiet)
			mt_info("--vocab-file and --merge-file without --tokenizer-type: GPT2BPETokenizer");
	}
	if ((rc = global_batch(a, t, e)) || (rc = vocabulary(a, t, e)))
		return rc;
	/* Megatron: without --kv-channels the heads split the hidden size evenly */
	if (!a->cfg.kv_channels && a->cfg.num_attention_heads > 0 && a->cfg.hidden_size % a->cfg.num_attention_heads)
		return usage(e, "--hidden-size %d is not a multiple of --num-attention-heads %d (or give --kv-channels)",
			     a->cfg.hidden_size, a->cfg.num_attention_heads);
	mt_config_defaults(&a->cfg);
	if (mt_config_validate(&a->cfg, e))
		return MT_TRAIN_ARGS_ERR;
	/* a micro-batch's largest activation (the logits), counted where it cannot wrap */
	if ((double)a->micro_batch_size * a->cfg.seq_length *
		    (double)(a->cfg.padded_vocab_size + 4 * (int64_t)a->cfg.ffn_hidden_size) >
	    0x1p56)
		return usage(e, "--micro-batch-size %lld x --seq-length %d x the vocabulary: too large to allocate",
			     (long long)a->micro_batch_size, a->cfg.seq_length);
	return pipeline(a, t, e);
}

int mt_train_args_estimate(struct mt_train_args *a, const struct mt_train_opts *t, struct mt_estimate_args *ea,
			   struct mt_err *e)
{
	/* the world: --world-size, else the launcher's, else one */
	const char *env[] = { "SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", NULL };
	long long world = t->world, tp = t->tp, pp = t->pp;

	for (int i = 0; !world && env[i]; i++)
		if (getenv(env[i]))
			world = atoll(getenv(env[i]));
	if (world <= 0)
		world = 1;
	if (world % (tp * pp))
		return plain(e, "world size %lld is not a multiple of tensor x pipeline parallel size %lld x %lld", world,
			     tp, pp);
	/* Megatron pads the vocabulary to a multiple of divisible-by x tensor-parallel size */
	a->cfg.padded_vocab_size = mt_config_padded_vocab(a->cfg.vocab_size, a->cfg.make_vocab_size_divisible_by, (int)tp);
	memset(ea, 0, sizeof(*ea));
	ea->cfg = &a->cfg;
	ea->world = (int)world;
	ea->tp = (int)tp;
	ea->pp = (int)pp;
	ea->dp = (int)(world / (tp * pp));
	ea->gpus_per_node = (int)t->gpus_per_node;
	ea->micro_batch_size = a->micro_batch_size;
	ea->global_batch_size = a->global_batch_size;
	memcpy(ea->rampup, t->rampup, sizeof(ea->rampup));
	ea->param_bytes = a->backend.precision != MT_PREC_FP32 ? 2 : 4;
	ea->dtype = a->backend.precision == MT_PREC_BF16 ? "bf16" : a->backend.precision == MT_PREC_FP16 ? "fp16" : "fp32";
	ea->distributed_optimizer = a->distributed_optimizer;
	ea->sequence_parallel = a->sequence_parallel && tp > 1;
	/* Megatron: --recompute-activations sets the granularity to selective */
	ea->recompute = t->recompute_act ? MT_RECOMPUTE_SELECTIVE : t->recompute;
	/* the GPU run it sizes: mt's CUDA backend (its attention keeps no s x s scores,
	 * the CPU backend's does; its logits come in chunks) */
	ea->cuda_backend = t->device != 0;
	/* what a GPU holds besides the planned tensors, measured with nvidia-smi on H200s
	 * (docs/perf-log.md): 0.5 GiB alone, 1.35 GiB with NCCL communicators */
	ea->runtime_bytes = t->device == 0 ? 0 : world > 1 ? 1.35 * 1073741824.0 : 0.5 * 1073741824.0;
	ea->pipeline = a->pipeline;
	ea->pp_schedule = a->pp_schedule;
	ea->pp_group = a->pp_group;
	return 0;
}

int mt_train_args_resolve_run(struct mt_train_args *a, struct mt_train_opts *t, struct mt_err *e)
{
	const int64_t *rampup = t->rampup;
	int64_t tp = t->tp;

	/* after --dry-run, which sizes GPU runs on machines without one */
	if (t->device < 0)
		t->device = mt_backend_cuda_usable();
	a->device_cuda = t->device;
	if (a->sequence_parallel && tp == 1) {
		/* Megatron turns it off without tensor parallelism */
		if (!t->quiet)
			mt_info("--sequence-parallel has no effect with --tensor-model-parallel-size 1");
		a->sequence_parallel = 0;
	}
	if (tp > 1) {
		/* errors before work: the split table refuses what does not divide */
		struct mt_params pt;
		a->cfg.padded_vocab_size = mt_config_padded_vocab(a->cfg.vocab_size, a->cfg.make_vocab_size_divisible_by, (int)tp);
		if (mt_params_build_tp(&pt, &a->cfg, (int)tp, 0, a->sequence_parallel, e))
			return MT_TRAIN_ARGS_ERR;
		mt_params_free(&pt);
	}
	if (t->device && a->label_smoothing > 0)
		return plain(e, "--label-smoothing: the CUDA backend does not smooth labels yet (add --device cpu)");
	if (!t->device && a->backend.precision != MT_PREC_FP32)
		return usage(e, "--bf16 and --fp16 need --device cuda (the CPU backend computes in fp32)");
	if (rampup[0] && (rampup[0] > a->global_batch_size || (a->global_batch_size - rampup[0]) % rampup[1]))
		return plain(e, "--rampup-batch-size %lld %lld %lld: the increment must divide --global-batch-size %lld - start",
			     (long long)rampup[0], (long long)rampup[1], (long long)rampup[2], (long long)a->global_batch_size);
	/* Megatron: a rampup and the *-samples schedule flags need sample-based training */
	if ((rampup[0] || a->lr_warmup_samples || a->lr_decay_samples) && (t->train_iters >= 0 || t->train_samples < 0))
		return plain(e, "--rampup-batch-size, --lr-warmup-samples and --lr-decay-samples need --train-samples "
			     "(not --train-iters)");
	/* before the data flags are finished, which turn --train-samples into iterations of
	 * the global batch */
	t->sample_based = t->train_iters < 0 && t->train_samples >= 0;
	if (a->mock_data && t->data_flags)
		return usage(e, "--mock-data and --data-path (or the other data flags) exclude each other: give one");
	if (a->mock_data) {
		if (t->train_samples < 0 && t->train_iters < 0)
			return usage(e, "--train-iters or --train-samples is required");
		a->train_iters = t->train_iters >= 0 ? t->train_iters : t->train_samples / a->global_batch_size;
		a->eval_iters = t->eval_iters;
		a->eval_interval = t->eval_interval;
	}
	return 0;
}

void mt_train_args_resolve_samples(struct mt_train_args *a, const struct mt_train_opts *t)
{
	const struct mt_batch_steps *steps = &t->steps;

	if (!a->mock_data)
		a->train_iters = t->train_iters >= 0 ? t->train_iters : t->train_samples / a->global_batch_size;
	a->batch_steps = *steps;
	if (steps->n && t->sample_based) {
		/* a step schedule over --train-samples: the iterations its batches make of them,
		 * and the sample-based learning-rate schedule (a batch is not a fixed number of
		 * samples); with --train-iters the iteration-based one, as Megatron's script */
		a->train_samples = t->train_samples;
		a->train_iters = mt_batch_steps_train_iters(steps, a->cfg.seq_length, t->train_samples);
		if (!a->lr_decay_samples)
			a->lr_decay_samples = t->train_samples;
	}
	if (t->rampup[0] || a->lr_warmup_samples || a->lr_decay_samples) {
		for (int i = 0; i < 3; i++)
			a->rampup[i] = t->rampup[i];
		a->train_samples = t->train_samples;
		if (!steps->n)
			a->train_iters = mt_rampup_train_iters(a->rampup, a->global_batch_size, t->train_samples);
		if (!a->lr_decay_samples)
			a->lr_decay_samples = t->train_samples;
	}
	a->sched.train_iters = a->train_iters;
	a->sched.global_batch_size = a->global_batch_size;
	a->seed = (uint64_t)t->seed;
	a->quiet = t->quiet;
}

char *mt_train_args_json(const struct mt_train_args *a, const struct mt_train_opts *t, int argc, char *const *argv)
{
	/* the flags, after --config expansion, so a checkpoint says how it was trained */
	json_t *j = json_object(), *args = json_array();
	char *s;

	for (int i = 1; i < argc; i++)
		json_array_append_new(args, json_string(argv[i]));
	json_object_set_new(j, "argv", args);
	json_object_set_new(j, "micro_batch_size", json_integer(a->micro_batch_size));
	json_object_set_new(j, "global_batch_size", json_integer(a->global_batch_size));
	json_object_set_new(j, "train_iters", json_integer(a->train_iters));
	json_object_set_new(j, "seed", json_integer(t->seed));
	if (t->tok_type) {
		/* which tokenizer, with absolute paths, so that mt-eval and mt-generate
		 * default to it wherever they run (model.h) */
		json_t *tk = json_object();
		const char *const files[][2] = { { "vocab_file", t->vocab_file }, { "merge_file", t->merge_file },
						  { "tokenizer_model", t->tok_model } };
		json_object_set_new(tk, "type", json_string(t->tok_type));
		for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
			char *abs;
			if (!files[i][1])
				continue;
			abs = realpath(files[i][1], NULL);
			json_object_set_new(tk, files[i][0], json_string(abs ? abs : files[i][1]));
			free(abs);
		}
		json_object_set_new(j, "tokenizer", tk);
	}
	s = json_dumps(j, JSON_COMPACT);
	json_decref(j);
	return s;
}
