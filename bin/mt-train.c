/* mt-train: train a GPT on GPUs (CUDA backend) or CPU ranks with HDF5 checkpoints: data,
 * tensor and pipeline parallelism behind Megatron's flags (lib/train does the work). */
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt.h"
#include "parallel/dist.h"
#include "train/batchsteps.h"
#include "train/estimate.h"
#include "base/log.h"
#include "text/tokenizer.h"
#include "model/params.h"
#include "train/train.h"
#include "dataopts.h"
#include "megatronopts.h"
#include "tool.h"

static const char *const synopsis[] = {
	"[--config FILE] --num-layers N --hidden-size H --num-attention-heads A --seq-length L (--data-path PATH... | --mock-data) --micro-batch-size B --global-batch-size G (--train-iters N | --train-samples N) [--lr LR] [--save DIR] [--load DIR]",
	NULL,
};

static const struct mt_tool_info info = {
	.name = "mt-train",
	.summary = "train a GPT on a GPU or the CPU with HDF5 checkpoints",
	.synopsis = synopsis,
	.description =
		"flags are Megatron-LM's; --config FILE reads flags from a file first (share/configs/),\n"
		"and flags on the command line override them",
	.doc = "docs/mt-train.md",
};

enum {
	O_CONFIG = 256, O_LAYERS, O_HIDDEN, O_HEADS, O_FFN, O_MAXPOS, O_DIVISIBLE, O_POSEMB, O_ROTARY, O_NORM,
	O_NORM_EPS, O_SWIGLU, O_NOBIAS, O_UNTIE, O_GQA, O_GROUPS, O_KV, O_INIT_STD, O_ATT_DROP, O_HID_DROP,
	O_MBS, O_LR, O_MIN_LR, O_BETA1, O_BETA2, O_EPS, O_WD, O_CLIP, O_DECAY_STYLE, O_WARMUP_ITERS,
	O_WARMUP_FRAC, O_DECAY_ITERS, O_WSD_ITERS, O_WSD_STYLE, O_LOG_INTERVAL, O_LOG_JSON, O_SAVE,
	O_SAVE_INTERVAL, O_LOAD, O_KEEP, O_ASYNC_SAVE, O_FINETUNE, O_NO_LOAD_OPTIM, O_NO_LOAD_RNG, O_NO_SAVE_OPTIM,
	O_USE_CKPT_ARGS, O_EXIT_INTERVAL, O_EXIT_MINS, O_MOCK, O_VOCAB_SIZE, O_MAX_SKIP,
	O_NAN_CHECK, O_NO_NAN_CHECK,
	O_DEVICE, O_TP, O_PP, O_BF16, O_FP16, O_LOSS_SCALE, O_INIT_LOSS_SCALE, O_MIN_LOSS_SCALE, O_LOSS_WINDOW,
	O_HYSTERESIS, O_DETERMINISTIC, O_RECOMPUTE,
	O_SEQ_PARALLEL, O_LABEL_SMOOTHING, O_RECOMPUTE_ACT, O_TP_COMM, O_PP_COMM,
	O_DIST_OPT, O_DIST_TIMEOUT, O_DIST_TIMEOUT_S, O_DRY_RUN, O_WORLD, O_GPUS_PER_NODE, O_RAMPUP,
	O_WARMUP_SAMPLES, O_DECAY_SAMPLES, O_BUCKET,
	O_PP_SCHEDULE, O_VP_LAYERS, O_VP_STAGES, O_VP_GROUP, O_PP_FIRST, O_PP_LAST,
	O_TB_DIR, O_TB_INTERVAL, O_TB_QUEUE, O_TB_TIMERS, O_TB_VALID_PPL, O_TB_MEMORY, O_STEP_BATCH,
};

