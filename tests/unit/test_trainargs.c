/* Unit tests for lib/train/trainargs.c: mt-train's flags turned into a run. The defaults;
 * the global batch (a step schedule's last, the micro-batch) and the vocabulary
 * (--vocab-size, NullTokenizer's N + 1); Megatron's virtual pipeline stages from either
 * flag and the schedule they choose; the rampup and sample arithmetic (iterations of a
 * sample budget, of a rampup, of a step schedule; the sample-based decay); the --dry-run's
 * world; the arguments' JSON; and every refusal with its message, its exit code and how
 * the tool shows it (with the usage lines, or alone). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/trainargs.h"
#include "tap.h"

/* A small valid run: 8 layers, hidden 64, 4 heads, sequence 32, micro-batch 2, 100 ids,
 * on the CPU, quiet. */
static void base(struct mt_train_opts *t, struct mt_train_args *a)
{
	mt_train_opts_init(t, a);
	a->cfg.num_layers = 8;
	a->cfg.hidden_size = 64;
	a->cfg.num_attention_heads = 4;
	a->cfg.seq_length = 32;
	a->micro_batch_size = 2;
	t->vocab = 100;
	t->device = 0;
	t->quiet = 1;
	t->seed = 1234;
	t->eval_interval = 1000;
	t->eval_iters = 100;
}

/* resolve must refuse with this kind, code and message */
#define REFUSES(call, kind, want_code, want_msg, what)                                             \
	do {                                                                                       \
		struct mt_err e_ = { 0 };                                                          \
		int rc_ = (call);                                                                  \
		is_int(rc_, (kind), "%s: refused (%s)", (what), #kind);                            \
		is_int(e_.code, (want_code), "%s: exit code %d", (what), (want_code));             \
		is_str(e_.msg, (want_msg), "%s: message", (what));                                 \
	} while (0)
#define RESOLVE(t, a) mt_train_args_resolve(&(a), &(t), &e_)
#define RESOLVE_RUN(t, a) mt_train_args_resolve_run(&(a), &(t), &e_)

static void test_trainargs_defaults(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;

	mt_train_opts_init(&t, &a);
	is_int(t.tp, 1, "defaults: tensor-parallel size 1");
	is_int(t.pp, 1, "defaults: pipeline-parallel size 1");
	is_int(t.schedule, -1, "defaults: no schedule given");
	is_int(t.device, -1, "defaults: the device found at run time");
	is_int(t.gpus_per_node, 8, "defaults: 8 GPUs a node");
	ok(t.timeout == 600, "defaults: a 10-minute timeout");
	is_int(t.global_batch_size, -1, "defaults: no global batch given");
	ok(a.clip_grad == 1.0 && a.sched.lr == 1e-4, "defaults: clip 1.0, lr 1e-4");
	is_int(a.log_interval, 100, "defaults: a log line every 100 iterations");
	is_int(a.eval_interval, 1000, "defaults: evaluation every 1000");
	is_int(a.eval_iters, 100, "defaults: 100 evaluation iterations");
	is_int(a.max_skipped_steps, 10, "defaults: 10 skipped steps in a row");
	is_int(a.cfg.add_bias_linear, 1, "defaults: biases");
	ok(a.backend.initial_loss_scale == 4294967296.0 && a.backend.min_loss_scale == 1.0, "defaults: loss scales");
	is_int(a.backend.loss_scale_window, 1000, "defaults: loss-scale window");
	is_int(a.backend.hysteresis, 2, "defaults: hysteresis");
	is_int(a.tensorboard.interval, 1, "defaults: TensorBoard every iteration");
	is_int(a.tensorboard.queue_size, 1000, "defaults: TensorBoard queue");
}

static void test_trainargs_batch_vocab(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	struct mt_err e = { 0 };
	char *words[] = { "0:4 1K:8" };

	base(&t, &a);
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "resolve: a small model");
	is_int(a.global_batch_size, 2, "global batch: the micro-batch without --global-batch-size");
	is_int(a.cfg.vocab_size, 100, "vocabulary: --vocab-size");
	is_int(a.cfg.padded_vocab_size, 128, "vocabulary: padded to 128");
	is_int(a.pipeline.size, 1, "pipeline: one stage");
	is_int(a.pipeline.vp, 1, "pipeline: no virtual stages");
	is_int(a.pp_schedule, MT_PP_1F1B, "pipeline: 1F1B");

	base(&t, &a);
	t.tok_type = "NullTokenizer";
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "resolve: NullTokenizer");
	is_int(a.cfg.vocab_size, 101, "vocabulary: NullTokenizer's N ids and its end of document");

	base(&t, &a);
	t.vocab_file = "v.json";
	t.merge_file = "m.txt";
	t.tok_type = NULL;
	mt_train_args_resolve(&a, &t, &e);
	is_str(t.tok_type, "GPT2BPETokenizer", "tokenizer: the vocabulary and merge files without a type are GPT-2's");

	base(&t, &a);
	is_int(mt_batch_steps_parse(&t.steps, words, 1, &e), 0, "step schedule parsed");
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "resolve: a step schedule");
	is_int(a.global_batch_size, 8, "global batch: the step schedule's last");
	is_int(t.global_batch_size, 8, "global batch: handed back to the data flags");

	base(&t, &a);
	t.global_batch_size = 16;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "resolve: --global-batch-size");
	is_int(a.global_batch_size, 16, "global batch: --global-batch-size");
}