static const struct mt_option opts[] = {
	{ "config", 0, MT_ARG_REQUIRED, O_CONFIG, "FILE", "read flags from FILE first (share/configs/*.conf)" },
	{ "num-layers", 0, MT_ARG_REQUIRED, O_LAYERS, "N", "transformer layers" },
	{ "hidden-size", 0, MT_ARG_REQUIRED, O_HIDDEN, "H", "hidden size" },
	{ "num-attention-heads", 0, MT_ARG_REQUIRED, O_HEADS, "A", "attention heads" },
	{ "ffn-hidden-size", 0, MT_ARG_REQUIRED, O_FFN, "F", "MLP size (default 4H; 2/3 of that with SwiGLU)" },
	{ "max-position-embeddings", 0, MT_ARG_REQUIRED, O_MAXPOS, "N", "learned positions (default: seq-length)" },
	{ "make-vocab-size-divisible-by", 0, MT_ARG_REQUIRED, O_DIVISIBLE, "N", "pad the vocabulary (default 128)" },
	{ "position-embedding-type", 0, MT_ARG_REQUIRED, O_POSEMB, "TYPE", "learned_absolute (default) or rope" },
	{ "rotary-base", 0, MT_ARG_REQUIRED, O_ROTARY, "B", "rotary base (default 10000)" },
	{ "normalization", 0, MT_ARG_REQUIRED, O_NORM, "NORM", "LayerNorm (default) or RMSNorm" },
	{ "norm-epsilon", 0, MT_ARG_REQUIRED, O_NORM_EPS, "EPS", "default 1e-5" },
	{ "swiglu", 0, MT_ARG_NONE, O_SWIGLU, NULL, "SwiGLU MLP instead of GELU" },
	{ "disable-bias-linear", 0, MT_ARG_NONE, O_NOBIAS, NULL, "no biases in linear layers" },
	{ "untie-embeddings-and-output-weights", 0, MT_ARG_NONE, O_UNTIE, NULL, "a separate output layer" },
	{ "group-query-attention", 0, MT_ARG_NONE, O_GQA, NULL, "grouped-query attention (with --num-query-groups)" },
	{ "num-query-groups", 0, MT_ARG_REQUIRED, O_GROUPS, "N", "key/value heads" },
	{ "kv-channels", 0, MT_ARG_REQUIRED, O_KV, "N", "head size (default hidden / heads)" },
	{ "init-method-std", 0, MT_ARG_REQUIRED, O_INIT_STD, "S", "initialization std (default 0.02)" },
	{ "attention-dropout", 0, MT_ARG_REQUIRED, O_ATT_DROP, "P", "accepted; only 0 is implemented" },
	{ "hidden-dropout", 0, MT_ARG_REQUIRED, O_HID_DROP, "P", "accepted; only 0 is implemented" },
	{ "vocab-size", 0, MT_ARG_REQUIRED, O_VOCAB_SIZE, "N", "vocabulary size without a tokenizer (NullTokenizer, mock data)" },
	{ "micro-batch-size", 0, MT_ARG_REQUIRED, O_MBS, "B", "samples per forward/backward pass" },
	{ "lr", 0, MT_ARG_REQUIRED, O_LR, "LR", "peak learning rate" },
	{ "min-lr", 0, MT_ARG_REQUIRED, O_MIN_LR, "LR", "final learning rate (default 0)" },
	{ "adam-beta1", 0, MT_ARG_REQUIRED, O_BETA1, "B", "default 0.9" },
	{ "adam-beta2", 0, MT_ARG_REQUIRED, O_BETA2, "B", "default 0.999" },
	{ "adam-eps", 0, MT_ARG_REQUIRED, O_EPS, "E", "default 1e-8" },
	{ "weight-decay", 0, MT_ARG_REQUIRED, O_WD, "W", "AdamW weight decay (default 0.01; none on biases and norms)" },
	{ "clip-grad", 0, MT_ARG_REQUIRED, O_CLIP, "C", "clip the global gradient norm (default 1.0; 0 for none)" },
	{ "lr-decay-style", 0, MT_ARG_REQUIRED, O_DECAY_STYLE, "S", "constant, linear (default), cosine, inverse-square-root, WSD" },
	{ "lr-warmup-iters", 0, MT_ARG_REQUIRED, O_WARMUP_ITERS, "N", "linear warmup iterations" },
	{ "lr-warmup-fraction", 0, MT_ARG_REQUIRED, O_WARMUP_FRAC, "F", "warmup as a fraction of the decay" },
	{ "lr-decay-iters", 0, MT_ARG_REQUIRED, O_DECAY_ITERS, "N", "decay iterations (default: train iterations)" },
	{ "lr-wsd-decay-iters", 0, MT_ARG_REQUIRED, O_WSD_ITERS, "N", "WSD's annealing iterations" },
	{ "lr-wsd-decay-style", 0, MT_ARG_REQUIRED, O_WSD_STYLE, "S", "linear, cosine, exponential (default), minus_sqrt" },
	{ "log-interval", 0, MT_ARG_REQUIRED, O_LOG_INTERVAL, "N", "a log line every N iterations (default 100)" },
	{ "log-json", 0, MT_ARG_REQUIRED, O_LOG_JSON, "FILE", "append the log lines to FILE as JSON lines" },
	{ "tensorboard-dir", 0, MT_ARG_REQUIRED, O_TB_DIR, "DIR", "write TensorBoard event files into DIR (Megatron's tags)" },
	{ "tensorboard-log-interval", 0, MT_ARG_REQUIRED, O_TB_INTERVAL, "N", "TensorBoard scalars every N iterations (default 1)" },
	{ "tensorboard-queue-size", 0, MT_ARG_REQUIRED, O_TB_QUEUE, "N", "events held in memory before a write (default 1000)" },
	{ "log-timers-to-tensorboard", 0, MT_ARG_NONE, O_TB_TIMERS, NULL, "also iteration-time, throughput and Megatron's phase timers (forward-backward-time, ...)" },
	{ "log-validation-ppl-to-tensorboard", 0, MT_ARG_NONE, O_TB_VALID_PPL, NULL, "also the validation perplexity" },
	{ "log-memory-to-tensorboard", 0, MT_ARG_NONE, O_TB_MEMORY, NULL, "also the memory held" },
	{ "save", 0, MT_ARG_REQUIRED, O_SAVE, "DIR", "checkpoint directory" },
	{ "save-interval", 0, MT_ARG_REQUIRED, O_SAVE_INTERVAL, "N", "save every N iterations (and at the end)" },
	{ "load", 0, MT_ARG_REQUIRED, O_LOAD, "DIR", "resume from DIR's latest checkpoint (or DIR/iter_N)" },
	{ "keep-last", 0, MT_ARG_REQUIRED, O_KEEP, "N", "keep only the newest N checkpoints" },
	{ "async-save", 0, MT_ARG_NONE, O_ASYNC_SAVE, NULL, "write checkpoints in the background while training goes on" },
	{ "finetune", 0, MT_ARG_NONE, O_FINETUNE, NULL, "with --load: the weights alone, training from iteration 0 with fresh optimizer state and schedule (Megatron's)" },
	{ "no-load-optim", 0, MT_ARG_NONE, O_NO_LOAD_OPTIM, NULL, "with --load: not the optimizer state (AdamW moments) nor the learning-rate schedule" },
	{ "no-load-rng", 0, MT_ARG_NONE, O_NO_LOAD_RNG, NULL, "accepted: mt's checkpoints hold no random-generator state (samples and initialization are seeded)" },
	{ "no-save-optim", 0, MT_ARG_NONE, O_NO_SAVE_OPTIM, NULL, "checkpoints hold the weights only, not the optimizer state" },
	{ "use-checkpoint-args", 0, MT_ARG_NONE, O_USE_CKPT_ARGS, NULL, "with --load: the model's flags from the checkpoint (those not given here; its normalization, activation, position embedding, biases and tying always)" },
	{ "exit-interval", 0, MT_ARG_REQUIRED, O_EXIT_INTERVAL, "N", "save and stop at a multiple of N iterations" },
	{ "exit-duration-in-mins", 0, MT_ARG_REQUIRED, O_EXIT_MINS, "M", "save and stop after M minutes" },
	{ "mock-data", 0, MT_ARG_NONE, O_MOCK, NULL, "synthetic tokens (give --vocab-size)" },
	{ "max-skipped-steps", 0, MT_ARG_REQUIRED, O_MAX_SKIP, "N", "stop after N non-finite steps in a row (default 10)" },
	{ "check-for-nan-in-loss-and-grad", 0, MT_ARG_NONE, O_NAN_CHECK, NULL, "a non-finite loss stops the run (the default)" },
	{ "no-check-for-nan-in-loss-and-grad", 0, MT_ARG_NONE, O_NO_NAN_CHECK, NULL,
	  "skip steps with a non-finite loss instead (up to --max-skipped-steps)" },
	{ "device", 0, MT_ARG_REQUIRED, O_DEVICE, "DEV", "cuda or cpu (default: cuda when a GPU is visible)" },
	{ "bf16", 0, MT_ARG_NONE, O_BF16, NULL, "cuda: bf16 weights and activations, fp32 master weights and AdamW state" },
	{ "fp16", 0, MT_ARG_NONE, O_FP16, NULL, "cuda: fp16 weights and activations with loss scaling" },
	{ "loss-scale", 0, MT_ARG_REQUIRED, O_LOSS_SCALE, "S", "fp16: a constant loss scale (default: dynamic)" },
	{ "initial-loss-scale", 0, MT_ARG_REQUIRED, O_INIT_LOSS_SCALE, "S", "fp16 dynamic scaling: first scale (default 2^32)" },
	{ "min-loss-scale", 0, MT_ARG_REQUIRED, O_MIN_LOSS_SCALE, "S", "fp16 dynamic scaling: lowest scale (default 1)" },
	{ "loss-scale-window", 0, MT_ARG_REQUIRED, O_LOSS_WINDOW, "N", "fp16 dynamic scaling: good steps before doubling (default 1000)" },
	{ "hysteresis", 0, MT_ARG_REQUIRED, O_HYSTERESIS, "N", "fp16 dynamic scaling: overflows before halving (default 2)" },
	{ "deterministic", 0, MT_ARG_NONE, O_DETERMINISTIC, NULL, "bit-identical runs (on Hopper, the attention backward's query gradients summed in a fixed order)" },
	{ "recompute-granularity", 0, MT_ARG_REQUIRED, O_RECOMPUTE, "G", "selective (attention's core) or full (each layer) in the backward pass" },
	{ "recompute-activations", 0, MT_ARG_NONE, O_RECOMPUTE_ACT, NULL, "selective recomputation (Megatron's shorthand for --recompute-granularity selective)" },
	{ "tensor-model-parallel-size", 0, MT_ARG_REQUIRED, O_TP, "N", "split every layer over N ranks as Megatron does (cpu; default 1)" },
	{ "sequence-parallel", 0, MT_ARG_NONE, O_SEQ_PARALLEL, NULL, "norms and residuals on 1/N of the sequence under tensor parallelism" },
	{ "tensor-parallel-comm", 0, MT_ARG_REQUIRED, O_TP_COMM, "T", "cuda: auto (default: nccl when each rank has its own GPU), nccl, or host (MPI through host memory; ranks may share a GPU)" },
	{ "pipeline-parallel-comm", 0, MT_ARG_REQUIRED, O_PP_COMM, "T", "cuda: the transfers between stages: auto (default: nccl send/recv when each stage has its own GPU), nccl, or host (MPI through host memory; stages may share a GPU)" },
	{ "label-smoothing", 0, MT_ARG_REQUIRED, O_LABEL_SMOOTHING, "A", "cross-entropy label smoothing in [0, 1) (cpu; default 0)" },
	{ "pipeline-model-parallel-size", 0, MT_ARG_REQUIRED, O_PP, "N", "split the layers over N pipeline stages (cpu; default 1)" },
	{ "pipeline-schedule", 0, MT_ARG_REQUIRED, O_PP_SCHEDULE, "S", "1f1b, interleaved or zb-h1 (default: interleaved with virtual stages, else 1f1b)" },
	{ "num-layers-per-virtual-pipeline-stage", 0, MT_ARG_REQUIRED, O_VP_LAYERS, "N", "interleaving: model chunks of N layers, several a stage" },
	{ "num-virtual-stages-per-pipeline-rank", 0, MT_ARG_REQUIRED, O_VP_STAGES, "V", "interleaving: V model chunks a stage" },
	{ "microbatch-group-size-per-virtual-pipeline-stage", 0, MT_ARG_REQUIRED, O_VP_GROUP, "G", "interleaving: micro-batches a group (default: the stages)" },
	{ "decoder-first-pipeline-num-layers", 0, MT_ARG_REQUIRED, O_PP_FIRST, "N", "layers of the first stage (the others share the rest)" },
	{ "decoder-last-pipeline-num-layers", 0, MT_ARG_REQUIRED, O_PP_LAST, "N", "layers of the last stage (the others share the rest)" },
	{ "use-distributed-optimizer", 0, MT_ARG_NONE, O_DIST_OPT, NULL, "shard the optimizer state over data-parallel ranks (ZeRO-1)" },
	{ "ddp-bucket-size", 0, MT_ARG_REQUIRED, O_BUCKET, "N", "cuda: gradient elements reduced together, overlapped with the backward pass (default 10000000)" },
	{ "distributed-timeout-minutes", 0, MT_ARG_REQUIRED, O_DIST_TIMEOUT, "M", "stop when a rank does not answer within M minutes (default 10)" },
	{ "distributed-timeout-seconds", 0, MT_ARG_REQUIRED, O_DIST_TIMEOUT_S, "S", "the same in seconds (0: wait forever)" },
	{ "dry-run", 0, MT_ARG_NONE, O_DRY_RUN, NULL, "print rank layout, parameters, memory per GPU and FLOPs per step; train nothing" },
	{ "world-size", 0, MT_ARG_REQUIRED, O_WORLD, "N", "ranks for --dry-run (default: the launcher's)" },
	{ "gpus-per-node", 0, MT_ARG_REQUIRED, O_GPUS_PER_NODE, "N", "for --dry-run's node count (default 8)" },
	{ "step-batch-size-schedule", 0, MT_ARG_LIST, O_STEP_BATCH, "\"T:B ...\"", "global batch B once T tokens are consumed (T with K, M, B or T suffixes)" },
	{ "rampup-batch-size", 0, MT_ARG_LIST, O_RAMPUP, "START INCR SAMPLES", "grow the global batch from START by INCR over SAMPLES samples" },
	{ "lr-warmup-samples", 0, MT_ARG_REQUIRED, O_WARMUP_SAMPLES, "N", "warmup in samples (sample-based schedule)" },
	{ "lr-decay-samples", 0, MT_ARG_REQUIRED, O_DECAY_SAMPLES, "N", "decay in samples (default: --train-samples)" },
	MT_DATA_OPTIONS,
	MT_MEGATRON_OPTIONS,
	{ 0 },
};

static void on_stop(int sig)
{
	(void)sig;
	mt_train_stop_requested = 1;
}

/* --config FILE: its flags go first, the command line's after them (and win). */
static char **with_config(int *argc, char **argv)
{
	const char *file = NULL;
	char **out, *text, *p;
	int n = 0, cap;
	FILE *f;
	long sz;

	for (int i = 1; i < *argc; i++) {
		const char *next = NULL;
		if (!strcmp(argv[i], "--"))
			break;
		if (!strcmp(argv[i], "--config") && i + 1 < *argc)
			next = argv[++i];
		else if (!strncmp(argv[i], "--config=", 9))
			next = argv[i] + 9;
		if (next && file)
			mt_die(MT_EXIT_USAGE, "--config given twice ('%s', then '%s'): give one file (put the other's flags "
			       "on the command line)", file, next);
		if (next)
			file = next;
	}
	if (!file)
		return argv;
	f = fopen(file, "r");
	if (!f)
		mt_die(MT_EXIT_IO, "cannot open config '%s'", file);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	rewind(f);
	text = malloc((size_t)sz + 1);
	if (!text || fread(text, 1, (size_t)sz, f) != (size_t)sz)
		mt_die(MT_EXIT_IO, "cannot read config '%s'", file);
	text[sz] = '\0';
	fclose(f);
	cap = *argc + (int)sz / 2 + 2;
	out = malloc((size_t)cap * sizeof(*out));
	out[n++] = argv[0];
	for (p = strtok(text, "\n"); p; p = strtok(NULL, "\n")) {
		char *hash = strchr(p, '#'), *tok;
		if (hash)
			*hash = '\0';
		for (tok = p; *tok;) {
			char *end;
			while (*tok == ' ' || *tok == '\t' || *tok == '\r')
				tok++;
			if (!*tok)
				break;
			end = tok;
			while (*end && *end != ' ' && *end != '\t' && *end != '\r')
				end++;
			if (*end)
				*end++ = '\0';
			out[n++] = tok;
			tok = end;
		}
	}
	for (int i = 1; i < *argc; i++)
		out[n++] = argv[i];
	out[n] = NULL;
	*argc = n;
	return out;
}