static void test_trainargs_refusals(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	char *words[] = { "0:4 1K:8" };
	struct mt_err pe = { 0 };

	base(&t, &a);
	a.micro_batch_size = 0;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--micro-batch-size is required", "no micro-batch");

	base(&t, &a);
	t.vocab = 0;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"the vocabulary size is unknown: give the tokenizer (--tokenizer-type ...) or --vocab-size", "no vocabulary");

	base(&t, &a);
	a.cfg.hidden_size = 60;
	a.cfg.num_attention_heads = 7;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"--hidden-size 60 is not a multiple of --num-attention-heads 7 (or give --kv-channels)", "uneven heads");

	base(&t, &a);
	a.finetune = 1;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--finetune goes with --load", "--finetune alone");
	base(&t, &a);
	a.no_load_optim = 1;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--no-load-optim goes with --load",
		"--no-load-optim alone");

	base(&t, &a);
	t.gqa = 1;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--group-query-attention needs --num-query-groups",
		"grouped-query attention without groups");

	base(&t, &a);
	t.use_ckpt_args = 1;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--use-checkpoint-args needs --load",
		"--use-checkpoint-args alone");

	base(&t, &a);
	mt_batch_steps_parse(&t.steps, words, 1, &pe);
	t.global_batch_size = 4;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"--step-batch-size-schedule ends at a batch of 8 but --global-batch-size is 4", "a step schedule's batch");
	base(&t, &a);
	mt_batch_steps_parse(&t.steps, words, 1, &pe);
	t.rampup[0] = 2, t.rampup[1] = 2, t.rampup[2] = 32;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"give --step-batch-size-schedule or --rampup-batch-size, not both", "a step schedule and a rampup");

	base(&t, &a);
	a.micro_batch_size = 200000;
	a.cfg.seq_length = 100000000;
	t.vocab = 100000000;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"--micro-batch-size 200000 x --seq-length 100000000 x the vocabulary: too large to allocate",
		"a micro-batch too large");

	{
		struct mt_err e = { 0 };
		base(&t, &a);
		t.use_ckpt_args = 1;
		a.load = "/nonexistent/ckpt";
		is_int(mt_train_args_resolve(&a, &t, &e), MT_TRAIN_ARGS_ERR, "--use-checkpoint-args: a missing checkpoint");
		is_int(e.code, MT_EXIT_IO, "--use-checkpoint-args: a missing checkpoint is an I/O error");
		like(e.msg, "'/nonexistent/ckpt'", "--use-checkpoint-args: the message names the directory");
	}
}