/* The error, and with several ranks every other one is stopped too (MPI_Abort). */
__attribute__((noreturn)) static void fail(struct mt_dist *dist, const struct mt_err *e)
{
	if (dist->world <= 1)
		mt_die_err(e);
	mt_error("%s", e->msg);
	mt_dist_abort(dist, e->code);
	exit(e->code);
}

int main(int argc, char **argv)
{
	struct mt_opt o;
	struct mt_dataopts d;
	struct mt_train_args a;
	struct mt_train_result r;
	struct mt_err e = { 0 };
	struct sigaction sa;
	long long vocab = 0, tp = 1, pp = 1, world = 0, gpn = 8, rampup[3] = { 0, 0, 0 };
	long long vp_layers = 0, vp_stages = 0;
	int schedule = -1;
	enum mt_recompute recompute = MT_RECOMPUTE_NONE;
	int recompute_act = 0, use_ckpt_args = 0;
	int id, gqa = 0, dry = 0, device = -1, sample_based;
	double timeout = 600;
	struct mt_dist dist;
	struct mt_batch_steps steps = { 0 };

	mt_tool_start(&info);
	argv = with_config(&argc, argv);
	memset(&a, 0, sizeof(a));
	mt_dataopts_init(&d);
	mt_sched_args_defaults(&a.sched);
	mt_adamw_init(&a.adam);
	a.cfg.add_bias_linear = 1;
	a.clip_grad = 1.0;
	a.log_interval = 100;
	a.tensorboard.interval = 1;
	a.tensorboard.queue_size = 1000;
	a.eval_interval = 1000;
	a.eval_iters = 100;
	a.max_skipped_steps = 10;
	a.sched.lr = 1e-4;
	a.backend.initial_loss_scale = 4294967296.0;
	a.backend.min_loss_scale = 1.0;
	a.backend.loss_scale_window = 1000;
	a.backend.hysteresis = 2;
	if (mt_opt_init(&o, &info, opts, argc, argv))
		mt_die_err(&o.err);
	while ((id = mt_opt_next(&o)) != MT_OPT_END) {
		mt_tool_common(&o, id);
		if (mt_dataopts_take(&d, &o, id)) {
			if (id == MT_DOPT_SEQ_LENGTH)
				a.cfg.seq_length = (int)d.seq_length;
			if (id == MT_DOPT_EVAL_INTERVAL)
				a.eval_interval = d.eval_interval;
			if (id == MT_DOPT_EVAL_ITERS)
				a.eval_iters = d.eval_iters;
			continue;
		}
		if (mt_megatron_take(&o, id))
			continue;
		switch (id) {
		case MT_OPT_ARG: mt_die_usage(&o, "unexpected argument '%s'", o.arg);
		case O_CONFIG: break; /* read already */
		case O_LAYERS: a.cfg.num_layers = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_HIDDEN: a.cfg.hidden_size = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_HEADS: a.cfg.num_attention_heads = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_FFN: a.cfg.ffn_hidden_size = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_MAXPOS: a.cfg.max_position_embeddings = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_DIVISIBLE: a.cfg.make_vocab_size_divisible_by = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_POSEMB:
			if (!strcmp(o.arg, "rope"))
				a.cfg.position_embedding_type = MT_POS_ROPE;
			else if (!strcmp(o.arg, "learned_absolute"))
				a.cfg.position_embedding_type = MT_POS_LEARNED;
			else
				mt_die_usage(&o, "--position-embedding-type must be learned_absolute or rope, not '%s'", o.arg);
			break;
		case O_ROTARY:
			a.cfg.rotary_base = mt_tool_real(&o);
			if (!(a.cfg.rotary_base > 0))
				mt_die_usage(&o, "--rotary-base must be positive, not '%s'", o.arg);
			break;
		case O_NORM:
			if (!strcmp(o.arg, "RMSNorm"))
				a.cfg.normalization = MT_NORM_RMSNORM;
			else if (!strcmp(o.arg, "LayerNorm"))
				a.cfg.normalization = MT_NORM_LAYERNORM;
			else
				mt_die_usage(&o, "--normalization must be LayerNorm or RMSNorm, not '%s'", o.arg);
			break;
		case O_NORM_EPS:
			a.cfg.norm_epsilon = mt_tool_real(&o);
			if (!(a.cfg.norm_epsilon > 0))
				mt_die_usage(&o, "--norm-epsilon must be positive, not '%s'", o.arg);
			break;
		case O_SWIGLU: a.cfg.swiglu = 1; break;
		case O_NOBIAS: a.cfg.add_bias_linear = 0; break;
		case O_UNTIE: a.cfg.untie_embeddings_and_output_weights = 1; break;
		case O_GQA: gqa = 1; break;
		case O_GROUPS: a.cfg.num_query_groups = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_KV: a.cfg.kv_channels = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_INIT_STD:
			a.cfg.init_method_std = mt_tool_real(&o);
			if (!(a.cfg.init_method_std > 0))
				mt_die_usage(&o, "--init-method-std must be positive, not '%s'", o.arg);
			break;
		case O_ATT_DROP: a.cfg.attention_dropout = mt_tool_real(&o); break;
		case O_HID_DROP: a.cfg.hidden_dropout = mt_tool_real(&o); break;
		case O_VOCAB_SIZE: vocab = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_MBS: a.micro_batch_size = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_LR:
			a.sched.lr = mt_tool_real(&o);
			if (!(a.sched.lr >= 0))
				mt_die_usage(&o, "--lr must be a finite number >= 0, not '%s'", o.arg);
			break;
		case O_MIN_LR:
			a.sched.min_lr = mt_tool_real(&o);
			if (!(a.sched.min_lr >= 0))
				mt_die_usage(&o, "--min-lr must be a finite number >= 0, not '%s'", o.arg);
			break;
		case O_BETA1:
			a.adam.beta1 = mt_tool_real(&o);
			if (!(a.adam.beta1 >= 0 && a.adam.beta1 < 1))
				mt_die_usage(&o, "--adam-beta1 must be in [0, 1), not '%s'", o.arg);
			break;
		case O_BETA2:
			a.adam.beta2 = mt_tool_real(&o);
			if (!(a.adam.beta2 >= 0 && a.adam.beta2 < 1))
				mt_die_usage(&o, "--adam-beta2 must be in [0, 1), not '%s'", o.arg);
			break;
		case O_EPS:
			a.adam.eps = mt_tool_real(&o);
			if (!(a.adam.eps > 0))
				mt_die_usage(&o, "--adam-eps must be positive, not '%s'", o.arg);
			break;
		case O_WD:
			a.adam.weight_decay = mt_tool_real(&o);
			if (!(a.adam.weight_decay >= 0))
				mt_die_usage(&o, "--weight-decay must be a finite number >= 0, not '%s'", o.arg);
			a.sched.start_weight_decay = a.sched.end_weight_decay = a.adam.weight_decay;
			break;
		case O_CLIP:
			a.clip_grad = mt_tool_real(&o);
			if (!(a.clip_grad >= 0))
				mt_die_usage(&o, "--clip-grad must be a finite number >= 0, not '%s'", o.arg);
			break;
		case O_DECAY_STYLE: {
			int s = mt_lr_style_parse(o.arg);
			if (s < 0)
				mt_die_usage(&o, "--lr-decay-style '%s': constant, linear, cosine, inverse-square-root or WSD", o.arg);
			a.sched.lr_decay_style = (enum mt_lr_style)s;
			break;
		}
		case O_WARMUP_ITERS: a.sched.lr_warmup_iters = mt_tool_num(&o, 0, INT64_MAX / 4); break;
		case O_WARMUP_FRAC: a.sched.lr_warmup_fraction = mt_tool_real(&o); break;
		case O_DECAY_ITERS: a.sched.lr_decay_iters = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_WSD_ITERS: a.sched.lr_wsd_decay_iters = mt_tool_num(&o, 0, INT64_MAX / 4); break;
		case O_WSD_STYLE: {
			int s = mt_wsd_style_parse(o.arg);
			if (s < 0)
				mt_die_usage(&o, "--lr-wsd-decay-style '%s': linear, cosine, exponential or minus_sqrt", o.arg);
			a.sched.lr_wsd_decay_style = (enum mt_wsd_style)s;
			break;
		}
		case O_LOG_INTERVAL: a.log_interval = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_LOG_JSON: a.log_json = o.arg; break;
		case O_TB_DIR: a.tensorboard.dir = o.arg; break;
		case O_TB_INTERVAL: a.tensorboard.interval = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_TB_QUEUE: a.tensorboard.queue_size = (int)mt_tool_num(&o, 1, 1 << 20); break;
		case O_TB_TIMERS: a.tensorboard.timers = 1; break;
		case O_TB_VALID_PPL: a.tensorboard.validation_ppl = 1; break;
		case O_TB_MEMORY: a.tensorboard.memory = 1; break;
		case O_STEP_BATCH:
			if (mt_batch_steps_parse(&steps, o.list, o.nlist, &e))
				mt_die_usage(&o, "%s", e.msg);
			break;
		case O_SAVE: a.save = o.arg; break;
		case O_SAVE_INTERVAL: a.save_interval = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_LOAD: a.load = o.arg; break;
		case O_KEEP: a.keep_last = (int)mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_ASYNC_SAVE: a.async_save = 1; break;
		case O_FINETUNE: a.finetune = 1; break;
		case O_NO_LOAD_OPTIM: a.no_load_optim = 1; break;
		case O_NO_LOAD_RNG: a.no_load_rng = 1; break;
		case O_NO_SAVE_OPTIM: a.no_save_optim = 1; break;
		case O_USE_CKPT_ARGS: use_ckpt_args = 1; break;
		case O_EXIT_INTERVAL: a.exit_interval = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_EXIT_MINS:
			a.exit_duration_mins = mt_tool_real(&o);
			if (!(a.exit_duration_mins >= 0))
				mt_die_usage(&o, "--exit-duration-in-mins must be 0 or more minutes");
			break;
		case O_MOCK: a.mock_data = 1; break;
		case O_MAX_SKIP: a.max_skipped_steps = mt_tool_num(&o, 0, INT64_MAX / 4); break;
		case O_NAN_CHECK: a.skip_nonfinite_loss = 0; break;
		case O_NO_NAN_CHECK: a.skip_nonfinite_loss = 1; break;
		case O_DEVICE:
			if (!strcmp(o.arg, "cpu"))
				device = 0;
			else if (!strcmp(o.arg, "cuda"))
				device = 1;
			else
				mt_die_usage(&o, "--device must be cuda or cpu, not '%s'", o.arg);
			break;
		case O_BF16: a.backend.precision = MT_PREC_BF16; break;
		case O_FP16: a.backend.precision = MT_PREC_FP16; break;
		case O_LOSS_SCALE: a.backend.loss_scale = mt_tool_real(&o); break;
		case O_INIT_LOSS_SCALE: a.backend.initial_loss_scale = mt_tool_real(&o); break;
		case O_MIN_LOSS_SCALE: a.backend.min_loss_scale = mt_tool_real(&o); break;
		case O_LOSS_WINDOW: a.backend.loss_scale_window = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_HYSTERESIS: a.backend.hysteresis = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_DETERMINISTIC: a.backend.deterministic = 1; break;
		case O_RECOMPUTE:
			if (!strcmp(o.arg, "full"))
				a.backend.recompute_full = 1, recompute = MT_RECOMPUTE_FULL;
			else if (!strcmp(o.arg, "selective"))
				a.backend.recompute_full = 0, recompute = MT_RECOMPUTE_SELECTIVE;
			else
				mt_die_usage(&o, "--recompute-granularity must be selective or full, not '%s'", o.arg);
			break;
		case O_RECOMPUTE_ACT: recompute_act = 1; break;
		case O_TP: tp = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_PP: pp = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_PP_SCHEDULE:
			if ((schedule = mt_pp_kind_parse(o.arg)) < 0)
				mt_die_usage(&o, "--pipeline-schedule must be 1f1b, interleaved or zb-h1, not '%s'", o.arg);
			break;
		case O_VP_LAYERS: vp_layers = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_VP_STAGES: vp_stages = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_VP_GROUP: a.pp_group = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_PP_FIRST: a.pipeline.first = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_PP_LAST: a.pipeline.last = (int)mt_tool_num(&o, 1, INT_MAX); break;
		case O_DIST_OPT: a.distributed_optimizer = 1; break;
		case O_SEQ_PARALLEL: a.sequence_parallel = 1; break;
		case O_TP_COMM:
			if (!strcmp(o.arg, "auto"))
				a.tp_comm = MT_TP_COMM_AUTO;
			else if (!strcmp(o.arg, "nccl"))
				a.tp_comm = MT_TP_COMM_NCCL;
			else if (!strcmp(o.arg, "host"))
				a.tp_comm = MT_TP_COMM_HOST;
			else
				mt_die_usage(&o, "--tensor-parallel-comm must be auto, nccl or host, not '%s'", o.arg);
			break;
		case O_PP_COMM:
			if (!strcmp(o.arg, "auto"))
				a.pp_comm = MT_TP_COMM_AUTO;
			else if (!strcmp(o.arg, "nccl"))
				a.pp_comm = MT_TP_COMM_NCCL;
			else if (!strcmp(o.arg, "host"))
				a.pp_comm = MT_TP_COMM_HOST;
			else
				mt_die_usage(&o, "--pipeline-parallel-comm must be auto, nccl or host, not '%s'", o.arg);
			break;
		case O_LABEL_SMOOTHING:
			a.label_smoothing = mt_tool_real(&o);
			if (!(a.label_smoothing >= 0 && a.label_smoothing < 1))
				mt_die_usage(&o, "--label-smoothing must be in [0, 1), not '%s'", o.arg);
			break;
		case O_BUCKET: a.ddp_bucket_size = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_DIST_TIMEOUT: timeout = mt_tool_real(&o) * 60; break;
		case O_DIST_TIMEOUT_S: timeout = mt_tool_real(&o); break;
		case O_DRY_RUN: dry = 1; break;
		case O_WORLD: world = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_GPUS_PER_NODE: gpn = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		case O_RAMPUP:
			if (o.nlist != 3)
				mt_die_usage(&o, "--rampup-batch-size takes three numbers: start, increment, samples");
			for (int i = 0; i < 3; i++) {
				char *end;
				rampup[i] = strtoll(o.list[i], &end, 10);
				if (*end || rampup[i] <= 0)
					mt_die_usage(&o, "--rampup-batch-size: '%s' is not a positive integer", o.list[i]);
			}
			break;
		case O_WARMUP_SAMPLES: a.lr_warmup_samples = mt_tool_num(&o, 0, INT64_MAX / 4); break;
		case O_DECAY_SAMPLES: a.lr_decay_samples = mt_tool_num(&o, 1, INT64_MAX / 4); break;
		}
	}
	if (use_ckpt_args) {
		/* Megatron's --use-checkpoint-args: the sizes not given here from the checkpoint,
		 * and its choices of normalization, activation, positions, biases and tying always */
		struct mt_ckpt_loaded st;
		struct mt_config cc;
		char dir[4096];
		int64_t it;
		if (!a.load)
			mt_die_usage(&o, "--use-checkpoint-args needs --load");
		if (mt_ckpt_resolve(a.load, dir, sizeof(dir), &it, &e) || mt_ckpt_read_state(dir, &st, &e))
			mt_die_err(&e);
		if (mt_config_from_json(&cc, st.config_json, &e)) {
			mt_err_prefix(&e, "checkpoint '%s'", dir);
			mt_die_err(&e);
		}
		mt_ckpt_loaded_free(&st);
#define FROM_CKPT(f) \
	if (!a.cfg.f)  \
		a.cfg.f = cc.f
		FROM_CKPT(num_layers);
		FROM_CKPT(hidden_size);
		FROM_CKPT(num_attention_heads);
		FROM_CKPT(seq_length);
		FROM_CKPT(ffn_hidden_size);
		FROM_CKPT(kv_channels);
		FROM_CKPT(max_position_embeddings);
		FROM_CKPT(make_vocab_size_divisible_by);
#undef FROM_CKPT
		a.cfg.position_embedding_type = cc.position_embedding_type;
		a.cfg.rotary_base = cc.rotary_base;
		a.cfg.normalization = cc.normalization;
		a.cfg.norm_epsilon = cc.norm_epsilon;
		a.cfg.swiglu = cc.swiglu;
		a.cfg.add_bias_linear = cc.add_bias_linear;
		a.cfg.untie_embeddings_and_output_weights = cc.untie_embeddings_and_output_weights;
		if (cc.num_query_groups && cc.num_query_groups != cc.num_attention_heads) {
			gqa = 1;
			a.cfg.num_query_groups = cc.num_query_groups;
		}
		if (vocab <= 0 && !d.tok_type)
			vocab = cc.vocab_size;
		if (!o.quiet)
			mt_info("--use-checkpoint-args: the model of '%s' (%d layers, hidden %d, %d heads, sequence %d)", dir,
				a.cfg.num_layers, a.cfg.hidden_size, a.cfg.num_attention_heads, a.cfg.seq_length);
	}
	if ((a.finetune || a.no_load_optim || a.no_load_rng) && !a.load)
		mt_die_usage(&o, "--%s goes with --load", a.finetune ? "finetune" : a.no_load_optim ? "no-load-optim" : "no-load-rng");
	if (gqa && !a.cfg.num_query_groups)
		mt_die_usage(&o, "--group-query-attention needs --num-query-groups");
	if (!gqa)
		a.cfg.num_query_groups = 0;
	if (a.micro_batch_size <= 0)
		mt_die_usage(&o, "--micro-batch-size is required");
	if (!d.tok_type && d.vocab && d.merges) {
		/* Megatron's GPT examples name the two files and no type: they describe GPT-2's BPE */
		d.tok_type = "GPT2BPETokenizer";
		if (!o.quiet)
			mt_info("--vocab-file and --merge-file without --tokenizer-type: GPT2BPETokenizer");
	}
	if (steps.n) {
		/* Megatron refuses a schedule beside --global-batch-size; its launch script gives
		 * both, agreeing: the schedule's last batch is the global batch */
		if (d.gbs <= 0)
			d.gbs = steps.batch[steps.n - 1];
		else if (d.gbs != steps.batch[steps.n - 1])
			mt_die_usage(&o, "--step-batch-size-schedule ends at a batch of %lld but --global-batch-size is %lld",
				     (long long)steps.batch[steps.n - 1], d.gbs);
		if (rampup[0])
			mt_die_usage(&o, "give --step-batch-size-schedule or --rampup-batch-size, not both");
	}
	if (d.gbs <= 0)
		d.gbs = a.micro_batch_size;
	a.global_batch_size = d.gbs;
	/* the vocabulary: a tokenizer's, or --vocab-size */
	if (d.tok_type && strcmp(d.tok_type, "NullTokenizer")) {
		struct mt_tokenizer tk;
		struct mt_tokenizer_args ta = { d.tok_type, d.vocab, d.merges, d.tok_model, NULL, vocab };
		if (mt_tokenizer_load(&tk, &ta, &e))
			mt_die_err(&e);
		vocab = tk.vocab.vocab_size;
		mt_tokenizer_free(&tk);
	} else if (d.tok_type && vocab > 0) {
		vocab += 1; /* NullTokenizer: ids below N and its end-of-document id N */
	}
	if (vocab <= 0)
		mt_die_usage(&o, "the vocabulary size is unknown: give the tokenizer (--tokenizer-type ...) or --vocab-size");
	a.cfg.vocab_size = vocab;
	/* Megatron: without --kv-channels the heads split the hidden size evenly */
	if (!a.cfg.kv_channels && a.cfg.num_attention_heads > 0 && a.cfg.hidden_size % a.cfg.num_attention_heads)
		mt_die_usage(&o, "--hidden-size %d is not a multiple of --num-attention-heads %d (or give --kv-channels)",
			     a.cfg.hidden_size, a.cfg.num_attention_heads);
	mt_config_defaults(&a.cfg);
	if (mt_config_validate(&a.cfg, &e))
		mt_die_err(&e);
	/* a micro-batch's largest activation (the logits), counted where it cannot wrap */
	if ((double)a.micro_batch_size * a.cfg.seq_length * (double)(a.cfg.padded_vocab_size + 4 * (int64_t)a.cfg.ffn_hidden_size) >
	    0x1p56)
		mt_die_usage(&o, "--micro-batch-size %lld x --seq-length %d x the vocabulary: too large to allocate",
			     (long long)a.micro_batch_size, a.cfg.seq_length);
	/* the pipeline: Megatron's virtual stages from layers a chunk or chunks a stage, the
	 * schedule interleaved with them, 1F1B without; what cannot run is refused here */
	if (vp_layers && vp_stages)
		mt_die_usage(&o, "give --num-layers-per-virtual-pipeline-stage or --num-virtual-stages-per-pipeline-rank, "
			     "not both");
	a.pipeline.size = (int)pp;
	a.pipeline.vp = 1;
	if (vp_layers) {
		if (a.cfg.num_layers % pp || (a.cfg.num_layers / pp) % vp_layers)
			mt_die(MT_EXIT_USAGE, "--num-layers-per-virtual-pipeline-stage %lld does not divide the %d layers of "
			       "each of the %lld stages (--num-layers %d)", vp_layers, a.cfg.num_layers / (int)pp, pp,
			       a.cfg.num_layers);
		a.pipeline.vp = (int)((a.cfg.num_layers / pp) / vp_layers);
	} else if (vp_stages) {
		a.pipeline.vp = (int)vp_stages;
	}
	a.pp_schedule = schedule >= 0 ? (enum mt_pp_kind)schedule : a.pipeline.vp > 1 ? MT_PP_INTERLEAVED : MT_PP_1F1B;
	if (pp > 1 || a.pipeline.vp > 1 || a.pipeline.first || a.pipeline.last || schedule >= 0) {
		struct mt_params pt;
		a.cfg.padded_vocab_size = mt_config_padded_vocab(a.cfg.vocab_size, a.cfg.make_vocab_size_divisible_by, (int)tp);
		if (mt_params_build_stage(&pt, &a.cfg, (int)tp, 0, a.sequence_parallel, &a.pipeline, 0, &e))
			mt_die_err(&e);
		mt_params_free(&pt);
		/* the schedule's own rules (the micro-batch counts are checked once the world is
		 * known) */
		if (mt_pp_sched_check(a.pp_schedule, (int)pp, a.pipeline.vp, (a.pp_group > 0 ? a.pp_group : (int)pp) * 64,
				      a.pp_group, &e))
			mt_die_err(&e);
	}
	if (dry) {
		/* the world: --world-size, else the launcher's, else one */
		const char *env[] = { "SLURM_NTASKS", "PMI_SIZE", "OMPI_COMM_WORLD_SIZE", NULL };
		struct mt_estimate_args ea;
		struct mt_estimate est;
		for (int i = 0; !world && env[i]; i++)
			if (getenv(env[i]))
				world = atoll(getenv(env[i]));
		if (world <= 0)
			world = 1;
		if (world % (tp * pp))
			mt_die(MT_EXIT_USAGE, "world size %lld is not a multiple of tensor x pipeline parallel size %lld x %lld",
			       world, tp, pp);
		/* Megatron pads the vocabulary to a multiple of divisible-by x tensor-parallel size */
		a.cfg.padded_vocab_size = mt_config_padded_vocab(a.cfg.vocab_size, a.cfg.make_vocab_size_divisible_by, (int)tp);
		memset(&ea, 0, sizeof(ea));
		ea.cfg = &a.cfg;
		ea.world = (int)world;
		ea.tp = (int)tp;
		ea.pp = (int)pp;
		ea.dp = (int)(world / (tp * pp));
		ea.gpus_per_node = (int)gpn;
		ea.micro_batch_size = a.micro_batch_size;
		ea.global_batch_size = a.global_batch_size;
		memcpy(ea.rampup, rampup, sizeof(ea.rampup));
		ea.param_bytes = a.backend.precision != MT_PREC_FP32 ? 2 : 4;
		ea.dtype = a.backend.precision == MT_PREC_BF16 ? "bf16" : a.backend.precision == MT_PREC_FP16 ? "fp16" : "fp32";
		ea.distributed_optimizer = a.distributed_optimizer;
		ea.sequence_parallel = a.sequence_parallel && tp > 1;
		/* Megatron: --recompute-activations sets the granularity to selective */
		ea.recompute = recompute_act ? MT_RECOMPUTE_SELECTIVE : recompute;
		/* the GPU run it sizes: mt's CUDA backend (its attention keeps no s x s scores,
		 * the CPU backend's does; its logits come in chunks) */
		ea.cuda_backend = device != 0;
		/* what a GPU holds besides the planned tensors, measured with nvidia-smi on H200s
		 * (docs/perf.md): 0.5 GiB alone, 1.35 GiB with NCCL communicators */
		ea.runtime_bytes = device == 0 ? 0 : world > 1 ? 1.35 * 1073741824.0 : 0.5 * 1073741824.0;
		ea.pipeline = a.pipeline;
		ea.pp_schedule = a.pp_schedule;
		ea.pp_group = a.pp_group;
		if (mt_estimate(&ea, &est, &e))
			mt_die_err(&e);
		mt_estimate_print(stdout, &ea, &est);
		/* thresholds are tokens (Megatron, with the sequence length known) */
		if (steps.n && mt_batch_steps_check(&steps, a.cfg.seq_length, a.micro_batch_size * ea.dp, 0, &e))
			mt_die_err(&e);
		for (int k = 0; k < steps.n; k++)
			printf("%s%lld from %.6g tokens (sample %lld)%s", k ? ", " : "batch-size schedule: ",
			       (long long)steps.batch[k], (double)steps.at[k],
			       (long long)mt_batch_steps_sample(&steps, k, a.cfg.seq_length), k == steps.n - 1 ? "\n" : "");
		mt_estimate_free(&est);
		return 0;
	}
	/* after --dry-run, which sizes GPU runs on machines without one */
	if (device < 0)
		device = mt_backend_cuda_usable();
	a.device_cuda = device;
	if (a.sequence_parallel && tp == 1) {
		/* Megatron turns it off without tensor parallelism */
		if (!o.quiet)
			mt_info("--sequence-parallel has no effect with --tensor-model-parallel-size 1");
		a.sequence_parallel = 0;
	}
	if (tp > 1) {
		/* errors before work: the split table refuses what does not divide */
		struct mt_params pt;
		a.cfg.padded_vocab_size = mt_config_padded_vocab(a.cfg.vocab_size, a.cfg.make_vocab_size_divisible_by, (int)tp);
		if (mt_params_build_tp(&pt, &a.cfg, (int)tp, 0, a.sequence_parallel, &e))
			mt_die_err(&e);
		mt_params_free(&pt);
	}
	if (device && a.label_smoothing > 0)
		mt_die(MT_EXIT_USAGE, "--label-smoothing: the CUDA backend does not smooth labels yet (add --device cpu)");
	if (!device && a.backend.precision != MT_PREC_FP32)
		mt_die_usage(&o, "--bf16 and --fp16 need --device cuda (the CPU backend computes in fp32)");
	if (rampup[0] && (rampup[0] > a.global_batch_size || (a.global_batch_size - rampup[0]) % rampup[1]))
		mt_die(MT_EXIT_USAGE, "--rampup-batch-size %lld %lld %lld: the increment must divide --global-batch-size %lld - start",
		       rampup[0], rampup[1], rampup[2], (long long)a.global_batch_size);
	/* Megatron: a rampup and the *-samples schedule flags need sample-based training */
	if ((rampup[0] || a.lr_warmup_samples || a.lr_decay_samples) && (d.train_iters >= 0 || d.train_samples < 0))
		mt_die(MT_EXIT_USAGE, "--rampup-batch-size, --lr-warmup-samples and --lr-decay-samples need --train-samples "
		       "(not --train-iters)");
	/* before mt_dataopts_finish, which turns --train-samples into iterations of the global batch */
	sample_based = d.train_iters < 0 && d.train_samples >= 0;
	if (a.mock_data && (d.ndata || d.data_args_path || d.per_split_path || d.nsplit_paths[0] || d.nsplit_paths[1] ||
			    d.nsplit_paths[2]))
		mt_die_usage(&o, "--mock-data and --data-path (or the other data flags) exclude each other: give one");
	if (a.mock_data) {
		if (d.train_samples < 0 && d.train_iters < 0)
			mt_die_usage(&o, "--train-iters or --train-samples is required");
		a.train_iters = d.train_iters >= 0 ? d.train_iters : d.train_samples / a.global_batch_size;
		a.eval_iters = d.eval_iters;
		a.eval_interval = d.eval_interval;
	} else {
		mt_dataopts_finish(&d, &o);
		a.data = &d.args;
		a.train_iters = d.train_iters >= 0 ? d.train_iters : d.train_samples / a.global_batch_size;
	}
	a.batch_steps = steps;
	if (steps.n && sample_based) {
		/* a step schedule over --train-samples: the iterations its batches make of them,
		 * and the sample-based learning-rate schedule (a batch is not a fixed number of
		 * samples); with --train-iters the iteration-based one, as Megatron's script */
		a.train_samples = d.train_samples;
		a.train_iters = mt_batch_steps_train_iters(&steps, a.cfg.seq_length, d.train_samples);
		if (!a.lr_decay_samples)
			a.lr_decay_samples = d.train_samples;
	}
	if (rampup[0] || a.lr_warmup_samples || a.lr_decay_samples) {
		for (int i = 0; i < 3; i++)
			a.rampup[i] = rampup[i];
		a.train_samples = d.train_samples;
		if (!steps.n)
			a.train_iters = mt_rampup_train_iters(a.rampup, a.global_batch_size, d.train_samples);
		if (!a.lr_decay_samples)
			a.lr_decay_samples = d.train_samples;
	}
	{
		/* the flags, after --config expansion, so a checkpoint says how it was trained */
		json_t *j = json_object(), *args = json_array();
		for (int i = 1; i < argc; i++)
			json_array_append_new(args, json_string(argv[i]));
		json_object_set_new(j, "argv", args);
		json_object_set_new(j, "micro_batch_size", json_integer(a.micro_batch_size));
		json_object_set_new(j, "global_batch_size", json_integer(a.global_batch_size));
		json_object_set_new(j, "train_iters", json_integer(a.train_iters));
		json_object_set_new(j, "seed", json_integer(d.seed));
		if (d.tok_type) {
			/* which tokenizer, with absolute paths, so that mt-eval and mt-generate
			 * default to it wherever they run (model.h) */
			json_t *tk = json_object();
			const char *const files[][2] = { { "vocab_file", d.vocab }, { "merge_file", d.merges },
							  { "tokenizer_model", d.tok_model } };
			json_object_set_new(tk, "type", json_string(d.tok_type));
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
		a.train_args_json = json_dumps(j, JSON_COMPACT);
		json_decref(j);
	}
	a.sched.train_iters = a.train_iters;
	a.sched.global_batch_size = a.global_batch_size;
	a.seed = (uint64_t)d.seed;
	a.quiet = o.quiet;
	if (mt_dist_init(&dist, &e) || mt_dist_layout(&dist, (int)tp, (int)pp, &e))
		fail(&dist, &e);
	dist.timeout = timeout;
	a.dist = &dist;
	if (dist.rank != 0)
		a.quiet = 1; /* rank 0 speaks for all */
	a.hang_rank = getenv("MT_TEST_HANG_RANK") ? atoi(getenv("MT_TEST_HANG_RANK")) : -1;
	a.hang_step = getenv("MT_TEST_HANG_STEP") ? atoll(getenv("MT_TEST_HANG_STEP")) : -1;
	a.hang_backward = getenv("MT_TEST_HANG_BACKWARD") != NULL;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop;
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGUSR1, &sa, NULL);
	if (mt_train_run(&a, &r, &e))
		fail(&dist, &e);
	if (!a.quiet)
		mt_info("done: %lld iterations, last loss %.6f%s", (long long)r.iteration, r.last_loss,
			r.stopped_by_signal ? " (stopped by a signal after saving)" : "");
	if (!a.mock_data)
		mt_dataopts_free(&d);
	mt_dist_finalize(&dist);
	return 0;
}