static void test_trainargs_virtual_stages(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	struct mt_err e = { 0 };

	/* 8 layers over 2 stages: 4 a stage */
	base(&t, &a);
	t.pp = 2;
	t.vp_layers = 2;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "virtual stages: 2 layers a chunk");
	is_int(a.pipeline.size, 2, "virtual stages: 2 stages");
	is_int(a.pipeline.vp, 2, "virtual stages: 4 layers a stage in chunks of 2 are 2 chunks");
	is_int(a.pp_schedule, MT_PP_INTERLEAVED, "virtual stages: interleaved by default");

	base(&t, &a);
	t.pp = 2;
	t.vp_layers = 1;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "virtual stages: 1 layer a chunk");
	is_int(a.pipeline.vp, 4, "virtual stages: 4 chunks a stage");

	base(&t, &a);
	t.pp = 2;
	t.vp_stages = 2;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "virtual stages: 2 chunks a stage");
	is_int(a.pipeline.vp, 2, "virtual stages: --num-virtual-stages-per-pipeline-rank");
	is_int(a.pp_schedule, MT_PP_INTERLEAVED, "virtual stages: interleaved");

	base(&t, &a);
	t.pp = 2;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "two stages");
	is_int(a.pipeline.vp, 1, "two stages: no virtual stages");
	is_int(a.pp_schedule, MT_PP_1F1B, "two stages: 1F1B");

	base(&t, &a);
	t.pp = 2;
	t.schedule = MT_PP_ZBH1;
	is_int(mt_train_args_resolve(&a, &t, &e), 0, "two stages, ZB-H1");
	is_int(a.pp_schedule, MT_PP_ZBH1, "the schedule given");

	base(&t, &a);
	t.pp = 2;
	t.vp_layers = 3;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"--num-layers-per-virtual-pipeline-stage 3 does not divide the 4 layers of each of the 2 stages "
		"(--num-layers 8)", "a chunk size that does not divide");

	base(&t, &a);
	t.pp = 2;
	t.vp_layers = 1;
	t.vp_stages = 2;
	REFUSES(RESOLVE(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, not both",
		"both virtual-stage flags");

	base(&t, &a);
	t.pp = 3;
	is_int(mt_train_args_resolve(&a, &t, &e), MT_TRAIN_ARGS_ERR, "8 layers over 3 stages: refused by the split");
	is_int(e.code, MT_EXIT_USAGE, "8 layers over 3 stages: a usage error");
}

/* resolve, then resolve_run, both expected to pass up to the run's checks */
static int resolved(struct mt_train_opts *t, struct mt_train_args *a)
{
	struct mt_err e = { 0 };

	if (mt_train_args_resolve(a, t, &e)) {
		printf("# resolve: %s\n", e.msg);
		return -1;
	}
	return 0;
}

static void test_trainargs_run_checks(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	struct mt_err e = { 0 };

	base(&t, &a);
	a.backend.precision = MT_PREC_BF16;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"--bf16 and --fp16 need --device cuda (the CPU backend computes in fp32)", "bf16 on the CPU");

	base(&t, &a);
	t.device = 1;
	a.label_smoothing = 0.1;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"--label-smoothing: the CUDA backend does not smooth labels yet (add --device cpu)", "smoothing on CUDA");

	base(&t, &a);
	t.global_batch_size = 8;
	t.rampup[0] = 2, t.rampup[1] = 4, t.rampup[2] = 32;
	t.train_samples = 64;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"--rampup-batch-size 2 4 32: the increment must divide --global-batch-size 8 - start",
		"a rampup's increment");

	base(&t, &a);
	t.global_batch_size = 8;
	t.rampup[0] = 2, t.rampup[1] = 2, t.rampup[2] = 32;
	t.train_iters = 4;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"--rampup-batch-size, --lr-warmup-samples and --lr-decay-samples need --train-samples (not --train-iters)",
		"a rampup with --train-iters");

	base(&t, &a);
	a.lr_warmup_samples = 4;
	t.train_samples = 64;
	t.train_iters = 2;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"--rampup-batch-size, --lr-warmup-samples and --lr-decay-samples need --train-samples (not --train-iters)",
		"--lr-warmup-samples with --train-iters");

	base(&t, &a);
	a.mock_data = 1;
	t.data_flags = 1;
	t.train_iters = 2;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE,
		"--mock-data and --data-path (or the other data flags) exclude each other: give one", "mock data and data");

	base(&t, &a);
	a.mock_data = 1;
	resolved(&t, &a);
	REFUSES(RESOLVE_RUN(t, a), MT_TRAIN_ARGS_USAGE, MT_EXIT_USAGE, "--train-iters or --train-samples is required",
		"mock data without a length");

	base(&t, &a);
	t.tp = 3;
	resolved(&t, &a);
	is_int(mt_train_args_resolve_run(&a, &t, &e), MT_TRAIN_ARGS_ERR, "4 heads over 3 tensor-parallel ranks");
	is_int(e.code, MT_EXIT_USAGE, "4 heads over 3 ranks: a usage error");

	base(&t, &a);
	a.sequence_parallel = 1;
	a.mock_data = 1;
	t.train_samples = 10;
	t.global_batch_size = 4;
	resolved(&t, &a);
	is_int(mt_train_args_resolve_run(&a, &t, &e), 0, "mock data over --train-samples");
	is_int(a.sequence_parallel, 0, "sequence parallelism off without tensor parallelism");
	is_int(a.device_cuda, 0, "the device given");
	is_int(t.sample_based, 1, "--train-samples without --train-iters: sample-based");
	is_int(a.train_iters, 2, "mock data: 10 samples make 2 whole batches of 4");
	is_int(a.eval_interval, 1000, "mock data: the evaluation interval of the data flags");
}

static void test_trainargs_samples(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	struct mt_err e = { 0 };
	char *words[] = { "0:4 512:8" };

	/* Megatron's rampup: 2 by 2 up to 8 over 16 samples (3 increments, 16/3 samples each):
	 * batches 2 2 2 4 4 6 8 8 at consumed 0 2 4 6 10 14 20 28, the next (at 36) past 40 */
	base(&t, &a);
	t.global_batch_size = 8;
	t.rampup[0] = 2, t.rampup[1] = 2, t.rampup[2] = 16;
	t.train_samples = 40;
	resolved(&t, &a);
	is_int(mt_train_args_resolve_run(&a, &t, &e), 0, "rampup: checks pass");
	t.train_iters = 5; /* as the data flags leave it: 40 / 8 */
	mt_train_args_resolve_samples(&a, &t);
	is_int(a.train_iters, 8, "rampup: 8 iterations within 40 samples");
	is_int(a.train_samples, 40, "rampup: the sample budget");
	is_int(a.lr_decay_samples, 40, "rampup: the decay over the samples");
	ok(a.rampup[0] == 2 && a.rampup[1] == 2 && a.rampup[2] == 16, "rampup: handed to the run");
	is_int(a.sched.train_iters, 8, "rampup: the schedule's iterations");
	is_int(a.sched.global_batch_size, 8, "rampup: the schedule's batch");
	is_int(a.seed, 1234, "the seed");
	is_int(a.quiet, 1, "quiet");

	/* a budget of samples: whole batches */
	base(&t, &a);
	t.global_batch_size = 8;
	t.train_samples = 70;
	resolved(&t, &a);
	mt_train_args_resolve_run(&a, &t, &e);
	t.train_iters = -1;
	mt_train_args_resolve_samples(&a, &t);
	is_int(a.train_iters, 8, "samples: 70 samples are 8 whole batches of 8");
	is_int(a.lr_decay_samples, 0, "samples: the iteration-based schedule");

	/* --lr-decay-samples given: kept */
	base(&t, &a);
	t.global_batch_size = 8;
	t.train_samples = 64;
	a.lr_decay_samples = 30;
	resolved(&t, &a);
	mt_train_args_resolve_run(&a, &t, &e);
	t.train_iters = 8;
	mt_train_args_resolve_samples(&a, &t);
	is_int(a.lr_decay_samples, 30, "--lr-decay-samples kept");
	is_int(a.train_samples, 64, "--lr-decay-samples: the sample budget");
	is_int(a.train_iters, 8, "--lr-decay-samples without a rampup: iterations of the global batch");

	/* a step schedule over --train-samples (sequence 32: 512 tokens are sample 16): 4
	 * batches of 4 to sample 16, then batches of 8: (64 - 16) / 8 = 6 more */
	base(&t, &a);
	mt_batch_steps_parse(&t.steps, words, 1, &e);
	t.train_samples = 64;
	resolved(&t, &a);
	is_int(mt_train_args_resolve_run(&a, &t, &e), 0, "step schedule: checks pass");
	t.train_iters = 8;
	mt_train_args_resolve_samples(&a, &t);
	is_int(a.train_iters, 10, "step schedule: 4 batches of 4, then 6 of 8");
	is_int(a.lr_decay_samples, 64, "step schedule: the sample-based decay");
	is_int(a.batch_steps.n, 2, "step schedule: handed to the run");

	/* a step schedule with --train-iters: the iterations given */
	base(&t, &a);
	mt_batch_steps_parse(&t.steps, words, 1, &e);
	t.train_iters = 7;
	resolved(&t, &a);
	mt_train_args_resolve_run(&a, &t, &e);
	mt_train_args_resolve_samples(&a, &t);
	is_int(a.train_iters, 7, "step schedule over --train-iters: those iterations");
	is_int(a.lr_decay_samples, 0, "step schedule over --train-iters: the iteration-based schedule");
}

static void test_trainargs_estimate(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	struct mt_estimate_args ea;

	base(&t, &a);
	t.pp = 2;
	t.world = 8;
	t.recompute_act = 1;
	resolved(&t, &a);
	{
		struct mt_err e_ = { 0 };
		is_int(mt_train_args_estimate(&a, &t, &ea, &e_), 0, "estimate: 8 ranks");
	}
	is_int(ea.world, 8, "estimate: --world-size");
	is_int(ea.dp, 4, "estimate: 8 ranks over 2 stages are 4 replicas");
	is_int(ea.recompute, MT_RECOMPUTE_SELECTIVE, "estimate: --recompute-activations is selective");
	is_str(ea.dtype, "fp32", "estimate: fp32");
	is_int(ea.cuda_backend, 0, "estimate: the CPU backend");
	ok(ea.runtime_bytes == 0, "estimate: nothing beside the CPU's tensors");

	base(&t, &a);
	t.device = -1;
	a.backend.precision = MT_PREC_BF16;
	setenv("SLURM_NTASKS", "2", 1);
	resolved(&t, &a);
	{
		struct mt_err e_ = { 0 };
		is_int(mt_train_args_estimate(&a, &t, &ea, &e_), 0, "estimate: the launcher's world");
	}
	unsetenv("SLURM_NTASKS");
	is_int(ea.world, 2, "estimate: SLURM_NTASKS");
	is_str(ea.dtype, "bf16", "estimate: bf16");
	is_int(ea.param_bytes, 2, "estimate: 2 bytes a weight");
	ok(ea.runtime_bytes == 1.35 * 1073741824.0, "estimate: NCCL's GPU memory with several ranks");

	base(&t, &a);
	t.pp = 2;
	t.world = 5;
	resolved(&t, &a);
	REFUSES(mt_train_args_estimate(&a, &t, &ea, &e_), MT_TRAIN_ARGS_PLAIN, MT_EXIT_USAGE,
		"world size 5 is not a multiple of tensor x pipeline parallel size 1 x 2", "a world that does not divide");
}

static void test_trainargs_json(void)
{
	struct mt_train_opts t;
	struct mt_train_args a;
	char *argv[] = { "mt-train", "--num-layers", "8", NULL };
	char *s;

	base(&t, &a);
	a.micro_batch_size = 2;
	a.global_batch_size = 8;
	a.train_iters = 5;
	s = mt_train_args_json(&a, &t, 3, argv);
	is_str(s, "{\"argv\":[\"--num-layers\",\"8\"],\"micro_batch_size\":2,\"global_batch_size\":8,\"train_iters\":5,"
		  "\"seed\":1234}", "json: the flags, batches, iterations and seed");
	free(s);
	t.tok_type = "NullTokenizer";
	s = mt_train_args_json(&a, &t, 1, argv);
	like(s, "\"tokenizer\":{\"type\":\"NullTokenizer\"}", "json: the tokenizer");
	free(s);
	t.tok_type = "GPT2BPETokenizer";
	t.vocab_file = "/nonexistent/vocab.json";
	s = mt_train_args_json(&a, &t, 1, argv);
	like(s, "\"vocab_file\":\"/nonexistent/vocab.json\"", "json: a file that does not resolve, as given");
	free(s);
}

int main(void)
{
	test_trainargs_defaults();
	test_trainargs_batch_vocab();
	test_trainargs_refusals();
	test_trainargs_virtual_stages();
	test_trainargs_run_checks();
	test_trainargs_samples();
	test_trainargs_estimate();
	test_trainargs_json();
	return tap_done();
}
